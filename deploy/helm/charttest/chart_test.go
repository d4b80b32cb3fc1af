package charttest

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

func TestMain(m *testing.M) {
	RunHelperIfAsked()
	os.Exit(m.Run())
}

var rel = Release{Name: "qb", Namespace: "messaging"}

// valueSets are the configurations every structural check runs on.
var valueSets = []struct {
	name   string
	values string
}{
	{"defaults", ``},
	{"five nodes", `
storage: {replicas: 5, bootstrapReplicas: 5, groupReplicas: 5, groups: 8, maxReplicasPerNode: 16, goneAfter: 1h30m, pdb: {maxUnavailable: 2}}`},
	{"five nodes, three bootstrap", `
storage: {replicas: 5}`},
	{"tls from a secret", `
tls: {enabled: true, secretName: qb-tls}
gateway: {enabled: true}`},
	{"tls from cert-manager", `
tls: {enabled: true, certManager: {enabled: true, issuerRef: {name: letsencrypt}}}`},
	{"cluster tls from secrets and gossip key", `
clusterTLS: {secrets: {node: qb-tls-node, frontend: qb-tls-frontend, gateway: qb-tls-gateway}}
gossip: {keySecret: qb-gossip}
gateway: {enabled: true}
metrics: {serviceMonitor: {enabled: true}}`},
	{"plain cluster plane", `
clusterTLS: {enabled: false}
gateway: {enabled: true}
metrics: {serviceMonitor: {enabled: true}}`},
	{"service monitor, sas, hpa", `
metrics: {serviceMonitor: {enabled: true, labels: {release: prometheus}}}
sas: {existingSecret: qb-sas}
frontend: {autoscaling: {enabled: true, minReplicas: 3, maxReplicas: 12, targetMemoryUtilizationPercentage: 80}}`},
	{"gateway, hard anti-affinity, no zones, no-SASL peers, credits", `
throttleCredits: 2000
gateway: {enabled: true, replicas: 3}
storage: {antiAffinity: hard, zone: {nodeLabel: ""}, topologySpread: {enabled: false}}
frontend: {antiAffinity: none, replicas: 1, allowNoSasl: true}`},
	{"zone from a pod label", `
storage: {zone: {podLabel: topology.kubernetes.io/zone}}`},
	{"entities, pod ip, private registry", `
listenHost: $(POD_IP)
image: {repository: registry.example.com/quorumbus, digest: "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}
imagePullSecrets: [{name: regcred}]
clusterDomain: k8s.example
frontend:
  emulatorConfig: {UserConfig: {Namespaces: [{Name: sbemulatorns, Queues: [{Name: orders, Properties: {MaxDeliveryCount: 5}}]}]}}`},
}

func parseValues(t *testing.T, s string) map[string]any {
	t.Helper()
	v := map[string]any{}
	if err := yaml.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("values: %v", err)
	}
	return v
}

// TestLint runs Helm's linter (`helm lint --strict`: warnings fail) on
// every value set.
func TestLint(t *testing.T) {
	for _, vs := range valueSets {
		t.Run(vs.name, func(t *testing.T) {
			msgs, err := Lint(rel, parseValues(t, vs.values))
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range msgs {
				t.Errorf("lint: %s", m)
			}
		})
	}
}

// TestRender renders every value set, decodes every object strictly into
// its API type, and checks what the chart promises of them.
func TestRender(t *testing.T) {
	for _, vs := range valueSets {
		t.Run(vs.name, func(t *testing.T) {
			values := parseValues(t, vs.values)
			manifest, err := Template(rel, values)
			if err != nil {
				t.Fatal(err)
			}
			objs, err := Decode(manifest)
			if err != nil {
				t.Fatal(err)
			}
			eff := effectiveValues(t, values)
			checkNames(t, objs)
			checkPods(t, objs)
			checkSelectors(t, objs)
			checkServices(t, objs)
			checkStorage(t, objs, eff)
			checkFrontend(t, objs, eff)
			checkOptional(t, objs, eff)
			checkClusterTLS(t, objs, eff)
			checkCredits(t, objs, eff)
		})
	}
}

