package placement_test

import (
	"slices"
	"testing"

	"github.com/quorumbus/quorumbus/placement/placementtest"
	pb "github.com/quorumbus/quorumbus/proto/placementpb"
)

// checkGroups checks what every group must satisfy: its replicas on
// distinct known nodes, no node holding more than perNodeCap replicas
// (0: unchecked). It returns the replicas each node holds.
func checkGroups(t *testing.T, table *pb.RoutingTable, perNodeCap int) map[string]int {
	t.Helper()
	known := map[string]bool{}
	for _, n := range table.Nodes {
		known[n.Id] = true
	}
	held := map[string]int{}
	for _, g := range table.Groups {
		seen := map[string]bool{}
		for _, r := range g.Replicas {
			if !known[r.NodeId] || seen[r.NodeId] {
				t.Fatalf("group %d: replica on %q unknown or repeated: %v", g.Id, r.NodeId, g.Replicas)
			}
			seen[r.NodeId] = true
			held[r.NodeId]++
		}
	}
	for id, n := range held {
		if perNodeCap > 0 && n > perNodeCap {
			t.Errorf("node %s holds %d group replicas, over the cap of %d: %v", id, n, perNodeCap, held)
		}
	}
	return held
}

func distinctGroups(e *pb.Entity) int {
	return len(slices.Compact(slices.Sorted(slices.Values(e.PartitionGroups))))
}

// TestPartitionedEntityGetsGroups: on five nodes with -groups 3 and at most
// 8 replicas a node, a queue of 16 partitions gets the groups five nodes
// hold (5 x 8 / 3 = 13), created before its partitions are placed, and
// spreads over all of them; replicas never share a node, and no node
// passes the cap. The entity created before it keeps its group, and plain
// entities create none.
func TestPartitionedEntityGetsGroups(t *testing.T) {
	c := placementtest.Start(t, placementtest.Options{Members: 5, Groups: 3, MaxReplicasPerNode: 8})
	leader := c.Leader(t)
	waitGroups(t, leader, 3)
	placementtest.Eventually(t, wait, "five nodes registered", func() bool { return len(leader.Service.Table().Nodes) == 5 })

	plain := createRetrying(t, leader, &pb.CreateEntityRequest{Name: "plain"})
	four := createRetrying(t, leader, &pb.CreateEntityRequest{Name: "four", Properties: &pb.QueueProperties{PartitionCount: 3}})
	if n := len(leader.Service.Table().Groups); n != 3 {
		t.Fatalf("%d groups after a plain entity and one of 3 partitions, want the 3 of -groups", n)
	}

	wide := createRetrying(t, leader, &pb.CreateEntityRequest{Name: "wide", Properties: &pb.QueueProperties{PartitionCount: 16}})
	table := leader.Service.Table()
	if n := len(table.Groups); n != 13 {
		t.Fatalf("%d groups after an entity of 16 partitions on 5 nodes of at most 8 replicas, want 13", n)
	}
	if n := distinctGroups(wide); n != 13 {
		t.Fatalf("16 partitions on %d groups %v, want 13", n, wide.PartitionGroups)
	}
	held := checkGroups(t, table, 8)
	t.Logf("16 partitions on groups %v; replicas per node %v", wide.PartitionGroups, held)

	for _, e := range []*pb.Entity{plain, four} {
		got := tableEntity(t, table, e.Name)
		if !slices.Equal(got.PartitionGroups, e.PartitionGroups) {
			t.Errorf("%s moved from groups %v to %v", e.Name, e.PartitionGroups, got.PartitionGroups)
		}
	}
	// Another wide entity finds the groups there: none more.
	again := createRetrying(t, leader, &pb.CreateEntityRequest{Name: "wide-2", Properties: &pb.QueueProperties{PartitionCount: 16}})
	if n := len(leader.Service.Table().Groups); n != 13 {
		t.Fatalf("%d groups after a second entity of 16 partitions, want still 13", n)
	}
	if n := distinctGroups(again); n != 13 {
		t.Fatalf("the second entity's 16 partitions on %d groups, want 13", n)
	}
}

// TestGroupsFollowNodes: with three nodes and at most 8 replicas a node
// (dev's default), an entity of 32 partitions gets 8 groups, no more. A
// fourth node that joins makes room for 10 once replicas moved onto it,
// and the control loop creates them without any entity asking.
func TestGroupsFollowNodes(t *testing.T) {
	c := placementtest.Start(t, placementtest.Options{Groups: 3, MaxReplicasPerNode: 8, Moves: true})
	leader := c.Leader(t)
	waitGroups(t, leader, 3)

	wide := createRetrying(t, leader, &pb.CreateEntityRequest{Name: "wide", Properties: &pb.QueueProperties{PartitionCount: 32}})
	table := leader.Service.Table()
	if n := len(table.Groups); n != 8 {
		t.Fatalf("%d groups for 32 partitions on 3 nodes of at most 8 replicas, want 8", n)
	}
	if n := distinctGroups(wide); n != 8 {
		t.Fatalf("32 partitions on %d groups, want 8", n)
	}
	for id, n := range checkGroups(t, table, 8) {
		if n != 8 {
			t.Errorf("node %s holds %d replicas, want 8 (every group)", id, n)
		}
	}

	c.AddNode(t)
	placementtest.Eventually(t, wait, "10 groups once a fourth node joined and replicas moved onto it", func() bool {
		return len(c.Leader(t).Service.Table().Groups) == 10
	})
	// Balancing may move replicas onto the new node meanwhile; the cap
	// holds either way.
	checkGroups(t, c.Leader(t).Service.Table(), 8)
	if got := tableEntity(t, c.Leader(t).Service.Table(), "wide"); !slices.Equal(got.PartitionGroups, wide.PartitionGroups) {
		t.Errorf("wide moved from groups %v to %v", wide.PartitionGroups, got.PartitionGroups)
	}
}

func tableEntity(t *testing.T, table *pb.RoutingTable, name string) *pb.Entity {
	t.Helper()
	for _, e := range table.Entities {
		if e.Name == name {
			return e
		}
	}
	t.Fatalf("%s missing from the routing table", name)
	return nil
}
