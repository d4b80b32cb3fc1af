package frontend

import "testing"

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