// effective is the handful of values the checks compare objects with,
// after the chart's defaults.
type effective struct {
	storageReplicas, bootstrap, groupReplicas, pdbMax int
	maxReplicasPerNode                                int
	tls, certManager, gateway, serviceMonitor, hpa    bool
	clusterTLS                                        bool
	clusterSecrets                                    map[string]string // by role; empty: generated
	gossipSecret                                      string
	sas                                               string
	clusterDomain, zonePodLabel, zoneNodeLabel        string
	goneAfter                                         string
	frontendReplicas                                  int
	throttleCredits                                   int
	allowNoSASL                                       bool
}

func effectiveValues(t *testing.T, values map[string]any) effective {
	t.Helper()
	defaults := map[string]any{}
	data, err := os.ReadFile(ChartDir() + "/values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, &defaults); err != nil {
		t.Fatal(err)
	}
	get := func(path string) any {
		for _, m := range []map[string]any{values, defaults} {
			var cur any = m
			for _, k := range strings.Split(path, ".") {
				mm, ok := cur.(map[string]any)
				if !ok {
					cur = nil
					break
				}
				cur, ok = mm[k]
				if !ok {
					cur = nil
					break
				}
			}
			if cur != nil {
				return cur
			}
		}
		t.Fatalf("no value %s", path)
		return nil
	}
	num := func(p string) int {
		switch v := get(p).(type) {
		case float64:
			return int(v)
		case int64:
			return int(v)
		}
		t.Fatalf("%s is not a number", p)
		return 0
	}
	return effective{
		storageReplicas: num("storage.replicas"), bootstrap: num("storage.bootstrapReplicas"),
		groupReplicas: num("storage.groupReplicas"), pdbMax: num("storage.pdb.maxUnavailable"),
		maxReplicasPerNode: num("storage.maxReplicasPerNode"),
		tls:                get("tls.enabled").(bool), certManager: get("tls.certManager.enabled").(bool),
		gateway: get("gateway.enabled").(bool), serviceMonitor: get("metrics.serviceMonitor.enabled").(bool),
		hpa: get("frontend.autoscaling.enabled").(bool), sas: get("sas.existingSecret").(string),
		clusterDomain: get("clusterDomain").(string), zonePodLabel: get("storage.zone.podLabel").(string),
		zoneNodeLabel:    get("storage.zone.nodeLabel").(string),
		goneAfter:        get("storage.goneAfter").(string),
		frontendReplicas: num("frontend.replicas"),
		throttleCredits:  num("throttleCredits"), allowNoSASL: get("frontend.allowNoSasl").(bool),
		clusterTLS: get("clusterTLS.enabled").(bool), gossipSecret: get("gossip.keySecret").(string),
		clusterSecrets: map[string]string{"node": get("clusterTLS.secrets.node").(string),
			"frontend": get("clusterTLS.secrets.frontend").(string), "gateway": get("clusterTLS.secrets.gateway").(string)},
	}
}

func checkNames(t *testing.T, objs []Object) {
	seen := map[string]string{}
	for _, o := range objs {
		key := o.Kind + "/" + o.Name
		if prev, dup := seen[key]; dup {
			t.Errorf("%s rendered twice (%s, %s)", key, prev, o.Source)
		}
		seen[key] = o.Source
		meta := o.Obj.(metav1.Object)
		if len(o.Name) > 63 {
			t.Errorf("%s: name longer than 63 characters", key)
		}
		if meta.GetLabels()["app.kubernetes.io/managed-by"] != "Helm" {
			t.Errorf("%s: no managed-by label", key)
		}
	}
}

