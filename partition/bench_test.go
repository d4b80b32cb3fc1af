package partition_test

import (
	"bytes"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/quorumbus/quorumbus/partition"
	pt "github.com/quorumbus/quorumbus/partition/partitiontest"
	"github.com/quorumbus/quorumbus/partition/store"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

const benchBatch = 64

func benchMessages() []*partitionpb.NewMessage {
	body := bytes.Repeat([]byte("x"), 1024)
	ms := make([]*partitionpb.NewMessage, benchBatch)
	for i := range ms {
		ms[i] = &partitionpb.NewMessage{Bare: body}
	}
	return ms
}

func benchMachine(b *testing.B) *partition.Machine {
	m, err := partition.Open(b.TempDir(), partition.Options{Logger: pt.Options().Logger})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { m.Close() })
	return m
}

func apply(b *testing.B, m *partition.Machine, e partition.Entry) []*partitionpb.Result {
	res, err := m.Apply([]partition.Entry{e})
	if err != nil {
		b.Fatal(err)
	}
	return res[0]
}

// BenchmarkApplyEnqueue applies entries of one Enqueue of 64 messages of
// 1 KiB, one entry per Apply.
func BenchmarkApplyEnqueue(b *testing.B) {
	m := benchMachine(b)
	var log pt.Log
	apply(b, m, log.Entry(b, 0, pt.Upsert(pt.Queue(1, 0, "q"))))
	entry := log.Entry(b, 1000, pt.Enqueue(1, 0, benchMessages()...))
	b.SetBytes(benchBatch * 1024)
	b.ResetTimer()
	for b.Loop() {
		entry.Index = log.Last + 1
		log.Last++
		apply(b, m, entry)
	}
	b.ReportMetric(float64(b.N*benchBatch)/b.Elapsed().Seconds(), "msgs/s")
}

// BenchmarkLockComplete locks 64 messages in one entry and completes them
// in the next, over a backlog enqueued beforehand.
func BenchmarkLockComplete(b *testing.B) {
	m := benchMachine(b)
	var log pt.Log
	benchLockComplete(b, func(now int64, _ bool, c *partitionpb.Command) *partitionpb.Result {
		return apply(b, m, log.Entry(b, now, c))[0]
	})
}

// benchLockComplete runs BenchmarkLockComplete's loop through do, which
// applies one command in an entry stamped now and returns its result;
// timed says whether the benchmark's timer runs meanwhile.
func benchLockComplete(b *testing.B, do func(now int64, timed bool, c *partitionpb.Command) *partitionpb.Result) {
	do(0, false, pt.Upsert(pt.Queue(1, 0, "q")))
	fill := func(n int) {
		for range n {
			do(1000, false, pt.Enqueue(1, 0, benchMessages()...))
		}
	}
	fill(64)
	b.ResetTimer()
	n := 0
	for b.Loop() {
		if n++; n%64 == 0 {
			b.StopTimer()
			fill(64)
			b.StartTimer()
		}
		r := do(2000, true, pt.Lock(1, 0, pt.Main, benchBatch, uint64(n)))
		if len(r.Messages) != benchBatch {
			b.Fatalf("locked %d", len(r.Messages))
		}
		if r = do(2000, true, pt.Settle(1, 0, pt.Main, partitionpb.Disposition_DISPOSITION_COMPLETE, pt.Tokens(r)...)); r.Code != partitionpb.ResultCode_RESULT_OK {
			b.Fatal(r.Code)
		}
	}
	b.ReportMetric(float64(b.N*benchBatch)/b.Elapsed().Seconds(), "msgs/s")
}

