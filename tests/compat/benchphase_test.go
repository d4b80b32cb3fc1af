package compat

import (
	"os"
	"path/filepath"
	"runtime/pprof"
	"testing"

	"github.com/quorumbus/quorumbus/cmd/quorumbus/loadtool"
)

// benchPhases runs the load tool's phases of an alternated benchmark
// (BenchmarkTopicAgainstPlain, BenchmarkPartitionedAgainstPlain) and keeps
// each phase's process CPU (cluster and client) per message, in µs, by
// phase name: the cost a message has whatever else the machine runs. With
// QUORUMBUS_BENCH_PROFILE naming a directory, each phase writes its CPU
// profile there as <name>.pprof.
type benchPhases struct {
	b        *testing.B
	bench    func(args ...string) (loadtool.Figures, error)
	profiles string
	cpu      map[string][]float64
}

func newBenchPhases(b *testing.B, bench func(args ...string) (loadtool.Figures, error)) *benchPhases {
	return &benchPhases{b: b, bench: bench, profiles: os.Getenv("QUORUMBUS_BENCH_PROFILE"), cpu: map[string][]float64{}}
}

// run runs one phase of messages messages with the load tool's args.
func (p *benchPhases) run(name string, messages int, args ...string) loadtool.Figures {
	before := loadtool.SelfCPU()
	defer func() {
		p.cpu[name] = append(p.cpu[name], float64((loadtool.SelfCPU()-before).Microseconds())/float64(messages))
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