// workload is a pod template and what selects it.
type workload struct {
	kind, name string
	selector   *metav1.LabelSelector
	template   corev1.PodTemplateSpec
}

func workloads(objs []Object) []workload {
	var out []workload
	for _, s := range All[appsv1.StatefulSet](objs) {
		out = append(out, workload{"StatefulSet", s.Name, s.Spec.Selector, s.Spec.Template})
	}
	for _, d := range All[appsv1.Deployment](objs) {
		out = append(out, workload{"Deployment", d.Name, d.Spec.Selector, d.Spec.Template})
	}
	return out
}

// checkPods: every pod and container runs as a non-root user without
// privileges or capabilities on a read-only root filesystem; probes point
// at ports the container declares; every mount has a volume.
func checkPods(t *testing.T, objs []Object) {
	for _, w := range workloads(objs) {
		spec := w.template.Spec
		where := w.kind + "/" + w.name
		psc := spec.SecurityContext
		if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 {
			t.Errorf("%s: pod security context does not require a non-root user", where)
		}
		if psc == nil || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("%s: no RuntimeDefault seccomp profile (PodSecurity restricted requires one)", where)
		}
		if spec.HostNetwork || spec.HostPID || spec.HostIPC {
			t.Errorf("%s: shares a host namespace", where)
		}
		if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
			t.Errorf("%s: mounts a service account token it does not need", where)
		}
		volumes := map[string]bool{}
		for _, v := range spec.Volumes {
			volumes[v.Name] = true
		}
		if w.kind == "StatefulSet" {
			for _, s := range All[appsv1.StatefulSet](objs) {
				if s.Name == w.name {
					for _, c := range s.Spec.VolumeClaimTemplates {
						volumes[c.Name] = true
					}
				}
			}
		}
		if len(spec.InitContainers) > 0 {
			t.Errorf("%s: init containers are not expected", where)
		}
		for _, c := range spec.Containers {
			cw := where + " container " + c.Name
			sc := c.SecurityContext
			switch {
			case sc == nil:
				t.Errorf("%s: no security context", cw)
				continue
			case sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser == 0:
				t.Errorf("%s: not non-root", cw)
			case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
				t.Errorf("%s: root filesystem writable", cw)
			case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
				t.Errorf("%s: allows privilege escalation", cw)
			case sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" || len(sc.Capabilities.Add) > 0:
				t.Errorf("%s: capabilities not all dropped", cw)
			}
			if c.Image == "" || len(c.Command) > 0 || len(c.Args) == 0 {
				t.Errorf("%s: want the image's entrypoint with a subcommand as args (image %q, command %q)", cw, c.Image, c.Command)
			}
			if c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
				t.Errorf("%s: no memory request and limit", cw)
			}
			ports := map[string]int32{}
			for _, p := range c.Ports {
				if _, dup := ports[p.Name]; dup || p.Name == "" {
					t.Errorf("%s: port name %q missing or repeated", cw, p.Name)
				}
				ports[p.Name] = p.ContainerPort
			}
			for name, probe := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
				if probe == nil || probe.HTTPGet == nil {
					t.Errorf("%s: no HTTP %s probe", cw, name)
					continue
				}
				want := map[string]string{"readiness": "/readyz", "liveness": "/healthz"}[name]
				if probe.HTTPGet.Path != want {
					t.Errorf("%s: %s probe on %s, want %s", cw, name, probe.HTTPGet.Path, want)
				}
				if !portExists(probe.HTTPGet.Port, ports) {
					t.Errorf("%s: %s probe on port %s, which the container does not declare", cw, name, probe.HTTPGet.Port.String())
				}
				if flag := argValue(c.Args, "-http-addr"); !strings.HasSuffix(flag, fmt.Sprintf(":%d", ports[probe.HTTPGet.Port.StrVal])) {
					t.Errorf("%s: %s probe port %s is not where -http-addr (%s) listens", cw, name, probe.HTTPGet.Port.String(), flag)
				}
			}
			for _, m := range c.VolumeMounts {
				if !volumes[m.Name] {
					t.Errorf("%s: mounts %s, which is no volume", cw, m.Name)
				}
			}
		}
	}
}