// BenchmarkBacklogCycle enqueues a backlog of 300,000 messages of 1 KiB in
// entries of 256, then locks and completes all of it, 256 a time, with the
// dev cluster's store settings (32 MiB cache and memtables). It reports
// what a message costs the store in each phase: compaction bytes written
// and flushes, the work that a backlog larger than the memtables adds.
func BenchmarkBacklogCycle(b *testing.B) {
	const total, per = 300_000, 256
	body := bytes.Repeat([]byte("x"), 1024)
	batch := make([]*partitionpb.NewMessage, per)
	for i := range batch {
		batch[i] = &partitionpb.NewMessage{Bare: body}
	}
	for b.Loop() {
		b.StopTimer()
		m, err := partition.Open(b.TempDir(), partition.Options{Logger: pt.Options().Logger, CacheBytes: 32 << 20})
		if err != nil {
			b.Fatal(err)
		}
		var log pt.Log
		apply(b, m, log.Entry(b, 0, pt.Upsert(pt.Queue(1, 0, "q"))))
		b.StartTimer()
		report := func(phase string, t0 time.Time, before *pebble.Metrics) {
			after := partition.StoreMetrics(m)
			var cw, fl, mv, rd int64
			for i := range after.Levels {
				a, z := after.Levels[i], before.Levels[i]
				cw += int64(a.TableBytesCompacted) - int64(z.TableBytesCompacted)
				fl += int64(a.TableBytesFlushed) - int64(z.TableBytesFlushed)
				mv += int64(a.TableBytesMoved) - int64(z.TableBytesMoved)
				rd += int64(a.TableBytesRead) - int64(z.TableBytesRead)
			}
			cn := after.Compact.Count - before.Compact.Count
			b.ReportMetric(float64(total)/time.Since(t0).Seconds(), phase+"-msgs/s")
			b.ReportMetric(float64(cw)/total, phase+"-compactB/msg")
			b.ReportMetric(float64(fl)/total, phase+"-flushB/msg")
			b.ReportMetric(float64(rd)/total, phase+"-compactReadB/msg")
			b.ReportMetric(float64(mv)/total, phase+"-movedB/msg")
			b.ReportMetric(float64(cn), phase+"-compactions")
		}
		t0, m0 := time.Now(), partition.StoreMetrics(m)
		for range total / per {
			apply(b, m, log.Entry(b, 1000, pt.Enqueue(1, 0, batch...)))
		}
		report("send", t0, m0)
		t0, m0 = time.Now(), partition.StoreMetrics(m)
		for n := uint64(0); n < total/per; n++ {
			r := apply(b, m, log.Entry(b, 2000, pt.Lock(1, 0, pt.Main, per, n)))
			if len(r[0].Messages) != per {
				b.Fatalf("locked %d", len(r[0].Messages))
			}
			apply(b, m, log.Entry(b, 2000, pt.Settle(1, 0, pt.Main, partitionpb.Disposition_DISPOSITION_COMPLETE, pt.Tokens(r[0])...)))
		}
		report("receive", t0, m0)
		b.StopTimer()
		m.Close()
		b.StartTimer()
	}
}

// BenchmarkSettleScattered locks 512 messages at a time from a backlog
// already flushed to the store's tables and completes them in two halves,
// every other message each, as a consumer completing from many goroutines
// does: a settle's reads skip over messages another settle still holds.
func BenchmarkSettleScattered(b *testing.B) {
	const per = 512
	m, err := partition.Open(b.TempDir(), partition.Options{Logger: pt.Options().Logger, CacheBytes: 32 << 20})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	var log pt.Log
	apply(b, m, log.Entry(b, 0, pt.Upsert(pt.Queue(1, 0, "q"))))
	body := bytes.Repeat([]byte("x"), 1024)
	batch := make([]*partitionpb.NewMessage, 256)
	for i := range batch {
		batch[i] = &partitionpb.NewMessage{Bare: body}
	}
	fill := func() {
		for range 200 { // 51,200 messages
			apply(b, m, log.Entry(b, 1000, pt.Enqueue(1, 0, batch...)))
		}
		if err := partition.FlushStore(m); err != nil {
			b.Fatal(err)
		}
	}
	fill()
	b.ResetTimer()
	n := uint64(0)
	for b.Loop() {
		n++
		r := apply(b, m, log.Entry(b, 2000, pt.Lock(1, 0, pt.Main, per, n)))
		if len(r[0].Messages) < per {
			b.StopTimer()
			fill()
			b.StartTimer()
			continue
		}
		tokens := pt.Tokens(r[0])
		for half := range 2 {
			var ts [][]byte
			for i := half; i < len(tokens); i += 2 {
				ts = append(ts, tokens[i])
			}
			r := apply(b, m, log.Entry(b, 2000, pt.Settle(1, 0, pt.Main, partitionpb.Disposition_DISPOSITION_COMPLETE, ts...)))
			if r[0].Code != partitionpb.ResultCode_RESULT_OK {
				b.Fatal(r[0].Code)
			}
		}
	}
	b.ReportMetric(float64(b.N*per)/b.Elapsed().Seconds(), "msgs/s")
}

