package node

import (
	"testing"

	"github.com/hashicorp/raft"
)

// TestLogCacheBytes: the cache holds the newest entries within its bytes
// and entries, keeps none too large, restarts at a gap, empties on a
// deletion, and every read returns what the store holds.
func TestLogCacheBytes(t *testing.T) {
	store := raft.NewInmemStore()
	c := newLogCache(store, 1000, 8)
	put := func(index uint64, size int) {
		t.Helper()
		if err := c.StoreLogs([]*raft.Log{{Index: index, Term: 1, Data: make([]byte, size)}}); err != nil {
			t.Fatal(err)
		}
	}
	check := func(entries, bytes int) {
		t.Helper()
		if e, b := c.cached(); e != entries || b != bytes {
			t.Fatalf("cached %d entries of %d bytes, want %d of %d", e, b, entries, bytes)
		}
	}
	for i := uint64(1); i <= 5; i++ {
		put(i, 200)
	}
	check(5, 1000)
	put(6, 200) // over the bytes: the oldest goes
	check(5, 1000)
	for i := uint64(7); i <= 16; i++ {
		put(i, 10)
	}
	check(8, 80) // over the entries
	put(17, 251) // over a quarter of the budget: not kept
	check(0, 0)
	put(18, 10)
	put(20, 10) // a gap: starts again
	check(1, 10)
	for i := uint64(1); i <= 20; i++ {
		if i == 19 {
			continue
		}
		var l raft.Log
		if err := c.GetLog(i, &l); err != nil || l.Index != i {
			t.Fatalf("GetLog(%d): %v, index %d", i, err, l.Index)
		}
	}
	if err := c.DeleteRange(20, 20); err != nil {
		t.Fatal(err)
	}
	check(0, 0)
	var l raft.Log
	if err := c.GetLog(20, &l); err != raft.ErrLogNotFound {
		t.Fatalf("GetLog of a deleted entry: %v", err)
	}
}

func TestEntrySizesTrailing(t *testing.T) {
	var s entrySizes
	if k := s.trailing(100, 10); k != 0 {
		t.Fatalf("an empty log keeps %d", k)
	}
	for i := uint64(1); i <= 10; i++ {
		s.add(i, 10*int(i)) // 10, 20, ..., 100
	}
	for _, tt := range []struct {
		bytes int64
		max   uint64
		want  uint64
	}{{100, 10, 1}, {190, 10, 2}, {99, 10, 0}, {10_000, 10, 10}, {10_000, 4, 4}} {
		if k := s.trailing(tt.bytes, tt.max); k != tt.want {
			t.Errorf("trailing(%d, %d) = %d, want %d", tt.bytes, tt.max, k, tt.want)
		}
	}
	s.add(5, 1) // the tail was replaced from 5 on
	if k := s.trailing(10_000, 100); k != 5 {
		t.Fatalf("after a replaced tail: %d", k)
	}
}
