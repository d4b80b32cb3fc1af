package charttest

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
)

// checkZone: each node learns its zone from a pod label (downward API),
// or reads its machine's label from the API server with a token that can
// only get Nodes, or has none; and the token is mounted only for that.
func checkZone(t *testing.T, objs []Object, sts *appsv1.StatefulSet, v effective) {
	t.Helper()
	pod := sts.Spec.Template.Spec
	c := pod.Containers[0]
	env := map[string]*corev1.EnvVarSource{}
	for _, e := range c.Env {
		env[e.Name] = e.ValueFrom
	}
	fieldOf := func(name string) string {
		if src := env[name]; src != nil && src.FieldRef != nil {
			return src.FieldRef.FieldPath
		}
		return ""
	}
	roles := All[rbacv1.ClusterRole](objs)
	bindings := All[rbacv1.ClusterRoleBinding](objs)
	var tokenMount string
	for _, m := range c.VolumeMounts {
		for _, vol := range pod.Volumes {
			if vol.Name == m.Name && vol.Projected != nil {
				for _, src := range vol.Projected.Sources {
					if src.ServiceAccountToken != nil {
						tokenMount = m.MountPath
					}
				}
			}
		}
	}
	switch {
	case v.zonePodLabel != "":
		if fieldOf("QUORUMBUS_ZONE") != "metadata.labels['"+v.zonePodLabel+"']" || argValue(c.Args, "-zone") != "$(QUORUMBUS_ZONE)" {
			t.Errorf("zone not read from the pod's %s label", v.zonePodLabel)
		}
	case v.zoneNodeLabel != "":
		if fieldOf("NODE_NAME") != "spec.nodeName" || argValue(c.Args, "-zone-from-kubernetes-node") != "$(NODE_NAME)" {
			t.Errorf("the node is not told which machine it runs on")
		}
		if argValue(c.Args, "-zone-label") != v.zoneNodeLabel {
			t.Errorf("-zone-label=%s, want %s", argValue(c.Args, "-zone-label"), v.zoneNodeLabel)
		}
		if tokenMount == "" || argValue(c.Args, "-kubernetes-account-dir") != tokenMount {
			t.Errorf("-kubernetes-account-dir=%s, but the token is mounted at %q", argValue(c.Args, "-kubernetes-account-dir"), tokenMount)
		}
		if len(roles) != 1 || len(bindings) != 1 {
			t.Fatalf("%d ClusterRoles and %d bindings, want one each to read Nodes", len(roles), len(bindings))
		}
		r := roles[0]
		if len(r.Rules) != 1 || strings.Join(r.Rules[0].Resources, ",") != "nodes" || strings.Join(r.Rules[0].Verbs, ",") != "get" || len(r.Rules[0].APIGroups) != 1 || r.Rules[0].APIGroups[0] != "" {
			t.Errorf("ClusterRole %s grants %+v; want get on nodes only", r.Name, r.Rules)
		}
		b := bindings[0]
		if b.RoleRef.Kind != "ClusterRole" || b.RoleRef.Name != r.Name || len(b.Subjects) != 1 ||
			b.Subjects[0].Kind != "ServiceAccount" || b.Subjects[0].Name != pod.ServiceAccountName || b.Subjects[0].Namespace != rel.Namespace {
			t.Errorf("ClusterRoleBinding %+v does not bind %s to the storage pods' account %s", b, r.Name, pod.ServiceAccountName)
		}
	}
	if v.zonePodLabel != "" || v.zoneNodeLabel == "" {
		if tokenMount != "" || len(roles)+len(bindings) > 0 {
			t.Errorf("a token (%q) or RBAC objects (%d) without a need to read Nodes", tokenMount, len(roles)+len(bindings))
		}
	}
	if v.zonePodLabel == "" && v.zoneNodeLabel == "" && (argValue(c.Args, "-zone") != "" || argValue(c.Args, "-zone-from-kubernetes-node") != "") {
		t.Errorf("zones are off, but the node is given one")
	}
}
