package partition_test

import (
	"bytes"
	"fmt"
	"testing"

	pt "github.com/quorumbus/quorumbus/partition/partitiontest"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// BenchmarkSessionLockComplete is BenchmarkLockComplete on a session
// entity: 64 sessions of 64 messages of 1 KiB, each accepted, its 64
// messages locked in one entry and completed in the next, and released.
// msgs/s compares with BenchmarkLockComplete's (the issue asks for at
// least half the plain queue's rate).
func BenchmarkSessionLockComplete(b *testing.B) {
	m := benchMachine(b)
	var log pt.Log
	do := func(now int64, c *partitionpb.Command) *partitionpb.Result {
		r := apply(b, m, log.Entry(b, now, c))[0]
		if r.Code != partitionpb.ResultCode_RESULT_OK {
			b.Fatalf("%v: %v %s", c, r.Code, r.Description)
		}
		return r
	}
	do(0, pt.Upsert(pt.SessionQueue(1, 0, "sq")))
	body := bytes.Repeat([]byte("x"), 1024)
	round := 0
	fill := func() {
		for s := range 64 {
			ms := make([]*partitionpb.NewMessage, benchBatch)
			for i := range ms {
				ms[i] = &partitionpb.NewMessage{SessionId: fmt.Sprintf("r%d-s%d", round, s), Bare: body}
			}
			do(1000, pt.Enqueue(1, 0, ms...))
		}
		round++
	}
	fill()
	b.ResetTimer()
	n := 0
	for b.Loop() {
		if n++; n%64 == 0 {
			b.StopTimer()
			fill()
			b.StartTimer()
		}
		tok := pt.SessionToken(uint64(n))
		acc := do(2000, pt.Accept(1, 0, "", tok))
		r := do(2000, pt.LockSession(1, 0, acc.SessionId, tok, benchBatch, uint64(n)))
		if len(r.Messages) != benchBatch {
			b.Fatalf("locked %d", len(r.Messages))
		}
		do(2000, pt.Settle(1, 0, pt.Main, partitionpb.Disposition_DISPOSITION_COMPLETE, pt.Tokens(r)...))
		do(2000, pt.Release(1, 0, acc.SessionId, tok))
	}
	b.ReportMetric(float64(b.N*benchBatch)/b.Elapsed().Seconds(), "msgs/s")
}
