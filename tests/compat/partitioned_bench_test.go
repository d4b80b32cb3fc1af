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
// in flight per link); the drain is one receiver, one connection of one
// link (credit 1,000), peek-lock receive + complete. One iteration sends
// N messages to each and drains each, the plain queue first in every
// other iteration, counting those of earlier runs of -count (so that
// -benchtime 1x -count 3 alternates too). It reports the medians over the
// iterations: each side's send and drain rates, the ratios (the issue's
// targets: sends at least the plain queue's, the drain at least 80 % of
// it), the process's CPU (cluster and client) per message of each phase,
// which the machine's other load changes far less than the rates, and the
// drains' Raft entries per 1,000 messages (each written and fsynced by
// three replicas), which it hardly changes at all.
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
	phases := newBenchPhases(b, c, bench)
	phase := func(name string, args []string) loadtool.Figures { return phases.run(name, n, args...) }
	cpu, entries := phases.cpu, phases.entries

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

	var ps, pr, qs, qr []float64
	plain := func() {
		ps = append(ps, phase("plain-send", send("plain", n)).SendRate())
		pr = append(pr, phase("plain-drain", drain("plain", n)).ReceiveRate())
	}
	partitioned := func() {
		qs = append(qs, phase("partitioned-send", send("pq", n)).SendRate())
		qr = append(qr, phase("partitioned-drain", drain("pq", n)).ReceiveRate())
	}
	b.ResetTimer()
	for i := range b.N {
		partitionedBenchIterations++
		first := "plain"
		if partitionedBenchIterations%2 == 1 {
			plain()
			partitioned()
		} else {
			first = "partitioned"
			partitioned()
			plain()
		}
		phases.profiles = "" // the first iteration's only
		b.Logf("%s first; sends: plain %.0f, %d partitions %.0f msgs/s (%.0f %%); one receiver's receive + complete: plain %.0f, partitioned %.0f msgs/s (%.0f %%); CPU µs/msg: sends %.1f / %.1f, drains %.1f / %.1f; Raft entries per 1,000 msgs: sends %.0f / %.0f, drains %.0f / %.0f",
			first, ps[i], parts, qs[i], 100*qs[i]/ps[i], pr[i], qr[i], 100*qr[i]/pr[i],
			cpu["plain-send"][i], cpu["partitioned-send"][i], cpu["plain-drain"][i], cpu["partitioned-drain"][i],
			1000*entries["plain-send"][i], 1000*entries["partitioned-send"][i], 1000*entries["plain-drain"][i], 1000*entries["partitioned-drain"][i])
	}
	b.ReportMetric(median(ps), "plain-send/s")
	b.ReportMetric(median(qs), "partitioned-send/s")
	b.ReportMetric(median(qs)/median(ps), "send-ratio")
	b.ReportMetric(median(pr), "plain-drain/s")
	b.ReportMetric(median(qr), "partitioned-drain/s")
	b.ReportMetric(median(qr)/median(pr), "drain-ratio")
	b.ReportMetric(median(cpu["plain-send"]), "plain-send-cpu-µs")
	b.ReportMetric(median(cpu["partitioned-send"]), "partitioned-send-cpu-µs")
	b.ReportMetric(median(cpu["plain-drain"]), "plain-drain-cpu-µs")
	b.ReportMetric(median(cpu["partitioned-drain"]), "partitioned-drain-cpu-µs")
	b.ReportMetric(1000*median(entries["plain-drain"]), "plain-drain-entries/1000")
	b.ReportMetric(1000*median(entries["partitioned-drain"]), "partitioned-drain-entries/1000")
}
