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
// costs, and unlike the CPU figure the machine's load hardly moves it.
type benchPhases struct {
	b        *testing.B
	c        *cluster.Dev
	bench    func(args ...string) (loadtool.Figures, error)
	profiles string
	cpu      map[string][]float64
	entries  map[string][]float64
}

func newBenchPhases(b *testing.B, c *cluster.Dev, bench func(args ...string) (loadtool.Figures, error)) *benchPhases {
	return &benchPhases{b: b, c: c, bench: bench, profiles: os.Getenv("QUORUMBUS_BENCH_PROFILE"),
		cpu: map[string][]float64{}, entries: map[string][]float64{}}
}

// proposedEntries sums quorumbus_raft_proposed_entries_total over the
// cluster's storage nodes.
func (p *benchPhases) proposedEntries() float64 {
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
	sum := 0.0
	for _, f := range families {
		if f.GetName() != "quorumbus_raft_proposed_entries_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

// run runs one phase of messages messages with the load tool's args.
func (p *benchPhases) run(name string, messages int, args ...string) loadtool.Figures {
	before, entries := loadtool.SelfCPU(), p.proposedEntries()
	defer func() {
		p.cpu[name] = append(p.cpu[name], float64((loadtool.SelfCPU()-before).Microseconds())/float64(messages))
		p.entries[name] = append(p.entries[name], (p.proposedEntries()-entries)/float64(messages))
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
