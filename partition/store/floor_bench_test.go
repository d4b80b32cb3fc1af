package store

import (
	"io"
	"log/slog"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// BenchmarkCopyFloor is the floor under a topic copy's write (issue 21's
// send ratio, docs/performance.md): per batch the 640 state records of 64
// messages sent to 10 subscriptions, each as addCopy builds it (body in
// the Raft log, no TTL), committed without sync into a store opened with
// the store's options and the dev cluster's 32 MiB cache.
//
//   - pebble: the encoded records written in key order into a plain
//     pebble batch: what any store of one record per copy pays;
//   - store: the same copies through the store's API as the applier
//     writes them (PutNewState, SortedCommit).
//
// cpu-ns/record is the process's CPU (user + system, from getrusage)
// over the records written, so pebble's flushes and compactions, which
// run on goroutines of their own, count; ns/op is wall time per batch.
func BenchmarkCopyFloor(b *testing.B) {
	b.Run("pebble", func(b *testing.B) { benchCopies(b, true) })
	b.Run("store", func(b *testing.B) { benchCopies(b, false) })
}

const (
	floorSubs     = 10
	floorMessages = 64
)

func benchCopies(b *testing.B, raw bool) {
	cache := NewCache(32 << 20)
	defer cache.Unref()
	db, err := Open(b.TempDir(), Options{Cache: cache, CacheBytes: 32 << 20, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, true)
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	m := &partitionpb.StoredMessage{
		SubQueue: partitionpb.SubQueue_SUB_QUEUE_MAIN, State: partitionpb.MessageState_MESSAGE_STATE_ACTIVE,
		EnqueuedTimeMs: time.Now().UnixMilli(), BodyIndex: 1000, BodyOffset: 40, BodyLength: 1060, BodyCrc: 0xdeadbeef, Size: 1060,
	}
	cached := NewLockedStates()
	var commit SortedCommit
	var next uint64
	scratch := db.pb.NewBatch()
	value, err := SetRecord(scratch, MessageKey(EntityKey{ID: 2}, m.SubQueue, 0), m, false)
	if err != nil {
		b.Fatal(err)
	}
	value = append(value[:len(value):len(value)], 0, 0, 0, 0) // and a CRC's room, as sealed
	scratch.Close()
	var key []byte
	out := db.pb.NewBatch()
	defer out.Close()
	start := cpuTime()
	b.ResetTimer()
	for b.Loop() {
		if raw {
			// The record's bytes as encoded once, written under each
			// copy's key in key order (subscription by subscription,
			// sequence numbers ascending).
			for sub := range uint64(floorSubs) {
				k := EntityKey{ID: 2 + sub, Part: 0}
				for i := range uint64(floorMessages) {
					key = AppendSeqKey(key[:0], k, KindMessage, partitionpb.SubQueue_SUB_QUEUE_MAIN, next+i)
					if err := out.Set(key, value, nil); err != nil {
						b.Fatal(err)
					}
				}
			}
			if err := out.Commit(pebble.NoSync); err != nil {
				b.Fatal(err)
			}
			out.Reset()
		} else {
			batch := commit.NewBatch(db, 0, cached)
			// As publish writes them: message by message, a copy per
			// subscription.
			for i := range uint64(floorMessages) {
				for sub := range uint64(floorSubs) {
					m.SequenceNumber = next + i
					if err := batch.PutNewState(EntityKey{ID: 2 + sub, Part: 0}, m); err != nil {
						b.Fatal(err)
					}
				}
			}
			if err := commit.Commit(db, &batch); err != nil {
				b.Fatal(err)
			}
			batch.Close()
		}
		next += floorMessages
	}
	records := float64(b.N * floorSubs * floorMessages)
	b.ReportMetric(float64((cpuTime()-start).Nanoseconds())/records, "cpu-ns/record")
	b.ReportMetric(records/b.Elapsed().Seconds(), "records/s")
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
