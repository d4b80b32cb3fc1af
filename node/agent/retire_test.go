package agent_test

import (
	"cmp"
	"context"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"

	"github.com/quorumbus/quorumbus/node"
	"github.com/quorumbus/quorumbus/node/agent"
	"github.com/quorumbus/quorumbus/node/nodetest"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
	"github.com/quorumbus/quorumbus/proto/placementpb"
	"github.com/quorumbus/quorumbus/proto/rpcnet"
)

// startNamedNode is startNode for a node named id, on addr ("": a free
// port) and dir.
func startNamedNode(t *testing.T, id, addr, dir string, own *fakePlacement) *node.Node {
	t.Helper()
	ln, err := net.Listen("tcp", cmp.Or(addr, "127.0.0.1:0"))
	if err != nil {
		t.Fatal(err)
	}
	n, err := node.New(node.Config{ID: id, DataDir: dir, Listener: ln, CacheBytes: 8 << 20, Logger: nodetest.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	if err := n.Register(func(s *grpc.Server) { placementpb.RegisterPlacementServiceServer(s, own) }); err != nil {
		t.Fatal(err)
	}
	if err := n.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestRemovedReplicaRetires: a replica removed from its group while its
// node was down never hears of it (the leader no longer replicates to
// it) and, back up, would ask the others for votes for as long as it
// runs. While the routing table still lists it (placement has not
// recorded the move done), the agent finds that the group's leader no
// longer counts it and closes it, and a table that lists it again does
// not reopen it. Once the leader adds it back (a move returning the group
// to the node starts with a learner), it opens again and catches up; a
// table without it deletes it.
func TestRemovedReplicaRetires(t *testing.T) {
	nodes := []*node.Node{
		startNamedNode(t, "n1", "", t.TempDir(), newFakePlacement()),
		startNamedNode(t, "n2", "", t.TempDir(), newFakePlacement()),
	}
	dir3 := t.TempDir()
	n3 := startNamedNode(t, "n3", "", dir3, newFakePlacement())
	nodes = append(nodes, n3)
	var peers []node.Peer
	tbl := &placementpb.RoutingTable{Version: 1, Groups: []*placementpb.Group{{Id: 1}}}
	for _, n := range nodes {
		peers = append(peers, node.Peer{ID: n.ID(), Addr: n.Addr()})
		tbl.Nodes = append(tbl.Nodes, &placementpb.Node{Id: n.ID(), GrpcAddr: n.Addr()})
		tbl.Groups[0].Replicas = append(tbl.Groups[0].Replicas, &placementpb.Replica{NodeId: n.ID()})
	}
	for _, n := range nodes {
		if err := n.EnsureGroup(1, peers); err != nil {
			t.Fatal(err)
		}
	}
	// The leader, not n3.
	leader := func() *node.Node {
		for _, n := range nodes {
			if st, err := n.Group(1); err == nil && st.Serving {
				return n
			}
		}
		return nil
	}
	nodetest.WaitFor(t, "a leader of group 1 other than n3", func() bool {
		l := leader()
		if l == n3 {
			n3.TransferLeadership(1, node.Peer{})
			return false
		}
		return l != nil
	})
	change := func(kind partitionpb.ReplicaChange, addr string) {
		t.Helper()
		cc, err := rpcnet.Dial(leader().Addr(), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := partitionpb.NewGroupMembershipClient(cc).ChangeReplica(ctx, &partitionpb.ChangeReplicaRequest{GroupId: 1, Change: kind, NodeId: "n3", Addr: addr}); err != nil {
			t.Fatal(err)
		}
	}
	nodetest.WaitFor(t, "n3 caught up", func() bool {
		st, err := n3.Group(1)
		return err == nil && st.Leader.ID != "" && st.Voter
	})

	// n3 goes down, is removed meanwhile, and comes back.
	addr3 := n3.Addr()
	if err := n3.Close(); err != nil {
		t.Fatal(err)
	}
	nodes = nodes[:2]
	change(partitionpb.ReplicaChange_REPLICA_CHANGE_REMOVE, "")
	own := newFakePlacement()
	n3 = startNamedNode(t, "n3", addr3, dir3, own)
	nodes = append(nodes, n3)
	nodetest.WaitFor(t, "n3's replica back and campaigning", func() bool {
		st, err := n3.Group(1)
		return err == nil && st.State == raft.Candidate && st.Voter
	})
	startAgent(t, agent.Config{Node: n3, LeaderlessAfter: 300 * time.Millisecond})
	own.tables <- tbl

	nodetest.WaitFor(t, "n3's replica retired while the table still lists it", func() bool {
		return !slices.Contains(n3.Groups(), 1) && slices.Equal(n3.Retired(), []uint64{1})
	})
	// A table that still lists it leaves it closed.
	again := proto2(tbl, 2)
	own.tables <- again
	time.Sleep(time.Second) // a reopened replica would be open by now
	if slices.Contains(n3.Groups(), 1) {
		t.Fatal("a table that still lists n3 reopened its retired replica")
	}

	// A move back: the leader adds n3 as a learner.
	change(partitionpb.ReplicaChange_REPLICA_CHANGE_ADD_LEARNER, n3.Addr())
	own.tables <- proto2(tbl, 3)
	nodetest.WaitFor(t, "n3's replica open again and caught up", func() bool {
		l, err := leader().Group(1)
		if err != nil {
			return false
		}
		st, err := n3.Group(1)
		return err == nil && len(n3.Retired()) == 0 && st.AppliedIndex >= l.AppliedIndex && st.Leader.ID != ""
	})

	// The group moved off n3 for good: gone from the disk.
	change(partitionpb.ReplicaChange_REPLICA_CHANGE_REMOVE, "")
	off := proto2(tbl, 4)
	off.Groups[0].Replicas = off.Groups[0].Replicas[:2]
	own.tables <- off
	nodetest.WaitFor(t, "group 1 removed from n3", func() bool {
		return !slices.Contains(n3.Groups(), 1) && len(n3.Retired()) == 0
	})
}

// proto2 is a copy of t at version v.
func proto2(t *placementpb.RoutingTable, v uint64) *placementpb.RoutingTable {
	c := &placementpb.RoutingTable{Version: v, Nodes: t.Nodes}
	for _, g := range t.Groups {
		c.Groups = append(c.Groups, &placementpb.Group{Id: g.Id, Replicas: slices.Clone(g.Replicas)})
	}
	return c
}