func portExists(p intstr.IntOrString, ports map[string]int32) bool {
	if p.Type == intstr.String {
		_, ok := ports[p.StrVal]
		return ok
	}
	for _, n := range ports {
		if n == p.IntVal {
			return true
		}
	}
	return false
}

// argValue is the value of -name=value in args.
func argValue(args []string, name string) string {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
	}
	return ""
}

// checkSelectors: each workload's selector selects its own pods, and no
// other workload's; PDBs, Services and ServiceMonitors select something.
func checkSelectors(t *testing.T, objs []Object) {
	ws := workloads(objs)
	selects := func(sel *metav1.LabelSelector, w workload) bool {
		s, err := metav1.LabelSelectorAsSelector(sel)
		if err != nil {
			t.Errorf("selector %v: %v", sel, err)
			return false
		}
		return !s.Empty() && s.Matches(labels.Set(w.template.Labels))
	}
	for _, w := range ws {
		for _, other := range ws {
			if got := selects(w.selector, other); got != (w.name == other.name) {
				t.Errorf("%s/%s's selector matches %s/%s: %v", w.kind, w.name, other.kind, other.name, got)
			}
		}
	}
	for _, pdb := range All[policyv1.PodDisruptionBudget](objs) {
		if n := countSelected(ws, func(w workload) bool { return selects(pdb.Spec.Selector, w) }); n != 1 {
			t.Errorf("PodDisruptionBudget %s selects %d workloads, want 1", pdb.Name, n)
		}
	}
	for _, svc := range All[corev1.Service](objs) {
		sel := &metav1.LabelSelector{MatchLabels: svc.Spec.Selector}
		if n := countSelected(ws, func(w workload) bool { return selects(sel, w) }); n != 1 {
			t.Errorf("Service %s selects %d workloads, want 1", svc.Name, n)
		}
	}
	for _, hpa := range All[autoscalingv2.HorizontalPodAutoscaler](objs) {
		ref := hpa.Spec.ScaleTargetRef
		if Find[appsv1.Deployment](objs, ref.Kind, ref.Name) == nil || ref.Kind != "Deployment" {
			t.Errorf("HorizontalPodAutoscaler %s scales %s/%s, which is not rendered", hpa.Name, ref.Kind, ref.Name)
		} else if d := Find[appsv1.Deployment](objs, "Deployment", ref.Name); d.Spec.Replicas != nil {
			t.Errorf("Deployment %s sets replicas while an autoscaler owns them", d.Name)
		}
		if hpa.Spec.MinReplicas == nil || *hpa.Spec.MinReplicas > hpa.Spec.MaxReplicas {
			t.Errorf("HorizontalPodAutoscaler %s: bounds %v..%d", hpa.Name, hpa.Spec.MinReplicas, hpa.Spec.MaxReplicas)
		}
	}
	for _, sm := range All[monitoringv1.ServiceMonitor](objs) {
		s, err := metav1.LabelSelectorAsSelector(&sm.Spec.Selector)
		if err != nil {
			t.Fatal(err)
		}
		scraped := 0
		for _, svc := range All[corev1.Service](objs) {
			if !s.Matches(labels.Set(svc.Labels)) {
				continue
			}
			for _, ep := range sm.Spec.Endpoints {
				if !servicePort(svc, ep.Port) {
					t.Errorf("ServiceMonitor %s scrapes port %s, which Service %s lacks", sm.Name, ep.Port, svc.Name)
				}
			}
			scraped++
		}
		if scraped == 0 {
			t.Errorf("ServiceMonitor %s selects no Service", sm.Name)
		}
	}
}

func countSelected(ws []workload, f func(workload) bool) int {
	n := 0
	for _, w := range ws {
		if f(w) {
			n++
		}
	}
	return n
}

