package cluster

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// dashboardFile is the Grafana dashboard of deploy/grafana.
const dashboardFile = "../../../deploy/grafana/quorumbus.json"

// dashboardMetrics returns the metric names the dashboard's queries (and
// variables) use, without the _bucket, _sum and _count a histogram's
// series add.
func dashboardMetrics(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Targets []struct{ Expr string } `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct{ Definition string } `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	var exprs []string
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	for _, v := range d.Templating.List {
		exprs = append(exprs, v.Definition)
	}
	if len(exprs) < 10 {
		t.Fatalf("%s: only %d queries", dashboardFile, len(exprs))
	}
	// Our metrics and the Go and process collectors'; PromQL functions and
	// label names never start with these prefixes.
	name := regexp.MustCompile(`\b(?:quorumbus|process|go)_[a-zA-Z0-9_]+`)
	seen := map[string]bool{}
	for _, e := range exprs {
		for _, m := range name.FindAllString(e, -1) {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if strings.HasSuffix(m, "_seconds"+suffix) {
					m = strings.TrimSuffix(m, suffix)
				}
			}
			seen[m] = true
		}
	}
	var out []string
	for m := range seen {
		out = append(out, m)
	}
	slices.Sort(out)
	return out
}

// TestGrafanaDashboardMetrics: every metric the Grafana dashboard in
// deploy/grafana queries is one the processes register, and every
// quorumbus_ metric they register has a panel (but a few listed that only
// qualify another): the collectors of
// a dev cluster's front-end, gateway and storage nodes (what dev, node,
// frontend and gateway serve on /metrics), and the Go and process
// collectors MetricsHandler adds. Some collectors describe nothing
// up front (the nodes'), so the names are the descriptions and the
// families a gather gives once the cluster has a queue and has committed.
func TestGrafanaDashboardMetrics(t *testing.T) {
	want := dashboardMetrics(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, err := StartDev(ctx, DevOptions{DataDir: t.TempDir(), AMQPAddr: "127.0.0.1:0", Nodes: 3, Groups: 3, CacheMB: 16, LogLevel: "error"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := CreateQueues(ctx, c.NodeAddrs, c.Creds, []QueueSpec{{Name: "watched", Props: &placementpb.QueueProperties{}}}, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		t.Fatal(err)
	}
	cs := []prometheus.Collector{c.Frontend.Collector(), c.Gateway.Collector(),
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})}
	for _, s := range c.Storage {
		cs = append(cs, s.Node.Collector())
	}
	reg := prometheus.NewRegistry()
	for _, col := range cs {
		if err := reg.Register(col); err != nil {
			t.Fatal(err)
		}
	}
	described := map[string]bool{}
	descName := regexp.MustCompile(`fqName: "([^"]+)"`)
	for _, col := range cs {
		ch := make(chan *prometheus.Desc, 256)
		go func() { col.Describe(ch); close(ch) }()
		for d := range ch {
			if m := descName.FindStringSubmatch(d.String()); m != nil {
				described[m[1]] = true
			}
		}
	}
	var missing []string
	var registered map[string]bool
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		fams, err := reg.Gather()
		if err != nil {
			t.Logf("gather: %v", err)
		}
		registered = copySet(described)
		for _, f := range fams {
			registered[f.GetName()] = true
		}
		missing = missing[:0]
		for _, m := range want {
			if !registered[m] {
				missing = append(missing, m)
			}
		}
		if len(missing) == 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(missing) > 0 {
		t.Fatalf("%s queries metrics no process registers: %v", dashboardFile, missing)
	}
	// And the other way: every metric of ours has a panel, but those that
	// only qualify another's figures.
	qualifiers := map[string]string{
		"quorumbus_raft_commit_index":      "apply lag is read from last_index and applied_index",
		"quorumbus_raft_follower_answered": "says when replication_lag_entries is reported",
	}
	var unshown []string
	for m := range registered {
		if strings.HasPrefix(m, "quorumbus_") && !slices.Contains(want, m) && qualifiers[m] == "" {
			unshown = append(unshown, m)
		}
	}
	if len(unshown) > 0 {
		slices.Sort(unshown)
		t.Fatalf("%s shows no panel of %v", dashboardFile, unshown)
	}
	t.Logf("%d metric names of the dashboard, all registered; every metric of ours has a panel", len(want))
}

func copySet(m map[string]bool) map[string]bool {
	out := make(map[string]bool, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
