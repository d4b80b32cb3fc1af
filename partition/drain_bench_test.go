package partition_test

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/quorumbus/quorumbus/partition"
	pt "github.com/quorumbus/quorumbus/partition/partitiontest"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// BenchmarkDrainShapes is the state machine's share (one replica, the one
// that answers) of BenchmarkTopicAgainstPlain's two drains, with as many
// messages delivered: a plain queue of 100,000 messages drained by four
// receivers, and a topic's ten subscriptions of 10,000 copies each
// drained by forty, four per subscription. Each round is what the
// cluster's group commit gives: one entry holding every receiver's Lock
// (each asked Available first, as a node does), then one holding their
// completes. The Locks ask about as much as the dev cluster's receives
// carry in BenchmarkTopicAgainstPlain (its requests per 1,000 deliveries,
// Locks and Settles alike, give 72 and 20 messages a Lock). The backlog
// spills from the memtables (32 MiB, the dev cluster's) into tables, as
// in the cluster. It reports the process's CPU per delivery of the drain.
//
//	go test ./partition -run XXX -bench DrainShapes -benchtime 1x
func BenchmarkDrainShapes(b *testing.B) {
	const deliveries = 100_000
	shapes := []struct {
		name      string
		subs      int // 0: a plain queue
		perEntity int // receivers of each queue or subscription
		lock      uint32
	}{
		{"queue", 0, 4, 72},
		{"topic", 10, 4, 20},
	}
	body := bytes.Repeat([]byte("x"), 1024)
	batch := make([]*partitionpb.NewMessage, 256)
	for i := range batch {
		batch[i] = &partitionpb.NewMessage{Bare: body}
	}
	for _, sh := range shapes {
		b.Run(fmt.Sprintf("%s-%dx%d", sh.name, max(sh.subs, 1)*sh.perEntity, sh.lock), func(b *testing.B) {
			var cpu float64
			for b.Loop() {
				b.StopTimer()
				fl := newFakeLog()
				opts := pt.Options()
				opts.Log, opts.CacheBytes = fl.read, 32<<20
				m, err := partition.Open(b.TempDir(), opts)
				if err != nil {
					b.Fatal(err)
				}
				var log pt.Log
				do := func(now int64, cmds ...*partitionpb.Command) []*partitionpb.Result {
					e := log.Entry(b, now, cmds...)
					fl.add(e)
					res, err := m.Apply([]partition.Entry{e})
					if err != nil {
						b.Fatal(err)
					}
					return res[0]
				}
				var entities []uint64 // the queue, or the subscriptions
				sends := deliveries / len(batch)
				if sh.subs == 0 {
					do(0, pt.Upsert(pt.Queue(1, 0, "q")))
					entities = []uint64{1}
				} else {
					do(0, pt.Upsert(&partitionpb.EntityConfig{EntityId: 1, Name: "t", Kind: placementpb.EntityKind_ENTITY_KIND_TOPIC}))
					for i := range uint64(sh.subs) {
						do(0, pt.Upsert(&partitionpb.EntityConfig{EntityId: 2 + i, Name: fmt.Sprintf("t/Subscriptions/s%d", i), Kind: placementpb.EntityKind_ENTITY_KIND_SUBSCRIPTION,
							TopicId: 1, Rules: []*placementpb.Rule{{Name: "r", Filter: &placementpb.Rule_SqlFilter{SqlFilter: &placementpb.SqlFilter{Expression: "1 = 1"}}}}}))
						entities = append(entities, 2+i)
					}
					sends /= sh.subs
				}
				for range sends {
					do(1000, pt.Enqueue(1, 0, batch...))
				}
				b.StartTimer()
				before := processCPU()
				got, seed := 0, uint64(0)
				for round := true; round; {
					var locks []*partitionpb.Command
					var owner []uint64
					for _, id := range entities {
						for range sh.perEntity {
							if m.Available(id, 0, pt.Main) {
								seed++
								locks, owner = append(locks, pt.Lock(id, 0, pt.Main, sh.lock, seed)), append(owner, id)
							}
						}
					}
					if round = len(locks) > 0; !round {
						break
					}
					var settles []*partitionpb.Command
					for i, r := range do(2000, locks...) {
						if len(r.Messages) > 0 {
							got += len(r.Messages)
							settles = append(settles, pt.Settle(owner[i], 0, pt.Main, partitionpb.Disposition_DISPOSITION_COMPLETE, pt.Tokens(r)...))
						}
					}
					if len(settles) > 0 {
						for _, r := range do(2000, settles...) {
							if r.Code != partitionpb.ResultCode_RESULT_OK {
								b.Fatal(r.Code)
							}
						}
					}
				}
				cpu += float64((processCPU() - before).Microseconds())
				b.StopTimer()
				if want := sends * len(batch) * max(sh.subs, 1); got != want {
					b.Fatalf("delivered %d of %d", got, want)
				}
				m.Close()
				b.StartTimer()
			}
			b.ReportMetric(cpu/float64(b.N*deliveries), "cpu-µs/delivery")
		})
	}
}