func servicePort(svc *corev1.Service, name string) bool {
	for _, p := range svc.Spec.Ports {
		if p.Name == name {
			return true
		}
	}
	return false
}

// checkServices: every Service's target ports are ports its pods declare.
func checkServices(t *testing.T, objs []Object) {
	for _, svc := range All[corev1.Service](objs) {
		var pod *corev1.PodSpec
		for _, w := range workloads(objs) {
			if labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(w.template.Labels)) {
				pod = &w.template.Spec
			}
		}
		if pod == nil {
			continue // checkSelectors reports it
		}
		for _, sp := range svc.Spec.Ports {
			found := false
			for _, c := range pod.Containers {
				for _, cp := range c.Ports {
					if (sp.TargetPort.Type == intstr.String && cp.Name == sp.TargetPort.StrVal || sp.TargetPort.Type == intstr.Int && cp.ContainerPort == sp.TargetPort.IntVal) && cp.Protocol == sp.Protocol {
						found = true
					}
				}
			}
			if !found {
				t.Errorf("Service %s port %s targets %s/%s, which its pods do not declare", svc.Name, sp.Name, sp.TargetPort.String(), sp.Protocol)
			}
		}
	}
}

// checkStorage: the StatefulSet's identities, bootstrap list, join list
// and PDB agree with its replicas and its headless Service.
func checkStorage(t *testing.T, objs []Object, v effective) {
	sts := Find[appsv1.StatefulSet](objs, "StatefulSet", "")
	if sts == nil {
		t.Fatal("no StatefulSet")
	}
	if sts.Spec.Replicas == nil || int(*sts.Spec.Replicas) != v.storageReplicas {
		t.Errorf("StatefulSet replicas %d, want %d", ptrValue(sts.Spec.Replicas), v.storageReplicas)
	}
	if sts.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
		t.Errorf("podManagementPolicy %s: pods need each other to become ready, so they must start in parallel", sts.Spec.PodManagementPolicy)
	}
	svc := Find[corev1.Service](objs, "Service", sts.Spec.ServiceName)
	if svc == nil || svc.Spec.ClusterIP != corev1.ClusterIPNone || !svc.Spec.PublishNotReadyAddresses {
		t.Fatalf("StatefulSet's serviceName %q is not a headless Service that publishes unready pods", sts.Spec.ServiceName)
	}
	if len(sts.Spec.VolumeClaimTemplates) != 1 {
		t.Errorf("want one volume claim per pod, have %d templates", len(sts.Spec.VolumeClaimTemplates))
	}
	c := sts.Spec.Template.Spec.Containers[0]
	if c.Args[0] != "node" {
		t.Fatalf("storage container runs %q", c.Args[0])
	}
	host := func(i int) string {
		return fmt.Sprintf("%s-%d.%s.%s.svc.%s", sts.Name, i, svc.Name, rel.Namespace, v.clusterDomain)
	}
	grpcPort, gossipPort := containerPort(c, "grpc"), containerPort(c, "gossip-tcp")
	var wantBootstrap, wantJoin []string
	for i := range v.bootstrap {
		wantBootstrap = append(wantBootstrap, fmt.Sprintf("%s-%d=%s:%d", sts.Name, i, host(i), grpcPort))
		wantJoin = append(wantJoin, fmt.Sprintf("%s:%d", host(i), gossipPort))
	}
	if got := argValue(c.Args, "-bootstrap"); got != strings.Join(wantBootstrap, ",") {
		t.Errorf("-bootstrap=%s\nwant      %s", got, strings.Join(wantBootstrap, ","))
	}
	if got := argValue(c.Args, "-join"); got != strings.Join(wantJoin, ",") {
		t.Errorf("-join=%s\nwant %s", got, strings.Join(wantJoin, ","))
	}
	if got, want := argValue(c.Args, "-advertise-addr"), fmt.Sprintf("$(POD_NAME).%s.%s.svc.%s:%d", svc.Name, rel.Namespace, v.clusterDomain, grpcPort); got != want {
		t.Errorf("-advertise-addr=%s, want %s", got, want)
	}
	if got := argValue(c.Args, "-id"); got != "$(POD_NAME)" {
		t.Errorf("-id=%s: the pod's name is the node's stable identity", got)
	}
	if got := argValue(c.Args, "-replicas"); got != fmt.Sprint(v.groupReplicas) {
		t.Errorf("-replicas=%s, want %d", got, v.groupReplicas)
	}
	if got := argValue(c.Args, "-max-replicas-per-node"); got != fmt.Sprint(v.maxReplicasPerNode) {
		t.Errorf("-max-replicas-per-node=%s, want %d", got, v.maxReplicasPerNode)
	}
	if got := argValue(c.Args, "-gone-after"); got != v.goneAfter {
		t.Errorf("-gone-after=%s, want %s", got, v.goneAfter)
	} else if _, err := time.ParseDuration(got); err != nil {
		t.Errorf("-gone-after=%s: %v", got, err)
	}
	if !strings.HasPrefix(argValue(c.Args, "-data"), c.VolumeMounts[0].MountPath+"/") || c.VolumeMounts[0].Name != sts.Spec.VolumeClaimTemplates[0].Name {
		t.Errorf("-data=%s is not on the volume claim (%s at %s)", argValue(c.Args, "-data"), c.VolumeMounts[0].Name, c.VolumeMounts[0].MountPath)
	}
	checkZone(t, objs, sts, v)
	var pdb *policyv1.PodDisruptionBudget
	for _, p := range All[policyv1.PodDisruptionBudget](objs) {
		if labels.SelectorFromSet(p.Spec.Selector.MatchLabels).Matches(labels.Set(sts.Spec.Template.Labels)) {
			pdb = p
		}
	}
	if pdb == nil || pdb.Spec.MaxUnavailable == nil {
		t.Fatal("no PodDisruptionBudget with maxUnavailable for the storage pods")
	}
	quorumSlack := (min(v.groupReplicas, v.bootstrap) - 1) / 2
	if got := pdb.Spec.MaxUnavailable.IntValue(); got < 1 || got > quorumSlack || got != v.pdbMax {
		t.Errorf("storage PDB maxUnavailable %d: a group of %d replicas keeps quorum with at most %d down", got, min(v.groupReplicas, v.bootstrap), quorumSlack)
	}
}

