package partition_test

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/quorumbus/quorumbus/partition"
	pt "github.com/quorumbus/quorumbus/partition/partitiontest"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// BenchmarkSessionLockComplete is BenchmarkLockComplete on a session
// entity: 64 sessions of 64 messages of 1 KiB, each accepted, its 64
// messages locked in one entry and completed in the next, and released.
// msgs/s compares with BenchmarkLockComplete's (the issue asks for at
// least half the plain queue's rate).
func BenchmarkSessionLockComplete(b *testing.B) {
	do := okApplier(b, benchMachine(b))
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

// BenchmarkSessionAcceptNext is the apply of one accept-next (an
// AcceptSession with Next, then the Release that gives the session back,
// not timed) on a session entity where consumed sessions had already
// been taken out of the index of ready ones: what an accept-next costs
// the state machine besides its Raft commit, and whether that grows with
// the sessions consumed before it. Each session holds one message, taken
// with receive-and-delete so that the release leaves it empty.
func BenchmarkSessionAcceptNext(b *testing.B) {
	for _, consumed := range []int{0, 1000, 10000} {
		b.Run(fmt.Sprintf("consumed=%d", consumed), func(b *testing.B) {
			do := okApplier(b, benchMachine(b))
			do(0, pt.Upsert(pt.SessionQueue(1, 0, "sq")))
			made := 0
			add := func(n int) {
				for n > 0 {
					ms := make([]*partitionpb.NewMessage, min(n, 256))
					for i := range ms {
						ms[i] = &partitionpb.NewMessage{SessionId: fmt.Sprintf("s%07d", made), Bare: []byte("x")}
						made++
					}
					do(1000, pt.Enqueue(1, 0, ms...))
					n -= len(ms)
				}
			}
			n := uint64(0)
			take := func(timed bool) {
				n++
				tok := pt.SessionToken(n)
				acc := do(2000, pt.Accept(1, 0, "", tok))
				if acc.SessionId == "" {
					b.Fatal("no session ready")
				}
				if timed {
					b.StopTimer()
				}
				lock := pt.LockSession(1, 0, acc.SessionId, tok, 1, n)
				lock.GetLock().ReceiveAndDelete = true
				do(2000, lock)
				do(2000, pt.Release(1, 0, acc.SessionId, tok))
				if timed {
					b.StartTimer()
				}
			}
			add(consumed)
			for range consumed {
				take(false)
			}
			add(b.N)
			b.ResetTimer()
			for range b.N {
				take(true)
			}
		})
	}
}

// okApplier returns a function that applies one command at now as the
// next entry of m's log and fails the benchmark unless its result is OK.
func okApplier(b *testing.B, m *partition.Machine) func(now int64, c *partitionpb.Command) *partitionpb.Result {
	var log pt.Log
	return func(now int64, c *partitionpb.Command) *partitionpb.Result {
		r := apply(b, m, log.Entry(b, now, c))[0]
		if r.Code != partitionpb.ResultCode_RESULT_OK {
			b.Fatalf("%v: %v %s", c, r.Code, r.Description)
		}
		return r
	}
}