// BenchmarkApplyEnqueueOne applies entries of one Enqueue of one 1 KiB
// message with a request id, one entry per Apply: what a synchronous
// sender costs each replica. Every such entry pays the whole fixed cost of
// an Apply, which large entries spread over their messages.
func BenchmarkApplyEnqueueOne(b *testing.B) {
	m := benchMachine(b)
	var log pt.Log
	apply(b, m, log.Entry(b, 0, pt.Upsert(pt.Queue(1, 0, "q"))))
	cmd := pt.Enqueue(1, 0, benchMessages()[0])
	id := make([]byte, 16)
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		id[0], id[1], id[2], id[3] = byte(i), byte(i>>8), byte(i>>16), byte(i>>24)
		cmd.RequestId = id
		apply(b, m, log.Entry(b, 1000+int64(i/1000), cmd))
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

// BenchmarkLockCompleteFollower is BenchmarkLockComplete on a replica that
// does not answer the batches (another node proposed them): what two of
// the three replicas of a group do for every message received. A machine
// that answers them runs beside it, untimed, for the lock tokens (its
// background flushes and compactions still share the cores, as a leader's
// do on the dev cluster).
func BenchmarkLockCompleteFollower(b *testing.B) {
	lead := benchMachine(b)
	fol, err := partition.Open(b.TempDir(), partition.Options{Logger: pt.Options().Logger, Replica: "follower"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { fol.Close() })
	var index uint64
	benchLockComplete(b, func(now int64, timed bool, c *partitionpb.Command) *partitionpb.Result {
		data, err := partition.EncodeBatch(&partitionpb.Batch{NowMs: now, Commands: []*partitionpb.Command{c}, Proposer: "leader"})
		if err != nil {
			b.Fatal(err)
		}
		index++
		e := partition.Entry{Index: index, Data: data}
		if timed {
			b.StopTimer()
		}
		r := apply(b, lead, e)[0]
		if timed {
			b.StartTimer()
		}
		apply(b, fol, e)
		return r
	})
}

// BenchmarkApplyPublish applies entries of one Enqueue of 64 messages of
// 1 KiB to a topic with 10 subscriptions, each with a three-clause SQL
// filter that matches: 640 copies per entry. msgs/s counts messages sent,
// copies/s the copies made; compare msgs/s with BenchmarkApplyEnqueue's.
// In "log", bodies stay in the Raft log as on a storage node, and every
// copy names the same bytes; in "store", each copy writes its body. The
// entries carry the leader's plan (plan.go), as a node's do; in
// "log-unplanned" they do not, as an older leader's, and every replica
// evaluates the rules.
func BenchmarkApplyPublish(b *testing.B) {
	for _, inLog := range []bool{false, true} {
		name := "store"
		if inLog {
			name = "log"
		}
		b.Run(name, func(b *testing.B) { benchPublish(b, inLog, 1, true) })
	}
	// As a storage node applies under load: several entries per Apply
	// (raft hands the FSM what committed since its last batch).
	b.Run("log-8-per-apply", func(b *testing.B) { benchPublish(b, true, 8, true) })
	b.Run("log-unplanned", func(b *testing.B) { benchPublish(b, true, 1, false) })
}

// publishSetup makes m's topic of ten subscriptions, each with a
// three-clause SQL filter, and returns a send of benchBatch messages that
// match every one.
func publishSetup(b *testing.B, m *partition.Machine, log *pt.Log) *partitionpb.Command {
	cmds := []*partitionpb.Command{pt.Upsert(&partitionpb.EntityConfig{EntityId: 1, Name: "t", Kind: placementpb.EntityKind_ENTITY_KIND_TOPIC})}
	for i := range uint64(10) {
		cmds = append(cmds, pt.Upsert(&partitionpb.EntityConfig{EntityId: 2 + i, Name: "t/Subscriptions/s", Kind: placementpb.EntityKind_ENTITY_KIND_SUBSCRIPTION,
			TopicId: 1, Rules: []*placementpb.Rule{{Name: "r", Filter: &placementpb.Rule_SqlFilter{SqlFilter: &placementpb.SqlFilter{
				Expression: "color = 'red' AND qty > 2 AND sys.Label LIKE 'pa%'"}}}}}))
	}
	apply(b, m, log.Entry(b, 0, cmds...))
	msgs := benchMessages()
	for _, nm := range msgs {
		nm.FilterView = &partitionpb.FilterView{Subject: "paint", Properties: map[string]*placementpb.RuleValue{
			"color": {Value: &placementpb.RuleValue_StringValue{StringValue: "red"}},
			"qty":   {Value: &placementpb.RuleValue_LongValue{LongValue: 5}},
		}}
	}
	return pt.Enqueue(1, 0, msgs...)
}

// BenchmarkPlanTopicSends is the leader's share of a send to
// BenchmarkApplyPublish's topic: evaluating the rules once, as it builds
// the batch (plan.go).
func BenchmarkPlanTopicSends(b *testing.B) {
	m := benchMachine(b)
	var log pt.Log
	batch := &partitionpb.Batch{NowMs: 1000, Commands: []*partitionpb.Command{publishSetup(b, m, &log)}}
	cpu := processCPU()
	for b.Loop() {
		m.PlanTopicSends(batch)
	}
	if len(batch.TopicPlans) != 1 {
		b.Fatalf("%d plans, want 1", len(batch.TopicPlans))
	}
	b.ReportMetric(float64((processCPU()-cpu).Microseconds())/float64(b.N*benchBatch), "cpu-µs/msg")
}

func benchPublish(b *testing.B, inLog bool, perApply int, planned bool) {
	// The copies as the product writes them, not checked twice (export_test.go).
	verify := store.VerifyCopies
	store.VerifyCopies = false
	b.Cleanup(func() { store.VerifyCopies = verify })
	m := benchMachine(b)
	var fl *fakeLog
	if inLog {
		fl = newFakeLog()
		opts := pt.Options()
		opts.Log = fl.read
		var err error
		if m, err = partition.Open(b.TempDir(), opts); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { m.Close() })
	}
	var log pt.Log
	batch := &partitionpb.Batch{NowMs: 1000, Commands: []*partitionpb.Command{publishSetup(b, m, &log)}}
	if planned {
		m.PlanTopicSends(batch)
	}
	data, err := partition.EncodeBatch(batch)
	if err != nil {
		b.Fatal(err)
	}
	log.Last++
	entry := partition.Entry{Index: log.Last, Data: data}
	b.SetBytes(int64(perApply * benchBatch * 1024))
	b.ResetTimer()
	entries := make([]partition.Entry, perApply)
	cpu := processCPU()
	for b.Loop() {
		for i := range entries {
			log.Last++
			entries[i] = entry
			entries[i].Index = log.Last
			if fl != nil {
				fl.add(entries[i])
			}
		}
		if _, err := m.Apply(entries); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*perApply*benchBatch)/b.Elapsed().Seconds(), "msgs/s")
	b.ReportMetric(float64(b.N*perApply*benchBatch*10)/b.Elapsed().Seconds(), "copies/s")
	// Pebble's flushes and compactions included, and apart from what else
	// runs on the machine: wall time alone misleads on two shared cores.
	b.ReportMetric(float64((processCPU()-cpu).Microseconds())/float64(b.N*perApply*benchBatch), "cpu-µs/msg")
}