func containerPort(c corev1.Container, name string) int32 {
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	return 0
}

// checkFrontend: front-ends read placement from every storage pod.
func checkFrontend(t *testing.T, objs []Object, v effective) {
	sts := Find[appsv1.StatefulSet](objs, "StatefulSet", "")
	var fe *appsv1.Deployment
	for _, d := range All[appsv1.Deployment](objs) {
		if d.Spec.Template.Spec.Containers[0].Args[0] == "frontend" {
			fe = d
		}
	}
	if fe == nil {
		t.Fatal("no front-end Deployment")
	}
	if !v.hpa && (fe.Spec.Replicas == nil || int(*fe.Spec.Replicas) != v.frontendReplicas) {
		t.Errorf("front-end replicas %d, want %d", ptrValue(fe.Spec.Replicas), v.frontendReplicas)
	}
	c := fe.Spec.Template.Spec.Containers[0]
	var want []string
	for i := range v.storageReplicas {
		want = append(want, fmt.Sprintf("%s-%d.%s.%s.svc.%s:%d", sts.Name, i, sts.Spec.ServiceName, rel.Namespace, v.clusterDomain, containerPort(sts.Spec.Template.Spec.Containers[0], "grpc")))
	}
	if got := argValue(c.Args, "-placement"); got != strings.Join(want, ",") {
		t.Errorf("-placement=%s\nwant %s", got, strings.Join(want, ","))
	}
	// The JS SDK with a SharedAccessSignature connection string skips
	// SASL: served only when the value says so.
	if got := contains(c.Args, "-allow-no-sasl"); got != v.allowNoSASL {
		t.Errorf("front-end -allow-no-sasl: %v, frontend.allowNoSasl: %v", got, v.allowNoSASL)
	}
	amqps := containerPort(c, "amqps") != 0
	if amqps != v.tls || (argValue(c.Args, "-amqps-addr") != "") != v.tls {
		t.Errorf("AMQPS port and listener present: %v, TLS on: %v", amqps, v.tls)
	}
	svc := Find[corev1.Service](objs, "Service", fe.Name)
	if svc == nil || !servicePort(svc, "amqp") || servicePort(svc, "amqps") != v.tls {
		t.Errorf("front-end Service does not offer AMQP (and AMQPS exactly when TLS is on)")
	}
}

