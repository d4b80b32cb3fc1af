package catalog

import (
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"

	pb "github.com/quorumbus/quorumbus/proto/placementpb"
)

// TestSessionAcceptWait: the accept-next wait of an entity is kept as
// given within its bounds, refused outside them and on topics, and kept
// by an update that leaves it unset (the admin API's, which cannot
// carry it) while one that sets it changes it.
func TestSessionAcceptWait(t *testing.T) {
	a := newApplier(t, 1)
	groups := []uint64{1}
	wait := func(name string) *int64 { return a.s.byName(name).Properties.SessionAcceptWaitMs }

	a.must(wrap(&pb.CreateEntityCommand{Name: "q", PartitionGroups: groups,
		Properties: &pb.QueueProperties{RequiresSession: true, SessionAcceptWaitMs: proto.Int64(2_000)}}))
	if w := wait("q"); w == nil || *w != 2_000 {
		t.Fatalf("created with 2,000 ms: %v", w)
	}
	a.must(wrap(&pb.UpdateEntityCommand{Name: "q", Properties: &pb.QueueProperties{UserMetadata: "from the admin API"}}))
	if w := wait("q"); w == nil || *w != 2_000 {
		t.Fatalf("after an update without it: %v, want 2,000 ms kept", w)
	}
	a.must(wrap(&pb.UpdateEntityCommand{Name: "q", Properties: &pb.QueueProperties{SessionAcceptWaitMs: proto.Int64(500)}}))
	if w := wait("q"); w == nil || *w != 500 {
		t.Fatalf("after an update to 500 ms: %v", w)
	}

	for _, ms := range []int64{0, 99, 60_001, -1} {
		res := a.apply(wrap(&pb.CreateEntityCommand{Name: "bad", PartitionGroups: groups,
			Properties: &pb.QueueProperties{SessionAcceptWaitMs: proto.Int64(ms)}}))
		if !errors.Is(res.Err, ErrInvalidProperties) {
			t.Errorf("%d ms: %v, want %v", ms, res.Err, ErrInvalidProperties)
		}
	}
	res := a.apply(wrap(&pb.CreateEntityCommand{Name: "t", Kind: pb.EntityKind_ENTITY_KIND_TOPIC, PartitionGroups: groups,
		Properties: &pb.QueueProperties{SessionAcceptWaitMs: proto.Int64(1_000)}}))
	if !errors.Is(res.Err, ErrInvalidProperties) {
		t.Errorf("a topic with an accept wait: %v, want %v", res.Err, ErrInvalidProperties)
	}
	a.must(wrap(&pb.CreateEntityCommand{Name: "t", Kind: pb.EntityKind_ENTITY_KIND_TOPIC, PartitionGroups: groups}))
	a.must(wrap(&pb.CreateEntityCommand{Name: "t/Subscriptions/s", Kind: pb.EntityKind_ENTITY_KIND_SUBSCRIPTION, PartitionGroups: groups,
		Properties: &pb.QueueProperties{RequiresSession: true, SessionAcceptWaitMs: proto.Int64(60_000)}}))
}
