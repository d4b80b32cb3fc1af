package catalog

import (
	"testing"

	"google.golang.org/protobuf/proto"

	pb "github.com/quorumbus/quorumbus/proto/placementpb"
)

// FuzzApply decodes arbitrary entries and applies what decodes to a
// populated catalog. Nothing may panic; a rejected or refused command
// leaves the catalog exactly as it was; an accepted one leaves a catalog
// whose snapshot still rebuilds (ids, names and groups hold together), and
// in either case the change of the routing table since the command turns
// the table before it into the table after it.
func FuzzApply(f *testing.F) {
	for _, cmd := range []*pb.CatalogCommand{
		create("q", 0),
		create("p", 4),
		wrap(&pb.UpdateEntityCommand{Name: "A", Properties: &pb.QueueProperties{LockDurationMs: 5000}}),
		wrap(&pb.DeleteEntityCommand{Name: "a"}),
		wrap(&pb.CreateGroups{ExpectedGroups: 3, Groups: []*pb.NewGroup{{Replicas: []*pb.Replica{{NodeId: "n1"}}}}}),
		wrap(&pb.RegisterNodes{Nodes: []*pb.Node{{Id: "n9", Alive: true}}}),
		wrap(&pb.ReportGroupsRequest{Groups: []*pb.GroupReport{{GroupId: 1, LeaderId: "n2"}}}),
		wrap(&pb.CompleteTasks{Tasks: []*pb.PartitionTask{{EntityId: 1, Partition: 1, Version: 3}}}),
		wrap(&pb.AddRuleCommand{Subscription: "t/Subscriptions/s", Rule: &pb.Rule{Name: "r",
			Filter: &pb.Rule_SqlFilter{SqlFilter: &pb.SqlFilter{Expression: "color = 'red' AND n > 1"}},
			Action: &pb.SqlRuleAction{Expression: "SET sys.Label = 'x'"}}}),
		wrap(&pb.AddRuleCommand{Subscription: "t/Subscriptions/s", Rule: &pb.Rule{Name: "c",
			Filter: &pb.Rule_CorrelationFilter{CorrelationFilter: &pb.CorrelationFilter{Subject: "s"}}}}),
		wrap(&pb.RemoveRuleCommand{Subscription: "t/Subscriptions/s", RuleName: "$Default"}),
		wrap(&pb.ReplaceRuleCommand{Subscription: "t/Subscriptions/s", Rule: &pb.Rule{Name: "R",
			Filter: &pb.Rule_SqlFilter{SqlFilter: &pb.SqlFilter{Expression: "color = 'blue'"}}}}),
		wrap(&pb.DeleteEntityCommand{Name: "t"}),
		wrap(&pb.CreateEntityCommand{Name: "t/Subscriptions/s2", Kind: pb.EntityKind_ENTITY_KIND_SUBSCRIPTION,
			Properties: &pb.QueueProperties{PartitionCount: 2}, PartitionGroups: []uint64{1, 2},
			Rules: []*pb.Rule{{Name: "x", Filter: &pb.Rule_FalseFilter{FalseFilter: true}}}}),
		putRule("r", "", 7, false),
		putRule("r", "a", 1, true),
		deleteRule("r", "b"),
	} {
		data, err := Encode(cmd)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte{})
	f.Add([]byte{2})
	f.Fuzz(func(t *testing.T, data []byte) {
		a := newApplier(t, 3)
		a.must(create("a", 3))
		a.must(create("b", 0))
		a.must(wrap(&pb.CreateEntityCommand{Name: "t", Kind: pb.EntityKind_ENTITY_KIND_TOPIC,
			Properties: &pb.QueueProperties{PartitionCount: 2}, PartitionGroups: []uint64{1, 2}}))
		a.must(wrap(&pb.CreateEntityCommand{Name: "t/Subscriptions/s", Kind: pb.EntityKind_ENTITY_KIND_SUBSCRIPTION,
			Properties: &pb.QueueProperties{PartitionCount: 2}, PartitionGroups: []uint64{1, 2}}))
		a.must(putRule("r", "b", 2, true))
		before := a.s.Snapshot()
		tableBefore := a.s.Table()
		cmd, err := Decode(data)
		if err != nil {
			return
		}
		res, err := a.s.Apply(a.index+1, cmd)
		if err := checkIndex(a.s); err != nil {
			t.Fatalf("after %v: %v", cmd, err)
		}
		change, ok := a.s.ChangesSince(tableBefore.Version)
		if !ok {
			t.Fatalf("after %v: no change since version %d", cmd, tableBefore.Version)
		}
		if got, want := follow(t, tableBefore, change), a.s.Table(); !proto.Equal(got, want) {
			t.Fatalf("after %v: the change makes\n%v\nnot\n%v", cmd, got, want)
		}
		after := a.s.Snapshot()
		if err != nil || res.Err != nil {
			after.AppliedIndex = before.AppliedIndex
			if !proto.Equal(before, after) {
				t.Fatalf("a refused command (%v, %v) changed the catalog", err, res.Err)
			}
			return
		}
		if _, err := FromSnapshot(after); err != nil {
			t.Fatalf("accepted %v, and the catalog no longer holds together: %v", cmd, err)
		}
	})
}
