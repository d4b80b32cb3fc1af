package charttest

import (
	"fmt"
	"regexp"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// PodInfo is what the downward API tells a pod about itself.
type PodInfo struct {
	Name      string
	Namespace string
	IP        string
	NodeName  string // the machine it runs on (spec.nodeName)
	Labels    map[string]string
}

var labelRef = regexp.MustCompile(`^metadata\.labels\['([^']+)'\]$`)

// ContainerEnv resolves a container's environment as the kubelet does for
// the sources the chart uses: literal values (which may refer to earlier
// variables as $(NAME)) and downward-API field references. Any other
// source is an error, so that a chart change the local runs cannot honour
// fails loudly instead of running with a missing variable.
func ContainerEnv(c corev1.Container, pod PodInfo) (map[string]string, []string, error) {
	env := map[string]string{}
	var order []string
	if len(c.EnvFrom) > 0 {
		return nil, nil, fmt.Errorf("container %s: envFrom is not emulated", c.Name)
	}
	for _, e := range c.Env {
		var v string
		switch {
		case e.ValueFrom == nil:
			v = Expand(e.Value, env)
		case e.ValueFrom.FieldRef != nil:
			p := e.ValueFrom.FieldRef.FieldPath
			switch {
			case p == "metadata.name":
				v = pod.Name
			case p == "metadata.namespace":
				v = pod.Namespace
			case p == "status.podIP":
				v = pod.IP
			case p == "spec.nodeName":
				v = pod.NodeName
			case labelRef.MatchString(p):
				v = pod.Labels[labelRef.FindStringSubmatch(p)[1]]
			default:
				return nil, nil, fmt.Errorf("container %s: env %s: field %s is not emulated", c.Name, e.Name, p)
			}
		default:
			return nil, nil, fmt.Errorf("container %s: env %s: only values and fieldRef are emulated", c.Name, e.Name)
		}
		if _, seen := env[e.Name]; !seen {
			order = append(order, e.Name)
		}
		env[e.Name] = v
	}
	return env, order, nil
}

// Expand replaces $(NAME) by the variable's value as the kubelet does in
// command, args and env values: an undefined reference stays as written,
// and $$ is an escaped $.
func Expand(s string, env map[string]string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteString(s[i:])
				return b.String()
			}
			name := s[i+2 : i+2+end]
			if v, ok := env[name]; ok {
				b.WriteString(v)
			} else {
				b.WriteString(s[i : i+3+end])
			}
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}

// LocalArgs is the argument list of c as the pod would run it, with every
// path under one of its volume mounts moved to the local directory that
// stands in for the volume (mounts: mount name -> local directory). The
// image's filesystem is not there, so a flag value under a mount path is
// the only kind of path the chart may give.
func LocalArgs(c corev1.Container, env map[string]string, mounts map[string]string) ([]string, error) {
	type mp struct{ path, local string }
	var mps []mp
	for _, m := range c.VolumeMounts {
		local, ok := mounts[m.Name]
		if !ok {
			return nil, fmt.Errorf("container %s: no local directory for volume %s", c.Name, m.Name)
		}
		mps = append(mps, mp{strings.TrimSuffix(m.MountPath, "/"), local})
	}
	// Longest mount path first: /a/b before /a.
	sort.Slice(mps, func(i, j int) bool { return len(mps[i].path) > len(mps[j].path) })
	args := append(append([]string{}, c.Command...), c.Args...)
	out := make([]string, len(args))
	for i, a := range args {
		a = Expand(a, env)
		flag, val, hasVal := strings.Cut(a, "=")
		if hasVal && strings.HasPrefix(val, "/") {
			for _, m := range mps {
				if val == m.path || strings.HasPrefix(val, m.path+"/") {
					val = m.local + strings.TrimPrefix(val, m.path)
					break
				}
			}
			a = flag + "=" + val
		}
		if strings.Contains(a, "$(") {
			return nil, fmt.Errorf("container %s: argument %q refers to a variable the container does not define", c.Name, a)
		}
		out[i] = a
	}
	return out, nil
}
