package catalog

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	pb "github.com/quorumbus/quorumbus/proto/placementpb"
)

// checkIndex checks the name index's invariant: per kind, exactly the
// entities of that kind, in strictly increasing key order, each entry
// naming its entity.
func checkIndex(s *State) error {
	count := map[pb.EntityKind]int{}
	for _, e := range s.entities {
		count[e.Kind]++
	}
	for kind, list := range s.index.byKind {
		if len(list) != count[kind] {
			return fmt.Errorf("index of %v holds %d entries, the catalog %d entities", kind, len(list), count[kind])
		}
		for i, ie := range list {
			e := s.entities[ie.id]
			switch {
			case e == nil:
				return fmt.Errorf("index of %v names entity %d, which does not exist", kind, ie.id)
			case e.Kind != kind || Key(e.Name) != ie.key:
				return fmt.Errorf("index of %v: entry %q/%d is entity %q of kind %v", kind, ie.key, ie.id, e.Name, e.Kind)
			case i > 0 && list[i-1].key >= ie.key:
				return fmt.Errorf("index of %v out of order: %q before %q", kind, list[i-1].key, ie.key)
			}
		}
		delete(count, kind)
	}
	for kind, n := range count {
		return fmt.Errorf("%d entities of %v are not indexed", n, kind)
	}
	if len(s.index.ids) != len(s.entities) {
		return fmt.Errorf("%d ids indexed, %d entities", len(s.index.ids), len(s.entities))
	}
	for i, id := range s.index.ids {
		if s.entities[id] == nil || i > 0 && s.index.ids[i-1] >= id {
			return fmt.Errorf("ids index: %d at %d missing or out of order", id, i)
		}
	}
	return nil
}

func names(es []*pb.Entity) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.Name
	}
	return out
}

// TestEntitiesPaging pages a list at its edges: skip at, past and before
// the end, top larger than what is left, and the case-insensitive order.
func TestEntitiesPaging(t *testing.T) {
	a := newApplier(t, 3)
	for _, n := range []string{"q-c", "Q-A", "q-b", "q-e", "q-D"} {
		a.must(create(n, 0))
	}
	a.must(wrap(&pb.CreateEntityCommand{Name: "t", Kind: pb.EntityKind_ENTITY_KIND_TOPIC,
		Properties: &pb.QueueProperties{}, PartitionGroups: []uint64{1}}))
	all := []string{"Q-A", "q-b", "q-c", "q-D", "q-e"}
	for _, tc := range []struct {
		skip, top int
		want      []string
	}{
		{0, 0, all},
		{0, 2, all[:2]},
		{2, 2, all[2:4]},
		{4, 2, all[4:]},
		{3, 0, all[3:]},
		{5, 0, nil},
		{5, 1, nil},
		{6, 10, nil},
		{0, 5, all},
		{0, 6, all},
		{-1, 0, nil}, // a negative skip asks for nothing (the API's is unsigned)
	} {
		got := names(a.s.Entities(pb.EntityKind_ENTITY_KIND_QUEUE, tc.skip, tc.top))
		if !slices.Equal(got, tc.want) && !(len(got) == 0 && len(tc.want) == 0) {
			t.Errorf("skip=%d top=%d: %v, want %v", tc.skip, tc.top, got, tc.want)
		}
	}
	if got := names(a.s.Entities(pb.EntityKind_ENTITY_KIND_TOPIC, 0, 0)); !slices.Equal(got, []string{"t"}) {
		t.Errorf("topics: %v", got)
	}
	if got := a.s.Entities(pb.EntityKind_ENTITY_KIND_SUBSCRIPTION, 0, 0); len(got) != 0 {
		t.Errorf("subscriptions: %v", names(got))
	}
}

