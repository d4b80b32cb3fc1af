package charttest

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// TestChartWiring runs what the chart renders for four storage nodes (three
// that bootstrap the cluster, one that joins it), a front-end and a gateway
// as local processes: each pod's container args and
// environment exactly as rendered, $(VAR) expanded as the kubelet does,
// the downward API's values filled in, each pod on its own loopback
// address, and the pods' DNS names mapped to those addresses in an
// /etc/hosts that only the pods see. The cluster they form must become
// ready and carry a message from the Go SDK to a queue the chart
// declared, authenticated with the key of the rule the chart generated;
// the front-end and the gateway must split the release's credits.
// Then one storage pod is "rescheduled": stopped, and started
// again on its volume with a new IP that its DNS name now maps to; the
// cluster must take it back and carry another message. This tests the
// chart's wiring (flags, names, ports, the
// bootstrap and join lists); what it cannot test is a real kubelet,
// scheduler, volume or network policy (README: what was verified how).
//
// The one value it changes is listenHost: $(POD_IP), so that the pods'
// listeners do not collide on one machine. The cluster plane runs as the
// chart's defaults have it: mutual TLS with the CA and role certificates
// the chart generated, each pod given its role's files as the Secret
// volume's items would (so the readiness of nodes and front-ends is asked
// over HTTPS, as their probes do). TestRender checks the plain-text
// alternative's flags.
func TestChartWiring(t *testing.T) {
	if testing.Short() {
		t.Skip("starts four processes; skipped with -short")
	}
	binary := quorumbusBinary(t)
	values := parseValues(t, `
listenHost: $(POD_IP)
logLevel: warn
storage: {replicas: 4, bootstrapReplicas: 3, groups: 2, cacheMB: 8, walSegmentMB: 4}
frontend:
  replicas: 1
  emulatorConfig: {UserConfig: {Namespaces: [{Name: sbemulatorns, Queues: [{Name: orders}]}]}}
gateway: {enabled: true, replicas: 1}
`)
	manifest, err := Template(Release{Name: "wire", Namespace: "qb"}, values)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := Decode(manifest)
	if err != nil {
		t.Fatal(err)
	}
	sts := Find[appsv1.StatefulSet](objs, "StatefulSet", "")
	var fe, gw *appsv1.Deployment
	for _, d := range All[appsv1.Deployment](objs) {
		switch d.Spec.Template.Spec.Containers[0].Args[0] {
		case "frontend":
			fe = d
		case "gateway":
			gw = d
		}
	}
	if gw == nil {
		t.Fatal("no gateway Deployment with gateway.enabled")
	}
	cm := Find[corev1.ConfigMap](objs, "ConfigMap", fe.Name)
	if cm == nil {
		t.Fatal("no ConfigMap with the front-end's entities")
	}
	clusterSecret := Find[corev1.Secret](objs, "Secret", "wire-quorumbus-cluster-tls")
	if clusterSecret == nil {
		t.Fatal("no generated cluster TLS Secret")
	}
	sasSecret := Find[corev1.Secret](objs, "Secret", "wire-quorumbus-sas")
	if sasSecret == nil {
		t.Fatal("no generated SAS Secret")
	}
	rules, err := SASRules(sasSecret, "rules.json")
	if err != nil || len(rules) == 0 {
		t.Fatalf("SAS rules: %v %v", rules, err)
	}

	// A random 127.x.y.0/24 keeps runs of this test on one machine apart.
	base := fmt.Sprintf("127.%d.%d.", 20+rand.IntN(200), rand.IntN(250))
	dir := t.TempDir()
	hosts := map[string]string{}
	var pods []PodInfo
	for i := range int(*sts.Spec.Replicas) {
		p := PodInfo{Name: fmt.Sprintf("%s-%d", sts.Name, i), Namespace: "qb", IP: fmt.Sprintf("%s%d", base, 1+i),
			NodeName: fmt.Sprintf("machine-%c", 'a'+i), Labels: map[string]string{}}
		for k, v := range sts.Spec.Template.Labels {
			p.Labels[k] = v
		}
		hosts[fmt.Sprintf("%s.%s.qb.svc.cluster.local", p.Name, sts.Spec.ServiceName)] = p.IP
		pods = append(pods, p)
	}
	hostsPath := filepath.Join(dir, "hosts")
	if err := WriteHosts(hostsPath, hosts); err != nil {
		t.Fatal(err)
	}

	// The API server the storage pods ask for their machine's zone, with
	// the token and CA the projected volume would hold.
	api := newNodeAPI(t, dir)

	var procs []*Process
	t.Cleanup(func() {
		for _, p := range procs {
			if err := p.Stop(15 * time.Second); err != nil {
				t.Logf("%s: %v", p.Name, err)
			}
		}
		if t.Failed() {
			for _, p := range procs {
				t.Logf("--- %s log:\n%s", p.Name, tail(p.Log(), 40))
			}
		}
	})
	start := func(pod PodInfo, c corev1.Container, mounts map[string]string) *Process {
		t.Helper()
		env, order, err := ContainerEnv(c, pod)
		if err != nil {
			t.Fatal(err)
		}
		args, err := LocalArgs(c, env, mounts)
		if err != nil {
			t.Fatal(err)
		}
		// The kubelet gives every container the API server's address.
		envList := []string{"HOSTNAME=" + pod.Name, "KUBERNETES_SERVICE_HOST=" + api.host, "KUBERNETES_SERVICE_PORT=" + api.port}
		for _, k := range order {
			envList = append(envList, k+"="+env[k])
		}
		t.Logf("%s: quorumbus %s", pod.Name, strings.Join(args, " "))
		p, err := StartProcess(pod.Name, append([]string{binary}, args...), envList, hostsPath, filepath.Join(dir, pod.Name+".log"))
		if err != nil {
			t.Skipf("cannot give a pod its own /etc/hosts here (needs a mount namespace): %v", err)
		}
		procs = append(procs, p)
		return p
	}
	nodeTLS := secretItems(t, sts.Spec.Template.Spec, clusterSecret, mkdir(t, dir, "node-cluster-tls"))
	for _, pod := range pods {
		mounts := map[string]string{"data": mkdir(t, dir, pod.Name, "data"), "tmp": mkdir(t, dir, pod.Name, "tmp"), "kube-api-access": api.accountDir, "cluster-tls": nodeTLS}
		start(pod, sts.Spec.Template.Spec.Containers[0], mounts)
	}
	fePod := PodInfo{Name: fe.Name + "-6d5f8b7c9-x7k2p", Namespace: "qb", IP: base + "10", Labels: fe.Spec.Template.Labels}
	configDir := mkdir(t, dir, fePod.Name, "config")
	for name, data := range cm.Data {
		if err := os.WriteFile(filepath.Join(configDir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sasDir := mkdir(t, dir, fePod.Name, "sas")
	for name, data := range sasSecret.Data {
		if err := os.WriteFile(filepath.Join(sasDir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	feTLS := secretItems(t, fe.Spec.Template.Spec, clusterSecret, mkdir(t, dir, fePod.Name, "cluster-tls"))
	feProc := start(fePod, fe.Spec.Template.Spec.Containers[0], map[string]string{"tmp": mkdir(t, dir, fePod.Name, "tmp"), "config": configDir, "sas": sasDir, "cluster-tls": feTLS})

	// Every pod becomes ready, as its readiness probe would see it.
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	const bootstrap = 3 // the first three ordinals bootstrap; the fourth joins
	for i, pod := range pods {
		url := readyURL(sts.Spec.Template.Spec.Containers[0], pod.IP)
		// A joiner (i >= bootstrap) is no member of the meta group; it is
		// ready once the members sent it the routing table.
		waitReady(ctx, t, procs[i], url, "")
	}
	// Each storage node asked for its own machine, with the pod's token.
	for _, pod := range pods {
		if got := api.asked(pod.NodeName); got != 1 {
			t.Errorf("%s asked the API server for its machine %s %d times, want once", pod.Name, pod.NodeName, got)
		}
	}
	feC := fe.Spec.Template.Spec.Containers[0]
	waitReady(ctx, t, feProc, readyURL(feC, fePod.IP), "")

	// The gateway pod: the management API answers the generated key, on
	// the port its Service targets, and refuses a wrong one.
	gwPod := PodInfo{Name: gw.Name + "-7c9d6b5f4-q2w8e", Namespace: "qb", IP: base + "11", Labels: gw.Spec.Template.Labels}
	gwC := gw.Spec.Template.Spec.Containers[0]
	gwTLS := secretItems(t, gw.Spec.Template.Spec, clusterSecret, mkdir(t, dir, gwPod.Name, "cluster-tls"))
	gwProc := start(gwPod, gwC, map[string]string{"tmp": mkdir(t, dir, gwPod.Name, "tmp"), "sas": sasDir, "cluster-tls": gwTLS})
	gwURL := fmt.Sprintf("http://%s:%d", gwPod.IP, containerPort(gwC, "http"))
	waitReady(ctx, t, gwProc, gwURL+"/readyz", "")
	// 503 (no meta leader known while an election runs on a loaded
	// machine) is what the admin clients retry; so does this.
	adminGet := func(key string) (int, string) {
		for {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, gwURL+"/orders?api-version=2021-05", nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", sasToken(gwURL+"/orders", rules[0].Name, key, time.Now().Add(time.Hour)))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatalf("management API: %v", err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusServiceUnavailable || ctx.Err() != nil {
				return resp.StatusCode, string(body)
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
	if code, body := adminGet(rules[0].PrimaryKey); code != http.StatusOK || !strings.Contains(body, "QueueDescription") {
		t.Fatalf("GET /orders with the generated key: %d %s", code, body)
	}
	if code, _ := adminGet("bm90IHRoZSBrZXk="); code != http.StatusUnauthorized {
		t.Fatalf("GET /orders with a wrong key: %d, want 401", code)
	}

	// The front-end and the gateway found each other in the storage
	// nodes' gossip and split the release's one budget of credits: the
	// gateway a tenth, the front-end the rest, 1,000 in all.
	waitMetric(ctx, t, strings.TrimSuffix(readyURL(feC, fePod.IP), "/readyz")+"/metrics", "quorumbus_throttle_credits_per_second", "900")
	waitMetric(ctx, t, gwURL+"/metrics", "quorumbus_throttle_credits_per_second", "100")

	// The Go SDK sends to the declared queue through the front-end's AMQP
	// port and receives the message back.
	// The key of the rule the chart generated; the dev key would be refused.
	cs := fmt.Sprintf("Endpoint=sb://%s:%d;SharedAccessKeyName=%s;SharedAccessKey=%s;UseDevelopmentEmulator=true", fePod.IP, containerPort(feC, "amqp"), rules[0].Name, rules[0].PrimaryKey)
	client, err := azservicebus.NewClientFromConnectionString(cs, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close(context.Background())
	sender, err := client.NewSender("orders", nil)
	if err != nil {
		t.Fatal(err)
	}
	body := "wired by the chart " + base
	if err := sender.SendMessage(ctx, &azservicebus.Message{Body: []byte(body)}, nil); err != nil {
		t.Fatalf("send through the chart's cluster: %v", err)
	}
	receiver, err := client.NewReceiverForQueue("orders", nil)
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := receiver.ReceiveMessages(ctx, 1, nil)
	if err != nil || len(msgs) != 1 {
		t.Fatalf("receive: %d messages, %v", len(msgs), err)
	}
	if string(msgs[0].Body) != body {
		t.Fatalf("received %q, sent %q", msgs[0].Body, body)
	}
	if err := receiver.CompleteMessage(ctx, msgs[0], nil); err != nil {
		t.Fatalf("complete: %v", err)
	}

	// A storage pod rescheduled: the kubelet stops it, it comes back with
	// the same name and volume but a new IP, and DNS follows. Raft knows
	// its peers by name, so the cluster takes it back.
	moved := bootstrap - 1
	if err := procs[moved].Stop(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	pods[moved].IP = fmt.Sprintf("%s%d", base, 20)
	hosts[fmt.Sprintf("%s.%s.qb.svc.cluster.local", pods[moved].Name, sts.Spec.ServiceName)] = pods[moved].IP
	// WriteHosts rewrites the file in place, so the pods' bind mounts of
	// it see the new address.
	if err := WriteHosts(hostsPath, hosts); err != nil {
		t.Fatal(err)
	}
	procs[moved] = start(pods[moved], sts.Spec.Template.Spec.Containers[0], map[string]string{
		"data": filepath.Join(dir, pods[moved].Name, "data"), "tmp": filepath.Join(dir, pods[moved].Name, "tmp"), "kube-api-access": api.accountDir, "cluster-tls": nodeTLS})
	rctx, rcancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer rcancel()
	for i := range bootstrap {
		waitReady(rctx, t, procs[i], readyURL(sts.Spec.Template.Spec.Containers[0], pods[i].IP), "")
	}
	body = "after " + pods[moved].Name + " moved to " + pods[moved].IP
	if err := sender.SendMessage(rctx, &azservicebus.Message{Body: []byte(body)}, nil); err != nil {
		t.Fatalf("send after the pod moved: %v", err)
	}
	if msgs, err = receiver.ReceiveMessages(rctx, 1, nil); err != nil || len(msgs) != 1 || string(msgs[0].Body) != body {
		t.Fatalf("receive after the pod moved: %d messages, %v", len(msgs), err)
	}
	if err := receiver.CompleteMessage(rctx, msgs[0], nil); err != nil {
		t.Fatalf("complete: %v", err)
	}
}

// nodeAPI stands in for the Kubernetes API server's GET of a Node: each
// machine-<x> is in zone-<x>, and only the mounted token is accepted.
type nodeAPI struct {
	host, port, accountDir string
	mu                     sync.Mutex
	gets                   map[string]int
}

func newNodeAPI(t *testing.T, dir string) *nodeAPI {
	t.Helper()
	const token = "projected-service-account-token"
	a := &nodeAPI{accountDir: mkdir(t, dir, "kube-api-access"), gets: map[string]int{}}
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name, ok := strings.CutPrefix(r.URL.Path, "/api/v1/nodes/")
		if !ok || r.Header.Get("Authorization") != "Bearer "+token {
			http.Error(w, "forbidden", http.StatusForbidden)
			return
		}
		zone, ok := strings.CutPrefix(name, "machine-")
		if !ok {
			http.NotFound(w, r)
			return
		}
		a.mu.Lock()
		a.gets[name]++
		a.mu.Unlock()
		fmt.Fprintf(w, `{"kind":"Node","apiVersion":"v1","metadata":{"name":%q,"labels":{"topology.kubernetes.io/zone":"zone-%s"}}}`, name, zone)
	}))
	t.Cleanup(srv.Close)
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	a.host, a.port = u.Hostname(), u.Port()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	for name, data := range map[string][]byte{"ca.crt": ca, "token": []byte(token)} {
		if err := os.WriteFile(filepath.Join(a.accountDir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return a
}

func (a *nodeAPI) asked(node string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.gets[node]
}

func mkdir(t *testing.T, parts ...string) string {
	t.Helper()
	d := filepath.Join(parts...)
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

// waitReady polls url until it answers 200 (or, with line set, until its
// body has that line), the process exits, or ctx ends.
func waitReady(ctx context.Context, t *testing.T, p *Process, url, line string) {
	t.Helper()
	var last string
	for {
		if exited, err := p.Exited(); exited {
			t.Fatalf("%s exited (%v) before it was ready", p.Name, err)
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := probeClient.Do(req)
		if err == nil {
			buf := make([]byte, 2048)
			n, _ := resp.Body.Read(buf)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK || line != "" && strings.Contains(string(buf[:n]), line+"\n") {
				return
			}
			last = fmt.Sprintf("%d %s", resp.StatusCode, buf[:n])
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s not ready at %s: %s", p.Name, url, last)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// waitMetric waits until the metric without labels that url serves has
// the value want.
func waitMetric(ctx context.Context, t *testing.T, url, name, want string) {
	t.Helper()
	got := "nothing"
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if resp, err := probeClient.Do(req); err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			for _, line := range strings.Split(string(body), "\n") {
				if v, ok := strings.CutPrefix(line, name+" "); ok {
					got = v
				}
			}
			if got == want {
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: %s is %s, want %s", url, name, got, want)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// probeClient asks as the kubelet's HTTPS probes do: without verifying
// the certificate (the cluster certificate names no pod IP).
var probeClient = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}

// readyURL is the container's readiness probe as a URL on ip.
func readyURL(c corev1.Container, ip string) string {
	scheme := "http"
	if c.ReadinessProbe != nil && c.ReadinessProbe.HTTPGet != nil && c.ReadinessProbe.HTTPGet.Scheme == corev1.URISchemeHTTPS {
		scheme = "https"
	}
	return fmt.Sprintf("%s://%s:%d/readyz", scheme, ip, containerPort(c, "http"))
}

// secretItems writes into dir what the pod's cluster-tls volume would
// hold: the items it picks out of the Secret, under their paths.
func secretItems(t *testing.T, spec corev1.PodSpec, secret *corev1.Secret, dir string) string {
	t.Helper()
	for _, vol := range spec.Volumes {
		if vol.Name != "cluster-tls" || vol.Secret == nil {
			continue
		}
		if vol.Secret.SecretName != secret.Name || len(vol.Secret.Items) == 0 {
			t.Fatalf("cluster-tls volume of Secret %s with %d items, want items of %s", vol.Secret.SecretName, len(vol.Secret.Items), secret.Name)
		}
		for _, it := range vol.Secret.Items {
			data, ok := secret.Data[it.Key]
			if !ok {
				t.Fatalf("Secret %s has no %s", secret.Name, it.Key)
			}
			if err := os.WriteFile(filepath.Join(dir, it.Path), data, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	t.Fatal("no cluster-tls volume")
	return ""
}

func tail(s string, lines int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > lines {
		l = l[len(l)-lines:]
	}
	return strings.Join(l, "\n")
}

// quorumbusBinary builds ./cmd/quorumbus as the image does (static), or
// takes QUORUMBUS_BINARY when set.
func quorumbusBinary(t *testing.T) string {
	t.Helper()
	if b := os.Getenv("QUORUMBUS_BINARY"); b != "" {
		return b
	}
	out := filepath.Join(t.TempDir(), "quorumbus")
	cmd := exec.Command("go", "build", "-trimpath", "-o", out, "./cmd/quorumbus")
	cmd.Dir = filepath.Join(ChartDir(), "..", "..", "..")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	return out
}

// sasToken signs a Shared Access Signature for uri as the Azure SDKs do:
// HMAC-SHA256 with the rule's key over the URL-encoded uri, a line feed
// and the expiry in Unix seconds.
func sasToken(uri, keyName, key string, expiry time.Time) string {
	encoded := url.QueryEscape(uri)
	se := strconv.FormatInt(expiry.Unix(), 10)
	mac := hmac.New(sha256.New, []byte(key))
	mac.Write([]byte(encoded + "\n" + se))
	sig := url.QueryEscape(base64.StdEncoding.EncodeToString(mac.Sum(nil)))
	return fmt.Sprintf("SharedAccessSignature sr=%s&sig=%s&se=%s&skn=%s", encoded, sig, se, keyName)
}
