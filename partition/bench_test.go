package partition_test

import (
	"bytes"
	"testing"

	"github.com/quorumbus/quorumbus/partition"
	pt "github.com/quorumbus/quorumbus/partition/partitiontest"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
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
	apply(b, m, log.Entry(b, 0, pt.Upsert(pt.Queue(1, 0, "q"))))
	fill := func(n int) {
		for range n {
			apply(b, m, log.Entry(b, 1000, pt.Enqueue(1, 0, benchMessages()...)))
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
		r := apply(b, m, log.Entry(b, 2000, pt.Lock(1, 0, pt.Main, benchBatch, uint64(n))))
		if len(r[0].Messages) != benchBatch {
			b.Fatalf("locked %d", len(r[0].Messages))
		}
		r = apply(b, m, log.Entry(b, 2000, pt.Settle(1, 0, pt.Main, partitionpb.Disposition_DISPOSITION_COMPLETE, pt.Tokens(r[0])...)))
		if r[0].Code != partitionpb.ResultCode_RESULT_OK {
			b.Fatal(r[0].Code)
		}
	}
	b.ReportMetric(float64(b.N*benchBatch)/b.Elapsed().Seconds(), "msgs/s")
}
