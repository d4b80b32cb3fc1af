package catalog

import (
	"errors"
	"slices"
	"testing"

	pb "github.com/quorumbus/quorumbus/proto/placementpb"
)

func replicaIDs(g *pb.Group) []string {
	var ids []string
	for _, r := range g.Replicas {
		id := r.NodeId
		if r.Joined {
			id += "+"
		}
		ids = append(ids, id)
	}
	return ids
}

// A move lists its target joined, refuses a second move of the group, and
// ends with the source gone (or, aborted, the target); each step changes
// the routing table.
func TestMoves(t *testing.T) {
	d := populated(t) // group 1: n1, n2
	st := func() *State { return d.f.state }
	d.apply(wrap(&pb.RegisterNodes{Nodes: []*pb.Node{{Id: "n4", Zone: "d", Alive: true}}}))

	for _, bad := range []*pb.StartMove{
		{GroupId: 9, From: "n1", To: "n4"},  // no such group
		{GroupId: 1, From: "n3", To: "n4"},  // n3 holds no replica of it
		{GroupId: 1, From: "n1", To: "n2"},  // n2 holds one
		{GroupId: 1, From: "n1", To: "n99"}, // unknown node
	} {
		if res := d.apply(wrap(bad)); res.Err == nil {
			t.Errorf("%v: applied", bad)
		}
	}
	routes := st().RoutesVersion()
	if res := d.apply(wrap(&pb.StartMove{GroupId: 1, From: "n1", To: "n4"})); res.Err != nil {
		t.Fatal(res.Err)
	}
	g := st().Group(1)
	if got := replicaIDs(g); !slices.Equal(got, []string{"n1", "n2", "n4+"}) || g.MovingFrom != "n1" || g.MovingTo != "n4" {
		t.Fatalf("after StartMove: %v, moving %s -> %s", got, g.MovingFrom, g.MovingTo)
	}
	if st().RoutesVersion() == routes {
		t.Error("StartMove did not change the routing table")
	}
	if res := d.apply(wrap(&pb.StartMove{GroupId: 1, From: "n2", To: "n3"})); !errors.Is(res.Err, ErrConflict) {
		t.Errorf("second move of a moving group: %v", res.Err)
	}
	if res := d.apply(wrap(&pb.FinishMove{GroupId: 1, From: "n2", To: "n4"})); !errors.Is(res.Err, ErrConflict) {
		t.Errorf("finishing another move: %v", res.Err)
	}
	if res := d.apply(wrap(&pb.FinishMove{GroupId: 1, From: "n1", To: "n4"})); res.Err != nil {
		t.Fatal(res.Err)
	}
	if g := st().Group(1); !slices.Equal(replicaIDs(g), []string{"n2", "n4+"}) || g.MovingFrom != "" {
		t.Fatalf("after FinishMove: %v, moving %q", replicaIDs(g), g.MovingFrom)
	}

	d.apply(wrap(&pb.StartMove{GroupId: 1, From: "n2", To: "n1"}))
	if res := d.apply(wrap(&pb.FinishMove{GroupId: 1, From: "n2", To: "n1", Abort: true})); res.Err != nil {
		t.Fatal(res.Err)
	}
	if g := st().Group(1); !slices.Equal(replicaIDs(g), []string{"n2", "n4+"}) {
		t.Fatalf("after an aborted move: %v", replicaIDs(g))
	}
}

// Draining is the operator's: membership updates keep it. dead_since is
// set when a node is first seen dead and kept while it stays dead.
func TestDrainAndDeadSince(t *testing.T) {
	d := populated(t)
	st := func() *State { return d.f.state }
	if res := d.apply(wrap(&pb.DrainNodeRequest{NodeId: "n2", Draining: true})); res.Err != nil {
		t.Fatal(res.Err)
	}
	if res := d.apply(wrap(&pb.DrainNodeRequest{NodeId: "n9", Draining: true})); !errors.Is(res.Err, ErrUnknownNode) {
		t.Errorf("draining an unknown node: %v", res.Err)
	}
	dead := wrap(&pb.RegisterNodes{Nodes: []*pb.Node{{Id: "n2", Zone: "b", Alive: false}}})
	dead.NowMs = 1000
	d.apply(dead)
	if n := st().Node("n2"); !n.Draining || n.DeadSinceMs != 1000 {
		t.Fatalf("after death: %v", n)
	}
	dead.NowMs = 5000
	d.apply(dead)
	if n := st().Node("n2"); n.DeadSinceMs != 1000 {
		t.Errorf("dead since moved to %d", n.DeadSinceMs)
	}
	d.apply(wrap(&pb.RegisterNodes{Nodes: []*pb.Node{{Id: "n2", Zone: "b", Alive: true}}}))
	if n := st().Node("n2"); !n.Draining || n.DeadSinceMs != 0 || !n.Alive {
		t.Errorf("alive again: %v", n)
	}
}