// TestSubscriptionsByTopic lists one topic's subscriptions among topics
// whose names share a start with it ("a" and "a-b", "a/b", "ab"): a
// topic's prefix range holds its own subscriptions only, and deleting a
// topic removes exactly its range.
func TestSubscriptionsByTopic(t *testing.T) {
	a := newApplier(t, 3)
	topics := []string{"a", "A-b", "a/b", "ab", "a.b"}
	for _, topic := range topics {
		a.must(wrap(&pb.CreateEntityCommand{Name: topic, Kind: pb.EntityKind_ENTITY_KIND_TOPIC,
			Properties: &pb.QueueProperties{}, PartitionGroups: []uint64{1}}))
		for _, sub := range []string{"s2", "S1", "s3"} {
			a.must(wrap(&pb.CreateEntityCommand{Name: SubscriptionName(topic, sub), Kind: pb.EntityKind_ENTITY_KIND_SUBSCRIPTION,
				Properties: &pb.QueueProperties{}, PartitionGroups: []uint64{1}}))
		}
	}
	for _, topic := range topics {
		got, ok := a.s.Subscriptions(strings.ToUpper(topic), 0, 0)
		want := []string{topic + "/Subscriptions/S1", topic + "/Subscriptions/s2", topic + "/Subscriptions/s3"}
		if !ok || !slices.Equal(names(got), want) {
			t.Errorf("subscriptions of %q: %v %v, want %v", topic, names(got), ok, want)
		}
		if got, _ := a.s.Subscriptions(topic, 1, 1); !slices.Equal(names(got), want[1:2]) {
			t.Errorf("subscriptions of %q, skip 1 top 1: %v", topic, names(got))
		}
		if got, ok := a.s.Subscriptions(topic, 3, 0); !ok || len(got) != 0 {
			t.Errorf("subscriptions of %q past the end: %v %v", topic, names(got), ok)
		}
	}
	if _, ok := a.s.Subscriptions("nope", 0, 0); ok {
		t.Error("a missing topic lists")
	}
	if _, ok := a.s.Subscriptions("a/Subscriptions/s2", 0, 0); ok {
		t.Error("a subscription lists as a topic")
	}
	a.must(wrap(&pb.DeleteEntityCommand{Name: "a"}))
	if err := checkIndex(a.s); err != nil {
		t.Fatal(err)
	}
	if n := len(a.s.Entities(pb.EntityKind_ENTITY_KIND_SUBSCRIPTION, 0, 0)); n != 12 {
		t.Errorf("%d subscriptions after deleting a topic of 3 among 15, want 12", n)
	}
	if got, ok := a.s.Subscriptions("a-b", 0, 0); !ok || len(got) != 3 {
		t.Errorf("a-b's subscriptions after deleting a: %v %v", names(got), ok)
	}
}

// TestIndexRandomOps applies random creates and deletes and checks the
// index after each against the catalog, and a list against a sort of the
// entities; a snapshot restored has the same index as the catalog that
// wrote it (the index is rebuilt, not stored).
func TestIndexRandomOps(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	a := newApplier(t, 3)
	for i := range 2000 {
		name := fmt.Sprintf("e%03d", rng.IntN(400))
		if rng.IntN(3) == 0 {
			name = strings.ToUpper(name)
		}
		var cmd *pb.CatalogCommand
		switch rng.IntN(3) {
		case 0:
			cmd = wrap(&pb.DeleteEntityCommand{Name: name})
		case 1:
			cmd = wrap(&pb.CreateEntityCommand{Name: name, Kind: pb.EntityKind_ENTITY_KIND_TOPIC,
				Properties: &pb.QueueProperties{}, PartitionGroups: []uint64{1}})
		default:
			cmd = create(name, 0)
		}
		a.apply(cmd) // rejections (taken, missing) are part of the mix
		if rng.IntN(5) == 0 {
			topic := fmt.Sprintf("e%03d", rng.IntN(400))
			a.apply(wrap(&pb.CreateEntityCommand{Name: SubscriptionName(topic, fmt.Sprint(rng.IntN(5))), Kind: pb.EntityKind_ENTITY_KIND_SUBSCRIPTION,
				Properties: &pb.QueueProperties{}, PartitionGroups: []uint64{1}}))
		}
		if err := checkIndex(a.s); err != nil {
			t.Fatalf("after op %d (%v): %v", i, cmd, err)
		}
	}
	for _, kind := range []pb.EntityKind{pb.EntityKind_ENTITY_KIND_QUEUE, pb.EntityKind_ENTITY_KIND_TOPIC, pb.EntityKind_ENTITY_KIND_SUBSCRIPTION} {
		var want []string
		for _, e := range a.s.entities {
			if e.Kind == kind {
				want = append(want, e.Name)
			}
		}
		slices.SortFunc(want, func(x, y string) int { return strings.Compare(Key(x), Key(y)) })
		if got := names(a.s.Entities(kind, 0, 0)); !slices.Equal(got, want) {
			t.Fatalf("%v: listed %v, want %v", kind, got, want)
		}
	}
	restored, err := FromSnapshot(a.s.Snapshot())
	if err != nil {
		t.Fatal(err)
	}
	if err := checkIndex(restored); err != nil {
		t.Fatal(err)
	}
	for kind, list := range a.s.index.byKind {
		if !slices.Equal(list, restored.index.byKind[kind]) {
			t.Fatalf("%v: the restored index differs", kind)
		}
	}
	if !slices.Equal(a.s.index.ids, restored.index.ids) {
		t.Fatal("the restored ids differ")
	}
	var ids []uint64
	for _, e := range a.s.Table().Entities {
		ids = append(ids, e.Id)
	}
	if !slices.IsSorted(ids) || len(ids) != a.s.Len() {
		t.Fatalf("the routing table lists %d entities, not by id: %v", len(ids), ids)
	}
}

// BenchmarkEntitiesPage reads a page of 100 queues out of 10,000, as the
// admin API's default page does.
func BenchmarkEntitiesPage(b *testing.B) {
	a := newApplier(b, 3)
	for i := range 10_000 {
		a.must(create(fmt.Sprintf("bench-%05d", i), 0))
	}
	b.ResetTimer()
	for i := range b.N {
		if got := a.s.Entities(pb.EntityKind_ENTITY_KIND_QUEUE, (i%100)*100, 100); len(got) != 100 {
			b.Fatalf("%d entities", len(got))
		}
	}
}
