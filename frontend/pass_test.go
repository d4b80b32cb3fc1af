package frontend

import (
	"slices"
	"testing"

	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// TestPassRotation: a lone receiver starts each pass one partition
// further, as when every receiver rotated on its own; concurrent
// receivers of an entity start theirs at one partition, which moves on
// once one of them begins another pass; a receiver that ended holds
// nothing back.
func TestPassRotation(t *testing.T) {
	const n = 16
	var lone passRotation
	a := &receiver{}
	for want := range uint32(2 * n) {
		if got := lone.next(a, n); got != want%n {
			t.Fatalf("a lone receiver's pass %d started at %d, want %d", want, got, want%n)
		}
	}

	var p passRotation
	rs := []*receiver{{}, {}, {}, {}}
	for round := range uint32(3) {
		for i, r := range rs {
			if got := p.next(r, n); got != round {
				t.Fatalf("round %d: receiver %d started at %d, want %d", round, i, got, round)
			}
		}
	}
	// Two come back before the others: the start moves on once.
	if got, again := p.next(rs[0], n), p.next(rs[1], n); got != 3 || again != 3 {
		t.Fatalf("the first two of round 3 started at %d and %d, want 3", got, again)
	}
	p.leave(rs[0])
	if got := p.next(rs[0], n); got != 3 {
		t.Fatalf("a receiver that left and came back started at %d, want 3 (it began no pass there since)", got)
	}
}

// TestPartitionOrderKeepsGroupsTogether: passes go round the partitions
// of one group one after another, the groups in the order of their first
// partition; without the groups (or with a count that does not match)
// in partition order.
func TestPartitionOrderKeepsGroupsTogether(t *testing.T) {
	r := &receiver{entity: &placementpb.Entity{PartitionGroups: []uint64{7, 8, 9, 7, 8, 9, 7, 8}}}
	want := []uint32{0, 3, 6, 1, 4, 7, 2, 5}
	if got := r.partitionOrder(8); !slices.Equal(got, want) {
		t.Fatalf("order over groups %v: %v, want %v", r.entity.PartitionGroups, got, want)
	}
	plain := &receiver{entity: &placementpb.Entity{}}
	if got := plain.partitionOrder(4); !slices.Equal(got, []uint32{0, 1, 2, 3}) {
		t.Fatalf("order without groups: %v", got)
	}
}
