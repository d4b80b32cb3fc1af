package node_test

import (
	"fmt"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/quorumbus/quorumbus/node/nodetest"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// TestLeadershipGoesOnlyToACaughtUpReplica: a leader refuses to hand its
// leadership to a replica whose log is far behind its own (hashicorp/raft
// refuses every proposal while a transfer runs, and a transfer to a
// lagging replica runs as long as its catch-up), and hands it over once
// the replica has caught up.
func TestLeadershipGoesOnlyToACaughtUpReplica(t *testing.T) {
	c := nodetest.Start(t, nodetest.Options{Groups: []uint64{group}, Configure: fastElections})
	cl := c.Client(group)
	upsertEntity(t, cl, 60_000)
	leader := c.Leader(group)
	lagging := (leader + 1) % c.Len()
	c.Kill(lagging)
	for i := range 100 {
		if _, err := send(ctxFor(t), cl, fmt.Sprint("m", i)); err != nil {
			t.Fatal(err)
		}
	}
	cc, err := grpc.NewClient(c.Addr(leader), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	m := partitionpb.NewGroupMembershipClient(cc)
	lead := &partitionpb.ChangeReplicaRequest{GroupId: group, Change: partitionpb.ReplicaChange_REPLICA_CHANGE_LEAD,
		NodeId: c.Peers()[lagging].ID, Addr: c.Peers()[lagging].Addr}
	if _, err := m.ChangeReplica(ctxFor(t), lead); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("handing the leadership to a replica 100 entries behind: %v, want FailedPrecondition", err)
	}
	// The leader still takes proposals.
	if _, err := send(ctxFor(t), cl, "after the refusal"); err != nil {
		t.Fatal(err)
	}

	c.Restart(lagging)
	c.WaitFor("the lagging replica to be handed the leadership", func() bool {
		_, err := m.ChangeReplica(ctxFor(t), lead)
		return err == nil
	})
	c.WaitFor("the new leader", func() bool { return c.Leader(group) == lagging })
}
