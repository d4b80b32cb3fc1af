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

// topicBenchFilter is the three-clause SQL filter of the filter engine's
// benchmark (partition/filter BenchmarkSQLFilter); every message the
// topic benchmark sends matches it.
const topicBenchFilter = "region = 'emea' AND priority >= 2 AND sys.Label LIKE 'Order%'"

// BenchmarkTopicAgainstPlain is issue 21's end-to-end figure: a topic
// with 10 subscriptions, each with a SQL filter that every message
// matches, against a plain queue, in one dev cluster, 1 KiB messages,
// driven by the load tool (`quorumbus bench`, go-amqp) with the flags
// docs/performance.md gives the cluster's own figures: two connections of
// two links, 1,024 sends in flight per link. One iteration sends N
// messages to each (plain first in even iterations, the topic first in
// odd ones) and drains each by peek-lock + complete: the plain queue's N
// messages, then the 10 × N copies of the subscriptions (each connection
// opens two links to every subscription, 400 credit each). It reports the
// medians over the iterations: the topic's send rate against the plain
// queue's (the target: at least half) and the subscriptions'
// deliveries per second against the plain queue's receive + complete
// rate (target: not below it).
//
//	go test ./tests/compat -run XXX -bench TopicAgainstPlain -benchtime 3x
//
// QUORUMBUS_BENCH_TOPIC_MESSAGES sets N (default 50,000),
// QUORUMBUS_BENCH_TOPIC_SUBSCRIPTIONS the subscriptions (default 10);
// QUORUMBUS_BENCH_VERBOSE=1 shows the load tool's progress lines;
// It also reports the process's CPU (cluster and client) per message sent
// and per delivery, medians over the iterations, and the Raft entries and
// client requests (Locks, Settles) the cluster proposed per 1,000
// deliveries of each drain.
//
// The drains differ in shape, and each difference costs the topic: forty
// links (four per subscription) against four, so each Lock and Settle
// carries fewer messages (several times the requests per delivery); 400
// credit per link against the load tool's default 1,000 (16,000
// in all against 4,000, and as many completes in flight in the client,
// whose goroutines share the process's CPU); and a backlog of ten times
// the records (the copies spill from the memtables into sstables, which
// the plain queue's N messages never do).
// QUORUMBUS_BENCH_PROFILE=dir writes dir/<phase>.pprof, a CPU profile of
// each phase of the first iteration (the cluster's and the client's: they
// share the process). Not with -cpuprofile.
func BenchmarkTopicAgainstPlain(b *testing.B) {
	verify := store.VerifyCopies // off: the copies as the product writes them (verify_test.go)
	store.VerifyCopies = false
	b.Cleanup(func() { store.VerifyCopies = verify })
	n := envInt("QUORUMBUS_BENCH_TOPIC_MESSAGES", 50_000)
	nsubs := envInt("QUORUMBUS_BENCH_TOPIC_SUBSCRIPTIONS", 10)
	specs := []cluster.QueueSpec{
		{Name: "plain", Props: &placementpb.QueueProperties{}},
		{Name: "t", Kind: placementpb.EntityKind_ENTITY_KIND_TOPIC, Props: &placementpb.QueueProperties{}},
	}
	var subs []string
	for i := range nsubs {
		name := fmt.Sprintf("t/Subscriptions/s%d", i)
		subs = append(subs, name)
		specs = append(specs, cluster.QueueSpec{
			Name: name, Kind: placementpb.EntityKind_ENTITY_KIND_SUBSCRIPTION, Props: &placementpb.QueueProperties{},
			Rules: []*placementpb.Rule{{Name: "orders", Filter: &placementpb.Rule_SqlFilter{SqlFilter: &placementpb.SqlFilter{Expression: topicBenchFilter}}}},
		})
	}
	c, _ := startBenchDev(b, specs...)
	ctx := context.Background()
	common := []string{"-url", "amqp://" + c.AMQPAddr, "-conns", "2", "-links", "2", "-window", "1024",
		"-property", "region=emea", "-property", "priority=3", "-subject", "Order-1"}
	bench := func(args ...string) (loadtool.Figures, error) {
		var out bytes.Buffer
		var w io.Writer = &out
		if os.Getenv("QUORUMBUS_BENCH_VERBOSE") != "" {
			w = io.MultiWriter(&out, os.Stderr) // the load tool's progress, a line a second
		}
		f, err := loadtool.Run(ctx, append(slices.Clone(common), args...), w)
		if err != nil {
			return f, fmt.Errorf("bench %s: %w\n%s", strings.Join(args, " "), err, out.String())
		}
		return f, nil
	}
	// QUORUMBUS_BENCH_PROFILE=dir writes a CPU profile of the whole
	// process (cluster and client) per phase of the first iteration.
	phases := newBenchPhases(b, c, bench)
	phase, cpu := phases.run, phases.cpu
	plainSend := func() float64 {
		return phase("plain-send", n, "-queue", "plain", "-mode", "send", "-count", strconv.Itoa(n)).SendRate()
	}
	plainReceive := func() float64 {
		return phase("plain-receive", n, "-queue", "plain", "-mode", "receive", "-count", strconv.Itoa(n)).ReceiveRate()
	}
	topicSend := func() float64 {
		return phase("topic-send", n, "-queue", "t", "-mode", "send", "-count", strconv.Itoa(n)).SendRate()
	}
	topicDrain := func() float64 {
		return phase("topic-drain", n*nsubs, "-queue", strings.Join(subs, ","), "-mode", "receive", "-credit", "400",
			"-count", strconv.Itoa(n*nsubs)).ReceiveRate()
	}

	// Warm up both (and wait until every partition has its config: the
	// routing table can know an entity before its partitions do).
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		_, err := bench("-queue", "plain", "-mode", "send", "-count", "1000")
		if err == nil {
			_, err = bench("-queue", "t", "-mode", "send", "-count", "100")
		}
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			b.Fatal(err)
		}
	}
	for _, args := range [][]string{
		{"-queue", "plain", "-mode", "receive", "-count", "1000"},
		{"-queue", strings.Join(subs, ","), "-mode", "receive", "-count", strconv.Itoa(100 * nsubs)},
	} {
		if _, err := bench(args...); err != nil {
			b.Fatal(err)
		}
	}

	var ps, pr, ts, td []float64
	b.ResetTimer()
	for i := range b.N {
		if i%2 == 0 {
			ps, pr = append(ps, plainSend()), append(pr, plainReceive())
			ts, td = append(ts, topicSend()), append(td, topicDrain())
		} else {
			ts, td = append(ts, topicSend()), append(td, topicDrain())
			ps, pr = append(ps, plainSend()), append(pr, plainReceive())
		}
		phases.profiles = "" // the first iteration's only
		b.Logf("sends: plain %.0f, topic %.0f msgs/s (%.0f %%); receive + complete: plain %.0f, %d subscriptions %.0f deliveries/s (%.0f %%)",
			ps[i], ts[i], 100*ts[i]/ps[i], pr[i], nsubs, td[i], 100*td[i]/pr[i])
	}
	b.ReportMetric(median(ps), "plain-send/s")
	b.ReportMetric(median(ts), "topic-send/s")
	b.ReportMetric(median(ts)/median(ps), "send-ratio")
	b.ReportMetric(median(pr), "plain-receive/s")
	b.ReportMetric(median(td), "topic-deliveries/s")
	b.ReportMetric(median(td)/median(pr), "receive-ratio")
	b.ReportMetric(median(cpu["plain-send"]), "plain-send-cpu-µs")
	b.ReportMetric(median(cpu["topic-send"]), "topic-send-cpu-µs")
	b.ReportMetric(median(cpu["plain-receive"]), "plain-receive-cpu-µs")
	b.ReportMetric(median(cpu["topic-drain"]), "topic-delivery-cpu-µs")
	b.ReportMetric(1000*median(phases.entries["plain-receive"]), "plain-receive-entries/1000")
	b.ReportMetric(1000*median(phases.entries["topic-drain"]), "topic-delivery-entries/1000")
	b.ReportMetric(1000*median(phases.requests["plain-receive"]), "plain-receive-requests/1000")
	b.ReportMetric(1000*median(phases.requests["topic-drain"]), "topic-delivery-requests/1000")
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}