// checkOptional: what value switches add or leave out.
func checkOptional(t *testing.T, objs []Object, v effective) {
	has := func(kind string) bool {
		for _, o := range objs {
			if o.Kind == kind {
				return true
			}
		}
		return false
	}
	if has("ServiceMonitor") != v.serviceMonitor {
		t.Errorf("ServiceMonitor rendered: %v, asked: %v", has("ServiceMonitor"), v.serviceMonitor)
	}
	if has("Certificate") != (v.tls && v.certManager) {
		t.Errorf("Certificate rendered: %v", has("Certificate"))
	}
	if has("HorizontalPodAutoscaler") != v.hpa {
		t.Errorf("HorizontalPodAutoscaler rendered: %v, asked: %v", has("HorizontalPodAutoscaler"), v.hpa)
	}
	gateways := 0
	for _, d := range All[appsv1.Deployment](objs) {
		if d.Spec.Template.Spec.Containers[0].Args[0] == "gateway" {
			gateways++
		}
	}
	if (gateways == 1) != v.gateway {
		t.Errorf("gateway Deployments: %d, enabled: %v", gateways, v.gateway)
	}
	for _, w := range workloads(objs) {
		if w.template.Spec.Containers[0].Args[0] == "node" {
			continue
		}
		secrets := map[string]bool{}
		for _, vol := range w.template.Spec.Volumes {
			if vol.Secret != nil {
				secrets[vol.Secret.SecretName] = true
			}
		}
		if v.tls && len(secrets) == 0 {
			t.Errorf("%s: TLS on but no Secret mounted", w.name)
		}
		wantSAS := v.sas
		if wantSAS == "" {
			wantSAS = rel.Name + "-quorumbus-sas"
		}
		if !secrets[wantSAS] || argValue(w.template.Spec.Containers[0].Args, "-sas-rules") == "" {
			t.Errorf("%s: SAS rules Secret %s not mounted and passed: a front-end refuses to start without a rule", w.name, wantSAS)
		}
	}
	generated := Find[corev1.Secret](objs, "Secret", rel.Name+"-quorumbus-sas")
	if (generated != nil) != (v.sas == "") {
		t.Errorf("generated SAS Secret rendered: %v, existingSecret: %q", generated != nil, v.sas)
	}
	if generated != nil {
		rules, err := SASRules(generated, "rules.json")
		if err != nil {
			t.Error(err)
		} else if len(rules) != 1 || rules[0].Name != "RootManageSharedAccessKey" || len(rules[0].PrimaryKey) != 44 || rules[0].PrimaryKey == rules[0].SecondaryKey {
			t.Errorf("generated rules: %+v", rules)
		}
	}
	if c := Find[Certificate](objs, "Certificate", ""); c != nil {
		fe := Find[corev1.Service](objs, "Service", rel.Name+"-quorumbus-frontend")
		if fe == nil || !contains(c.Spec.DNSNames, fe.Name+"."+rel.Namespace+".svc."+v.clusterDomain) {
			t.Errorf("Certificate does not name the front-end Service: %v", c.Spec.DNSNames)
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestRefusedValues: wrong values fail at install with a message saying
// what is wrong, from the schema or from the chart's own checks.
func TestRefusedValues(t *testing.T) {
	for _, tc := range []struct{ name, values, want string }{
		{"replicas not a number", `storage: {replicas: three}`, "/storage/replicas"},
		{"no storage pods", `storage: {replicas: 0}`, "/storage/replicas"},
		{"misspelt value", `storage: {replica: 5}`, "replica"},
		{"unknown top-level value", `storgae: {replicas: 5}`, "storgae"},
		{"pdb past quorum", `storage: {pdb: {maxUnavailable: 2}}`, "maxUnavailable"},
		{"bootstrap past replicas", `storage: {replicas: 3, bootstrapReplicas: 5, groupReplicas: 3}`, "bootstrapReplicas"},
		{"group replicas past nodes", `storage: {replicas: 3, groupReplicas: 5}`, "groupReplicas"},
		{"negative replicas per node", `storage: {maxReplicasPerNode: -1}`, "maxReplicasPerNode"},
		{"gone-after not a duration", `storage: {goneAfter: ten minutes}`, "goneAfter"},
		{"gone-after without a unit", `storage: {goneAfter: 600}`, "goneAfter"},
		{"tls without a certificate", `tls: {enabled: true}`, "tls.secretName"},
		{"one cluster tls secret for every role", `clusterTLS: {enabled: true, secretName: qb-cluster-tls}`, "clusterTLS.secrets"},
		{"cluster tls secrets of some roles", `clusterTLS: {secrets: {node: a, frontend: b}}
gateway: {enabled: true}`, "clusterTLS.secrets"},
		{"cluster tls secret of an unknown role", `clusterTLS: {secrets: {storage: a}}`, "storage"},
		{"cert-manager without issuer", `tls: {enabled: true, certManager: {enabled: true}}`, "issuerRef"},
		{"bad log level", `logLevel: verbose`, "logLevel"},
		{"bad anti-affinity", `storage: {antiAffinity: sometimes}`, "antiAffinity"},
		{"bad digest", `image: {digest: latest}`, "digest"},
		{"autoscaler bounds", `frontend: {autoscaling: {enabled: true, minReplicas: 5, maxReplicas: 2}}`, "minReplicas"},
		{"privileged gateway port", `gateway: {ports: {https: 443}}`, "https"},
		{"zone label not a label key", `storage: {zone: {nodeLabel: "zone name"}}`, "nodeLabel"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Template(rel, parseValues(t, tc.values))
			if err == nil {
				t.Fatalf("values %s were accepted", tc.values)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not mention %q", err, tc.want)
			}
		})
	}
}

// TestDecodeIsStrict: the decoder the checks rely on refuses a misspelt
// field and an empty document.
func TestDecodeIsStrict(t *testing.T) {
	for name, doc := range map[string]string{
		"misspelt field": "# Source: x.yaml\napiVersion: v1\nkind: Service\nmetadata: {name: a}\nspec: {clusterIp: None}\n",
		"unknown kind":   "# Source: x.yaml\napiVersion: v1\nkind: Servce\nmetadata: {name: a}\n",
		"empty":          "# Source: x.yaml\n# nothing\n",
		"no name":        "# Source: x.yaml\napiVersion: v1\nkind: ConfigMap\nmetadata: {}\n",
		"duplicate key":  "# Source: x.yaml\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndata: {k: a, k: b}\n",
	} {
		if _, err := Decode("---\n" + doc); err == nil {
			t.Errorf("%s: decoded without error", name)
		}
	}
}

// ptrValue is *p, or -1 for nil.
func ptrValue(p *int32) int32 {
	if p == nil {
		return -1
	}
	return *p
}
