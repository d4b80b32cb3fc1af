package node_test

import (
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/node"
	"github.com/quorumbus/quorumbus/node/nodetest"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// TestSkewedLeaderClock shows what a leader's wall clock decides, with n2's
// clock an hour ahead of n1's: a lock is a time on the clock of the leader
// that granted it, read against the clock of whichever node leads later.
// Leadership moving to the node ahead expires a lock granted on the true
// clock at once (early, by at most the skew: the complete with its token
// is refused, the message delivered again, nothing completed twice);
// moving back keeps a lock granted on the clock ahead for the skew longer.
func TestSkewedLeaderClock(t *testing.T) {
	const skew = time.Hour
	c := nodetest.Start(t, nodetest.Options{Groups: []uint64{group}, Configure: func(i int, cfg *node.Config) {
		fastElections(i, cfg)
		if i == 1 {
			node.SkewClock(cfg, skew)
		}
	}})
	cl := c.Client(group)
	makeLeader(t, c, 0)
	upsertEntity(t, cl, 60_000)
	if _, err := send(ctxFor(t), cl, "granted on the true clock"); err != nil {
		t.Fatal(err)
	}
	first := receive(t, cl, 1, false, 0)
	if len(first) != 1 || first[0].LockedUntilMs > time.Now().Add(10*time.Minute).UnixMilli() {
		t.Fatalf("received %v, want one message locked on the true clock", first)
	}

	makeLeader(t, c, 1)
	again := receive(t, cl, 1, false, 20_000)
	if len(again) != 1 || again[0].SequenceNumber != first[0].SequenceNumber || again[0].DeliveryCount != 1 {
		t.Fatalf("after n2 (an hour ahead) took over: received %v, want the message again, its lock expired", again)
	}
	if again[0].LockedUntilMs < time.Now().Add(skew-time.Minute).UnixMilli() {
		t.Fatalf("n2 locked it until %d, want on its clock, an hour ahead", again[0].LockedUntilMs)
	}
	if r := settle(t, cl, partitionpb.Disposition_DISPOSITION_COMPLETE, first...); r.Code != partitionpb.ResultCode_RESULT_LOCK_LOST {
		t.Fatalf("complete with the first lock: %v, want lock lost", r)
	}

	makeLeader(t, c, 0)
	if got := receive(t, cl, 1, false, 1_000); len(got) != 0 {
		t.Fatalf("back on the true clock: received %v, want the message still locked (until n2's clock said)", got)
	}
	if r := settle(t, cl, partitionpb.Disposition_DISPOSITION_COMPLETE, again...); r.Code != partitionpb.ResultCode_RESULT_OK {
		t.Fatalf("complete with the lock n2 granted: %v", r)
	}
}
