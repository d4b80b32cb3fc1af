package catalog

import (
	"errors"
	"strings"
	"testing"

	pb "github.com/quorumbus/quorumbus/proto/placementpb"
)

func forwarding(name, to, dlqTo string) *pb.CatalogCommand {
	return wrap(&pb.CreateEntityCommand{Name: name, Properties: &pb.QueueProperties{ForwardTo: to, ForwardDeadLetteredMessagesTo: dlqTo},
		PartitionGroups: []uint64{1}})
}

// TestForwardTargets: loops through ForwardTo and
// ForwardDeadLetteredMessagesTo are refused at creation and update, as
// are destinations that cannot take forwarded messages; the partitions'
// configs carry the targets.
func TestForwardTargets(t *testing.T) {
	a := newApplier(t, 1)
	a.must(forwarding("a", "b", ""))   // b does not exist yet: accepted
	a.must(forwarding("b", "c", ""))   // a -> b -> c
	a.must(forwarding("c", "", "dlq")) // c's dead letters -> dlq
	a.must(forwarding("dlq", "", ""))
	refused := func(cmd *pb.CatalogCommand, want string) {
		t.Helper()
		res := a.apply(cmd)
		if !errors.Is(res.Err, ErrInvalidProperties) || !strings.Contains(res.Err.Error(), want) {
			t.Fatalf("got %v, want invalid properties with %q", res.Err, want)
		}
	}
	refused(wrap(&pb.UpdateEntityCommand{Name: "dlq", Properties: &pb.QueueProperties{ForwardTo: "A"}}),
		"forwarding loop dlq -> A -> b -> c -> dlq")
	refused(wrap(&pb.UpdateEntityCommand{Name: "c", Properties: &pb.QueueProperties{ForwardDeadLetteredMessagesTo: "a"}}),
		"forwarding loop c -> a -> b -> c")
	refused(forwarding("x", "x2", "x"), "forwards to itself")

	a.must(wrap(&pb.CreateEntityCommand{Name: "t", Kind: pb.EntityKind_ENTITY_KIND_TOPIC, PartitionGroups: []uint64{1}}))
	a.must(wrap(&pb.CreateEntityCommand{Name: "t/Subscriptions/s", Kind: pb.EntityKind_ENTITY_KIND_SUBSCRIPTION, PartitionGroups: []uint64{1}}))
	a.must(forwarding("y", "t", "")) // a queue forwards to a topic
	refused(forwarding("y2", "", "t/Subscriptions/s"), "a subscription")
	a.must(wrap(&pb.CreateEntityCommand{Name: "z", Properties: &pb.QueueProperties{ForwardTo: "a", RequiresSession: true},
		PartitionGroups: []uint64{1}})) // a session entity forwards too
	// A subscription forwards to a queue, and to its own topic through it
	// only as a loop: a topic leads to each of its subscriptions.
	a.must(wrap(&pb.UpdateEntityCommand{Name: "t/Subscriptions/s", Properties: &pb.QueueProperties{ForwardTo: "dlq"}}))
	refused(wrap(&pb.UpdateEntityCommand{Name: "dlq", Properties: &pb.QueueProperties{ForwardTo: "t"}}),
		"forwarding loop dlq -> t -> t/Subscriptions/s -> dlq")
	refused(wrap(&pb.CreateEntityCommand{Name: "t/Subscriptions/s2", Kind: pb.EntityKind_ENTITY_KIND_SUBSCRIPTION, PartitionGroups: []uint64{1},
		Properties: &pb.QueueProperties{ForwardTo: "y"}}), "forwarding loop t/Subscriptions/s2 -> y -> t -> t/Subscriptions/s2")
	refused(wrap(&pb.CreateEntityCommand{Name: "t/Subscriptions/s3", Kind: pb.EntityKind_ENTITY_KIND_SUBSCRIPTION, PartitionGroups: []uint64{1},
		Properties: &pb.QueueProperties{ForwardTo: "t"}}), "its own topic")
	// A subscription of one topic forwards to another topic.
	a.must(wrap(&pb.CreateEntityCommand{Name: "t2", Kind: pb.EntityKind_ENTITY_KIND_TOPIC, PartitionGroups: []uint64{1}}))
	a.must(wrap(&pb.CreateEntityCommand{Name: "t/Subscriptions/s4", Kind: pb.EntityKind_ENTITY_KIND_SUBSCRIPTION, PartitionGroups: []uint64{1},
		Properties: &pb.QueueProperties{ForwardTo: "t2"}}))

	c := a.s.byName("c")
	if cfg := PartitionConfig(c, 0); cfg.ForwardTo != "" || cfg.ForwardDeadLetteredMessagesTo != "dlq" {
		t.Fatalf("partition config of c forwards to %q and %q", cfg.ForwardTo, cfg.ForwardDeadLetteredMessagesTo)
	}
}
