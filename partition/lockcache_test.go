package partition

import (
	"testing"

	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// TestLockedStatesShareNumbers: two records of one sequence number (two
// entities, or a queue and its dead-letter queue) share an entry. The later
// write takes it; the other then misses, and nothing a write of one does
// removes the other's record.
func TestLockedStatesShareNumbers(t *testing.T) {
	c := newLockedStates()
	a := appendSeqKey(nil, ekey{1, 0}, kindMessage, partitionpb.SubQueue_SUB_QUEUE_MAIN, 7)
	b := appendSeqKey(nil, ekey{2, 0}, kindMessage, partitionpb.SubQueue_SUB_QUEUE_MAIN, 7)
	d := appendSeqKey(nil, ekey{1, 0}, kindMessage, partitionpb.SubQueue_SUB_QUEUE_DEAD_LETTER, 7)
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
	want(a, "")
	want(b, "b1")
	c.wrote(a, []byte("a2"), false) // a unlocked: b's record stays
	c.deleted(d)
	want(b, "b1")
	c.wrote(d, []byte("d1"), true)
	want(d, "d1")
	want(b, "")
	c.deleted(d)
	want(d, "")
	c.wrote(a, []byte("a3"), true)
	c.wrote(a, []byte("a4"), true)
	want(a, "a4")
	c.wrote([]byte("short"), []byte("x"), true) // not a state key: not kept
	want([]byte("short"), "")
}
