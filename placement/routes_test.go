package placement

import (
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/quorumbus/quorumbus/placement/catalog"
	pb "github.com/quorumbus/quorumbus/proto/placementpb"
)

// TestTableEncoderAcrossChanges encodes the routing table after each of a
// series of changes, reusing the sizes the shared entity records cached
// in earlier encodings: every encoding must decode to its table, so a
// record changed in place (a stale cached size) would show here.
func TestTableEncoderAcrossChanges(t *testing.T) {
	fsm := catalog.NewFSM()
	index := uint64(0)
	apply := func(cmd *pb.CatalogCommand) {
		t.Helper()
		index++
		data, err := catalog.Encode(cmd)
		if err != nil {
			t.Fatal(err)
		}
		if res := fsm.ApplyEntry(index, data); res.Err != nil {
			t.Fatalf("%v: %v", cmd, res.Err)
		}
	}
	apply(&pb.CatalogCommand{Op: &pb.CatalogCommand_RegisterNodes{RegisterNodes: &pb.RegisterNodes{Nodes: []*pb.Node{{Id: "n1", Alive: true}}}}})
	apply(&pb.CatalogCommand{Op: &pb.CatalogCommand_CreateGroups{CreateGroups: &pb.CreateGroups{Groups: []*pb.NewGroup{{Replicas: []*pb.Replica{{NodeId: "n1"}}}}}}})
	report := func(quorum bool) {
		apply(&pb.CatalogCommand{Op: &pb.CatalogCommand_ReportGroups{ReportGroups: &pb.ReportGroupsRequest{
			Groups: []*pb.GroupReport{{GroupId: 1, LeaderId: "n1", HasQuorum: quorum}}}}})
	}
	report(true) // the table shares records only while they are not degraded
	var enc tableEncoder
	check := func(step string) {
		t.Helper()
		table := fsm.Table()
		got, err := enc.encode(table)
		if err != nil {
			t.Fatal(err)
		}
		if again, _ := enc.encode(table); again != got {
			t.Fatalf("%s: the same table was encoded twice", step)
		}
		decoded := &pb.RoutingTable{}
		if err := proto.Unmarshal(got.data, decoded); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		if !proto.Equal(decoded, table) {
			t.Fatalf("%s: the encoding decodes to another table", step)
		}
	}
	for i := range 5 {
		apply(&pb.CatalogCommand{Op: &pb.CatalogCommand_CreateEntity{CreateEntity: &pb.CreateEntityCommand{
			Name: fmt.Sprintf("q%d", i), Properties: &pb.QueueProperties{PartitionCount: 1}, PartitionGroups: []uint64{1}}}})
		check(fmt.Sprintf("create q%d", i))
	}
	apply(&pb.CatalogCommand{Op: &pb.CatalogCommand_UpdateEntity{UpdateEntity: &pb.UpdateEntityCommand{
		Name: "q2", Properties: &pb.QueueProperties{UserMetadata: "a much longer description than before", LockDurationMs: 90_000}}}})
	check("update q2")
	report(false)
	check("group without quorum")
	report(true)
	check("group with quorum again")
	apply(&pb.CatalogCommand{Op: &pb.CatalogCommand_DeleteEntity{DeleteEntity: &pb.DeleteEntityCommand{Name: "q0"}}})
	check("delete q0")
}
