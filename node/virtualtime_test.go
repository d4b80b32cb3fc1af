package node_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/quorumbus/quorumbus/node/nodetest"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// TestLeaderClockInVirtualTime runs three real nodes, their connections
// in memory, inside a testing/synctest bubble, so that the node's timers
// run on virtual time: a message scheduled ten minutes ahead stays
// scheduled for nine and is activated by the leader's clock within the
// next two; its 30 s lock then ends by the leader's ExpireLocks, and the
// message comes back with its delivery count raised. In real time this
// would take eleven minutes; here it takes what the work takes (every
// heartbeat of the eleven virtual minutes is still sent and answered).
func TestLeaderClockInVirtualTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := nodetest.Start(t, nodetest.Options{Nodes: 3, Groups: []uint64{group}, InMemory: true})
		cl := c.Client(group)
		upsertEntity(t, cl, 30_000)
		due := time.Now().Add(10 * time.Minute)
		seqs := sendMessages(t, cl, &partitionpb.NewMessage{MessageId: "hourly", Bare: []byte("hourly"), ScheduledEnqueueTimeMs: due.UnixMilli()})

		time.Sleep(9 * time.Minute)
		if st := stats(t, cl); st.ScheduledMessages != 1 || st.ActiveMessages != 0 {
			t.Fatalf("9 minutes in: %v, want one scheduled message", st)
		}
		time.Sleep(2 * time.Minute)
		got := receive(t, cl, 1, false, 0)
		if len(got) != 1 || got[0].SequenceNumber == seqs[0] || got[0].EnqueuedTimeMs < due.UnixMilli() {
			t.Fatalf("11 minutes in, received %v: want the message activated under a new sequence number", got)
		}
		first := got[0]

		time.Sleep(31 * time.Second)
		got = receive(t, cl, 1, false, 0)
		if len(got) != 1 || got[0].SequenceNumber != first.SequenceNumber || got[0].DeliveryCount != first.DeliveryCount+1 {
			t.Fatalf("after the lock's 30 s, received %v: want the message again, delivery count %d", got, first.DeliveryCount+1)
		}
		if r := settle(t, cl, partitionpb.Disposition_DISPOSITION_COMPLETE, got[0]); r.Code != partitionpb.ResultCode_RESULT_OK {
			t.Fatalf("complete: %v", r)
		}
	})
}
