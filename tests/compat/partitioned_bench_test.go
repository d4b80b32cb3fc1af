package compat

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/cmd/quorumbus/cluster"
	"github.com/quorumbus/quorumbus/cmd/quorumbus/loadtool"
	"github.com/quorumbus/quorumbus/partition/store"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// partitionedBenchIterations counts the iterations of
// BenchmarkPartitionedAgainstPlain in this process, over -count.
var partitionedBenchIterations int

// BenchmarkPartitionedAgainstPlain is issue 24's figure for partitioned
// queues: a queue of 16 partitions against a plain queue in one dev
// cluster (three nodes), 1 KiB messages, driven by the load tool
// (`quorumbus bench`, go-amqp). The sends use the flags of the cluster's
// own figures in docs/performance.md (two connections of two links, 1,024
// in flight per link). Each queue is drained twice, peek-lock receive +
// complete, of N messages sent just before: by one receiver (one
// connection of one link, credit 1,000), and by four (two connections of
// two links, credit 1,000 each), as the sends. One iteration does so to
// each queue, the plain queue first in every other iteration, counting
// those of earlier runs of -count (so that -benchtime 1x -count 3
// alternates too). It reports the medians over the iterations: each
// side's send and drain rates, the ratios (the targets: sends and
// the four receivers' drain at least the plain queue's, one receiver's
// drain at least 80 % of it), the process's CPU (cluster and client) per
// message of each phase, which the machine's other load changes far less
// than the rates, and the Raft entries per 1,000 messages (each written
// and fsynced by three replicas), which it hardly changes at all.
//
//	go test ./tests/compat -run XXX -bench PartitionedAgainstPlain -benchtime 1x -count 3
//
// QUORUMBUS_BENCH_PARTITIONED_MESSAGES sets N (default 100,000),
// QUORUMBUS_BENCH_PARTITIONS the partitions (default 16);
// QUORUMBUS_BENCH_VERBOSE=1 shows the load tool's progress lines;
// QUORUMBUS_BENCH_PROFILE=dir writes dir/<phase>.pprof, a CPU profile of
// each phase of the first iteration (the cluster's and the client's: they
// share the process). Not with -cpuprofile.
func BenchmarkPartitionedAgainstPlain(b *testing.B) {
	verify := store.VerifyCopies // off: the product's setting (verify_test.go)
	store.VerifyCopies = false
	b.Cleanup(func() { store.VerifyCopies = verify })
	n := envInt("QUORUMBUS_BENCH_PARTITIONED_MESSAGES", 100_000)
	parts := envInt("QUORUMBUS_BENCH_PARTITIONS", 16)
	c, _ := startBenchDev(b,
		cluster.QueueSpec{Name: "plain", Props: &placementpb.QueueProperties{}},
		cluster.QueueSpec{Name: "pq", Props: &placementpb.QueueProperties{PartitionCount: uint32(parts)}})
	if e, err := c.Router.Entity("pq"); err == nil {
		b.Logf("pq: %d partitions on %d groups", len(e.PartitionGroups), len(slices.Compact(slices.Sorted(slices.Values(e.PartitionGroups)))))
	}
	ctx := context.Background()
	bench := func(args ...string) (loadtool.Figures, error) {
		var out bytes.Buffer
		var w io.Writer = &out
		if os.Getenv("QUORUMBUS_BENCH_VERBOSE") != "" {
			w = io.MultiWriter(&out, os.Stderr)
		}
		f, err := loadtool.Run(ctx, append([]string{"-url", "amqp://" + c.AMQPAddr}, args...), w)
		if err != nil {
			return f, fmt.Errorf("bench %s: %w\n%s", strings.Join(args, " "), err, out.String())
		}
		return f, nil
	}
	send := func(queue string, count int) []string {
		return []string{"-queue", queue, "-mode", "send", "-conns", "2", "-links", "2", "-window", "1024", "-count", strconv.Itoa(count)}
	}
	drain := func(queue string, count int) []string {
		return []string{"-queue", queue, "-mode", "receive", "-conns", "1", "-links", "1", "-credit", "1000", "-count", strconv.Itoa(count)}
	}
	drain4 := func(queue string, count int) []string {
		return []string{"-queue", queue, "-mode", "receive", "-conns", "2", "-links", "2", "-credit", "1000", "-count", strconv.Itoa(count)}
	}
	phases := newBenchPhases(b, c, bench)
	phase := func(name string, args []string) loadtool.Figures { return phases.run(name, n, args...) }
	cpu, entries, requests := phases.cpu, phases.entries, phases.requests

	// Warm up both (and wait until the partitions have their config: the
	// routing table can know an entity before its partitions do).
	for _, args := range [][]string{send("plain", 1000), send("pq", 100*parts)} {
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
			_, err := bench(args...)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				b.Fatal(err)
			}
		}
	}
	for _, args := range [][]string{drain("plain", 1000), drain("pq", 100*parts)} {
		if _, err := bench(args...); err != nil {
			b.Fatal(err)
		}
	}

	// The rates by phase: "send" (two sends an iteration), "drain" (one
	// receiver), "drain4" (four), each of "plain-" and "partitioned-".
	rates := map[string][]float64{}
	side := func(name, queue string) {
		for _, d := range []struct {
			phase string
			args  func(string, int) []string
		}{{"drain", drain}, {"drain4", drain4}} {
			rates[name+"-send"] = append(rates[name+"-send"], phase(name+"-send", send(queue, n)).SendRate())
			rates[name+"-"+d.phase] = append(rates[name+"-"+d.phase], phase(name+"-"+d.phase, d.args(queue, n)).ReceiveRate())
		}
	}
	last := func(xs []float64) float64 { return xs[len(xs)-1] }
	// lastSends is the median of an iteration's two sends of a phase.
	lastSends := func(xs []float64) float64 { return median(xs[len(xs)-2:]) }
	b.ResetTimer()
	for range b.N {
		partitionedBenchIterations++
		first := "plain"
		if partitionedBenchIterations%2 == 1 {
			side("plain", "plain")
			side("partitioned", "pq")
		} else {
			first = "partitioned"
			side("partitioned", "pq")
			side("plain", "plain")
		}
		phases.profiles = "" // the first iteration's only
		ps, qs := lastSends(rates["plain-send"]), lastSends(rates["partitioned-send"])
		pr, qr := last(rates["plain-drain"]), last(rates["partitioned-drain"])
		pr4, qr4 := last(rates["plain-drain4"]), last(rates["partitioned-drain4"])
		b.Logf("%s first; sends: plain %.0f, %d partitions %.0f msgs/s (%.0f %%); receive + complete, one receiver: plain %.0f, partitioned %.0f msgs/s (%.0f %%), four: plain %.0f, partitioned %.0f msgs/s (%.0f %%); "+
			"CPU µs/msg: sends %.1f / %.1f, drains %.1f / %.1f, by four %.1f / %.1f; Raft entries per 1,000 msgs: sends %.1f / %.1f, drains %.1f / %.1f, by four %.1f / %.1f",
			first, ps, parts, qs, 100*qs/ps, pr, qr, 100*qr/pr, pr4, qr4, 100*qr4/pr4,
			lastSends(cpu["plain-send"]), lastSends(cpu["partitioned-send"]), last(cpu["plain-drain"]), last(cpu["partitioned-drain"]), last(cpu["plain-drain4"]), last(cpu["partitioned-drain4"]),
			1000*lastSends(entries["plain-send"]), 1000*lastSends(entries["partitioned-send"]), 1000*last(entries["plain-drain"]), 1000*last(entries["partitioned-drain"]), 1000*last(entries["plain-drain4"]), 1000*last(entries["partitioned-drain4"]))
		b.Logf("requests those entries carried, per 1,000 msgs: sends %.1f / %.1f, drains %.1f / %.1f, by four %.1f / %.1f",
			1000*lastSends(requests["plain-send"]), 1000*lastSends(requests["partitioned-send"]), 1000*last(requests["plain-drain"]), 1000*last(requests["partitioned-drain"]), 1000*last(requests["plain-drain4"]), 1000*last(requests["partitioned-drain4"]))
	}
	for _, m := range []struct{ phase, unit string }{
		{"send", "send"}, {"drain", "drain"}, {"drain4", "drain4"},
	} {
		p, q := median(rates["plain-"+m.phase]), median(rates["partitioned-"+m.phase])
		b.ReportMetric(p, "plain-"+m.unit+"/s")
		b.ReportMetric(q, "partitioned-"+m.unit+"/s")
		b.ReportMetric(q/p, m.unit+"-ratio")
		b.ReportMetric(median(cpu["plain-"+m.phase]), "plain-"+m.unit+"-cpu-µs")
		b.ReportMetric(median(cpu["partitioned-"+m.phase]), "partitioned-"+m.unit+"-cpu-µs")
		b.ReportMetric(1000*median(entries["plain-"+m.phase]), "plain-"+m.unit+"-entries/1000")
		b.ReportMetric(1000*median(entries["partitioned-"+m.phase]), "partitioned-"+m.unit+"-entries/1000")
	}
}