// processCPU is the CPU the process has used (user and system).
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkDrainSubscriptions drains a topic's ten subscriptions at once,
// as ten receivers do: 64 copies locked in each, then the ten settled,
// over a backlog sent to the topic beforehand (every subscription's rule
// matches every message), bodies in the Raft log as on a storage node.
// The copies of one message have the same sequence number in every
// subscription, so the settlements find their records in the machine's
// cache of locked states only if it keeps the subscriptions apart
// (store.LockedStates).
func BenchmarkDrainSubscriptions(b *testing.B) {
	const subs = 10
	fl := newFakeLog()
	opts := pt.Options()
	opts.Log = fl.read
	m, err := partition.Open(b.TempDir(), opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { m.Close() })
	var log pt.Log
	do := func(now int64, c *partitionpb.Command) *partitionpb.Result {
		e := log.Entry(b, now, c)
		fl.add(e)
		return apply(b, m, e)[0]
	}
	do(0, pt.Upsert(&partitionpb.EntityConfig{EntityId: 1, Name: "t", Kind: placementpb.EntityKind_ENTITY_KIND_TOPIC}))
	for i := range uint64(subs) {
		do(0, pt.Upsert(&partitionpb.EntityConfig{EntityId: 2 + i, Name: "t/Subscriptions/s", Kind: placementpb.EntityKind_ENTITY_KIND_SUBSCRIPTION,
			TopicId: 1, Rules: []*placementpb.Rule{{Name: "r", Filter: &placementpb.Rule_SqlFilter{SqlFilter: &placementpb.SqlFilter{Expression: "1 = 1"}}}}}))
	}
	fill := func(n int) {
		for range n {
			do(1000, pt.Enqueue(1, 0, benchMessages()...))
		}
	}
	fill(16)
	b.ResetTimer()
	cpu := processCPU()
	n := 0
	for b.Loop() {
		if n++; n%16 == 0 {
			b.StopTimer()
			filling := processCPU()
			fill(16)
			cpu += processCPU() - filling
			b.StartTimer()
		}
		var locked [subs]*partitionpb.Result
		for i := range uint64(subs) {
			locked[i] = do(2000, pt.Lock(2+i, 0, pt.Main, benchBatch, uint64(n)))
			if len(locked[i].Messages) != benchBatch {
				b.Fatalf("locked %d", len(locked[i].Messages))
			}
		}
		for i := range uint64(subs) {
			if r := do(2000, pt.Settle(2+i, 0, pt.Main, partitionpb.Disposition_DISPOSITION_COMPLETE, pt.Tokens(locked[i])...)); r.Code != partitionpb.ResultCode_RESULT_OK {
				b.Fatal(r.Code)
			}
		}
	}
	deliveries := float64(b.N * subs * benchBatch)
	b.ReportMetric(deliveries/b.Elapsed().Seconds(), "deliveries/s")
	b.ReportMetric(float64((processCPU()-cpu).Microseconds())/deliveries, "cpu-µs/delivery")
}
