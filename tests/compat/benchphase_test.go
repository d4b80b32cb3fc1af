package compat

import (
	"os"
	"path/filepath"
	"runtime/pprof"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quorumbus/quorumbus/cmd/quorumbus/cluster"
	"github.com/quorumbus/quorumbus/cmd/quorumbus/loadtool"
)

// benchPhases runs the load tool's phases of an alternated benchmark
// (BenchmarkTopicAgainstPlain, BenchmarkPartitionedAgainstPlain) and keeps
// each phase's process CPU (cluster and client) per message, in µs, by
// phase name: the cost a message has whatever else the machine runs. With
// QUORUMBUS_BENCH_PROFILE naming a directory, each phase writes its CPU
// profile there as <name>.pprof. It also keeps the Raft entries the
// cluster's leaders proposed per message of each phase: each entry is
// written and fsynced by three replicas, which is much of what a message
// costs, and unlike the CPU figure the machine's load hardly moves it;
// and the client requests those entries carried (group commit packs
// many in one), which tell the front-end's part from the node's.
type benchPhases struct {
	b        *testing.B
	c        *cluster.Dev
	bench    func(args ...string) (loadtool.Figures, error)
	profiles string
	cpu      map[string][]float64
	entries  map[string][]float64
	requests map[string][]float64 // client requests those entries carried
}

func newBenchPhases(b *testing.B, c *cluster.Dev, bench func(args ...string) (loadtool.Figures, error)) *benchPhases {
	return &benchPhases{b: b, c: c, bench: bench, profiles: os.Getenv("QUORUMBUS_BENCH_PROFILE"),
		cpu: map[string][]float64{}, entries: map[string][]float64{}, requests: map[string][]float64{}}
}

// proposed sums quorumbus_raft_proposed_entries_total and
// quorumbus_raft_proposed_requests_total over the cluster's storage
// nodes.
func (p *benchPhases) proposed() (entries, requests float64) {
	reg := prometheus.NewRegistry()
	for _, s := range p.c.Storage {
		if err := reg.Register(s.Node.Collector()); err != nil {
			p.b.Fatal(err)
		}
	}
	families, err := reg.Gather()
	if err != nil {
		p.b.Fatal(err)
	}
	for _, f := range families {
		sum := &entries
		switch f.GetName() {
		case "quorumbus_raft_proposed_entries_total":
		case "quorumbus_raft_proposed_requests_total":
			sum = &requests
		default:
			continue
		}
		for _, m := range f.GetMetric() {
			*sum += m.GetCounter().GetValue()
		}
	}
	return entries, requests
}

// run runs one phase of messages messages with the load tool's args.
func (p *benchPhases) run(name string, messages int, args ...string) loadtool.Figures {
	before := loadtool.SelfCPU()
	entries, requests := p.proposed()
	defer func() {
		p.cpu[name] = append(p.cpu[name], float64((loadtool.SelfCPU()-before).Microseconds())/float64(messages))
		e, r := p.proposed()
		p.entries[name] = append(p.entries[name], (e-entries)/float64(messages))
		p.requests[name] = append(p.requests[name], (r-requests)/float64(messages))
	}()
	if p.profiles != "" {
		f, err := os.Create(filepath.Join(p.profiles, name+".pprof"))
		if err != nil {
			p.b.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			p.b.Fatal(err)
		}
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}
	f, err := p.bench(args...)
	if err != nil {
		p.b.Fatal(err)
	}
	return f
}
