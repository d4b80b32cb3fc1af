package store

import (
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// TestMarkLockFindsStoredGrant: a lock index that does not know its
// grants' latest end yet (a machine just opened, or restored) still finds a
// stored grant of the same end and bucket and adds to it, and one that
// knows it skips the read only for ends later than every grant's: each
// lock marked, before or after, is in the grants.
func TestMarkLockFindsStoredGrant(t *testing.T) {
	pb, err := pebble.Open("", &pebble.Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	db := &DB{pb: pb}
	defer db.Close()
	k := EntityKey{ID: 7, Part: 1}
	main := partitionpb.SubQueue_SUB_QUEUE_MAIN
	var commit SortedCommit
	mark := func(x *LockIndex, until int64, seqs ...uint64) {
		t.Helper()
		b := NewBatch(db, 0, NewLockedStates())
		defer b.Close()
		for _, seq := range seqs {
			if err := b.MarkLock(x, k, Slot{Sub: main, Seq: seq, Until: until, Locked: true}, true); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.FlushGrants(); err != nil {
			t.Fatal(err)
		}
		if err := commit.Commit(db, &b); err != nil {
			t.Fatal(err)
		}
	}
	locked := func() map[int64][]uint64 {
		t.Helper()
		x := NewLockIndex(k)
		if err := x.Load(db); err != nil {
			t.Fatal(err)
		}
		b := NewBatch(db, 0, NewLockedStates())
		defer b.Close()
		got := map[int64][]uint64{}
		err := b.DueLocks(&x, 1<<40, func(until int64, _ partitionpb.SubQueue, seq uint64) (bool, error) {
			got[until] = append(got[until], seq)
			return true, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}

	first := NewLockIndex(k)
	mark(&first, 2000, 3)
	mark(&first, 3000, 4) // later than every grant: not read
	reopened := NewLockIndex(k)
	mark(&reopened, 3000, 5) // the grant of 3000 is stored: read and added to
	mark(&reopened, 2000, 6) // earlier than the latest: read
	mark(&first, 3000, 7)    // first knows 3000 is stored
	mark(&reopened, 4000, 8)
	want := map[int64][]uint64{2000: {3, 6}, 3000: {4, 5, 7}, 4000: {8}}
	got := locked()
	for until, seqs := range want {
		if !slices.Equal(got[until], seqs) {
			t.Errorf("locks until %d: %v, want %v", until, got[until], seqs)
		}
	}
	if len(got) != len(want) {
		t.Errorf("locks %v, want %v", got, want)
	}
}
