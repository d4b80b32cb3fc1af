package store

import (
	"testing"

	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// TestLockedStatesKeepEntitiesApart: records of one sequence number in
// several entities or sub-queues (a topic's subscriptions number the
// copies of a message alike) are all kept, and a write of one leaves the
// others' records alone.
func TestLockedStatesKeepEntitiesApart(t *testing.T) {
	c := NewLockedStates()
	a := AppendSeqKey(nil, EntityKey{ID: 1, Part: 0}, KindMessage, partitionpb.SubQueue_SUB_QUEUE_MAIN, 7)
	b := AppendSeqKey(nil, EntityKey{ID: 2, Part: 0}, KindMessage, partitionpb.SubQueue_SUB_QUEUE_MAIN, 7)
	d := AppendSeqKey(nil, EntityKey{ID: 1, Part: 0}, KindMessage, partitionpb.SubQueue_SUB_QUEUE_DEAD_LETTER, 7)
	want := func(key []byte, p string) {
		t.Helper()
		got, ok := c.get(key)
		if p == "" && ok || p != "" && string(got) != p {
			t.Fatalf("get(%x) = %q, %v; want %q", key, got, ok, p)
		}
	}
	c.wrote(a, []byte("a1"), true)
	want(a, "a1")
	want(b, "")
	c.wrote(b, []byte("b1"), true)
	want(a, "a1")
	want(b, "b1")
	c.wrote(a, []byte("a2"), false) // a unlocked: b's record stays
	c.deleted(d)
	want(a, "")
	want(b, "b1")
	c.wrote(d, []byte("d1"), true)
	want(d, "d1")
	want(b, "b1")
	c.deleted(d)
	want(d, "")
	c.wrote(a, []byte("a3"), true)
	c.wrote(a, []byte("a4"), true)
	want(a, "a4")
	c.wrote([]byte("short"), []byte("x"), true) // not a state key: not kept
	want([]byte("short"), "")

	// Ten subscriptions' runs of the same numbers, locked at once, as a
	// drain of a topic's ten subscriptions holds them: all kept.
	const subs, run = 10, 1600
	key := func(sub, seq uint64) []byte {
		return AppendSeqKey(nil, EntityKey{ID: 100 + sub, Part: 0}, KindMessage, partitionpb.SubQueue_SUB_QUEUE_MAIN, seq)
	}
	c = NewLockedStates()
	for seq := uint64(1); seq <= run; seq++ {
		for sub := range uint64(subs) {
			c.wrote(key(sub, seq), []byte{byte(sub)}, true)
		}
	}
	missed := 0
	for seq := uint64(1); seq <= run; seq++ {
		for sub := range uint64(subs) {
			if got, ok := c.get(key(sub, seq)); !ok || got[0] != byte(sub) {
				missed++
			}
		}
	}
	if missed > 0 {
		t.Fatalf("%d of %d locked copies not kept in %d slots", missed, subs*run, len(c.slots))
	}
}

// TestLockedStatesGrowAndEvict: the table doubles rather than displace a
// live record until it holds maxLockedStates; past that a record takes its
// slot from the one there, which then misses. Records moved by a doubling
// are still found, and forgotten ones are not.
func TestLockedStatesGrowAndEvict(t *testing.T) {
	c := NewLockedStates()
	key := func(seq uint64) []byte {
		return AppendSeqKey(nil, EntityKey{ID: 1, Part: 0}, KindMessage, partitionpb.SubQueue_SUB_QUEUE_MAIN, seq)
	}
	rec := func(seq uint64) []byte { return []byte{byte(seq), byte(seq >> 8), byte(seq >> 16)} }
	check := func(seq uint64, want bool) {
		t.Helper()
		got, ok := c.get(key(seq))
		if ok != want || ok && string(got) != string(rec(seq)) {
			t.Fatalf("get(%d) = %x, %v; want kept %v", seq, got, ok, want)
		}
	}
	const start = 1 << 40 // numbers carry the partition in their top bits
	for seq := uint64(start); seq < start+maxLockedStates; seq++ {
		c.wrote(key(seq), rec(seq), true)
	}
	if len(c.slots) != maxLockedStates {
		t.Fatalf("%d slots, want %d", len(c.slots), maxLockedStates)
	}
	for seq := uint64(start); seq < start+maxLockedStates; seq += 997 {
		check(seq, true)
	}
	c.wrote(key(start+3), nil, false) // unlocked: forgotten
	check(start+3, false)
	c.deleted(key(start + 4))
	check(start+4, false)
	check(start+5, true)
	c.wrote(key(start+maxLockedStates+5), rec(start+maxLockedStates+5), true)
	check(start+maxLockedStates+5, true)
	check(start+5, false) // its slot was taken
	check(start+6, true)
	c.Reset()
	check(start+6, false)
}
