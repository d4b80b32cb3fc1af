package store

import (
	"bytes"
	"fmt"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// TestBatchMessageLifecycle drives one message through the store's API as
// partition's applier does (add, index, lock the fast way, expire the
// lock, remove), committing through SortedCommit, and checks what a reader
// sees after each commit: the records, the available index, the lock
// grants and the cache of locked states agree.
func TestBatchMessageLifecycle(t *testing.T) {
	pb, err := pebble.Open("", &pebble.Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	db := &DB{pb: pb}
	defer db.Close()
	if err := CheckFormat(db); err != nil {
		t.Fatal(err)
	}
	k := EntityKey{ID: 7, Part: 1}
	main := partitionpb.SubQueue_SUB_QUEUE_MAIN
	locks := NewLockIndex(k)
	cache := NewLockedStates()
	var commit SortedCommit
	apply := func(applied uint64, f func(b *Batch)) {
		t.Helper()
		b := NewBatch(db, 0, cache)
		defer b.Close()
		f(&b)
		if err := b.FlushGrants(); err != nil {
			t.Fatal(err)
		}
		if err := b.PutApplied(applied); err != nil {
			t.Fatal(err)
		}
		if err := commit.Commit(db, &b); err != nil {
			t.Fatal(err)
		}
		if got, err := ReadApplied(db); err != nil || got != applied {
			t.Fatalf("applied %d, %v; want %d", got, err, applied)
		}
	}
	check := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	available := func() []uint64 {
		t.Helper()
		scan, err := ScanAvailable(db, k, main, 0)
		check(err)
		var seqs []uint64
		for {
			seq, ok, err := scan.Next()
			check(err)
			if !ok {
				break
			}
			seqs = append(seqs, seq)
		}
		check(scan.Close(nil))
		return seqs
	}

	m := &partitionpb.StoredMessage{SequenceNumber: 5, SubQueue: main, MessageId: "m5", Bare: []byte("body five")}
	apply(1, func(b *Batch) {
		check(b.PutBody(k, m))
		check(b.PutNewState(k, m))
		check(b.SetAvailable(k, main, 5, true))
	})
	if got := available(); !slices.Equal(got, []uint64{5}) {
		t.Fatalf("available %v after the add, want [5]", got)
	}
	st, err := ReadState(db, k, main, 5)
	check(err)
	if st == nil || st.MessageId != "m5" || len(st.Bare) != 0 {
		t.Fatalf("state %v: want m5 without its sections", st)
	}

	// Lock it the fast way: the record with the lock put in, byte for byte
	// the record PutState writes for the locked message.
	token, until := bytes.Repeat([]byte{9}, 16), int64(1000)
	apply(2, func(b *Batch) {
		c, err := b.Cursor(k, main, 5, true)
		check(err)
		p, err := c.Record(5)
		check(err)
		s, _, err := StateSlot(p)
		check(err)
		v, ok := b.LockedRecord(p, token, until)
		if !ok {
			t.Fatalf("LockedRecord refused the record of an available message")
		}
		check(b.SetAvailable(k, main, 5, false))
		locked := s
		locked.Locked, locked.Until = true, until
		check(b.PutLocked(k, locked, v))
		check(b.MarkLock(&locks, k, locked, true))
		body := &partitionpb.StoredMessage{SequenceNumber: 5}
		check(c.Body(body))
		if string(body.Bare) != "body five" {
			t.Fatalf("body %q", body.Bare)
		}
		check(c.Close(nil))
	})
	if got := available(); len(got) != 0 {
		t.Fatalf("available %v after the lock, want none", got)
	}
	want := &partitionpb.StoredMessage{SequenceNumber: 5, SubQueue: main, MessageId: "m5", LockToken: token, LockedUntilMs: until}
	reader := NewBatch(db, 0, cache)
	key := MessageKey(k, main, 5)
	cached, ok := reader.CachedLocked(k, main, 5)
	if !ok {
		t.Fatalf("the cache of locked states does not hold %x", key)
	}
	cached = bytes.Clone(cached)
	check(reader.Close())
	stored, found, err := Get(db, key)
	check(err)
	scratch := pb.NewBatch()
	encoded, err := SetRecord(scratch, key, want, false)
	check(err)
	if !found || !bytes.Equal(cached, stored) || !bytes.Equal(stored, encoded) {
		t.Fatalf("fast lock cached %x and stored %x, PutState writes %x", cached, stored, encoded)
	}
	check(scratch.Close())

	// The grant holds the lock; DueLocks hands it out once it is due.
	check(locks.Load(db))
	if at, ok := locks.Min(); !ok || at != until {
		t.Fatalf("earliest lock %d (%v), want %d", at, ok, until)
	}
	apply(3, func(b *Batch) {
		var due []uint64
		check(b.DueLocks(&locks, until-1, func(int64, partitionpb.SubQueue, uint64) (bool, error) {
			t.Fatalf("a lock due before its time")
			return false, nil
		}))
		check(b.DueLocks(&locks, until, func(at int64, sub partitionpb.SubQueue, seq uint64) (bool, error) {
			due = append(due, seq)
			return true, nil
		}))
		if !slices.Equal(due, []uint64{5}) {
			t.Fatalf("due locks %v, want [5]", due)
		}
		// The rule ends it: the message is available again.
		locked := SlotOf(want)
		check(b.MarkLock(&locks, k, locked, false))
		check(b.PutState(k, m))
		check(b.SetAvailable(k, main, 5, true))
	})
	check(locks.Load(db))
	if _, ok := locks.Min(); ok {
		t.Fatalf("a lock grant is left after the lock ended")
	}
	if got := available(); !slices.Equal(got, []uint64{5}) {
		t.Fatalf("available %v after the lock ended, want [5]", got)
	}

	// Removed: no record, no entry, nothing cached.
	apply(4, func(b *Batch) {
		check(b.SetAvailable(k, main, 5, false))
		check(b.DeleteState(k, SlotOf(m)))
		check(b.DeleteBody(k, main, 5))
		if _, ok := b.CachedLocked(k, main, 5); ok {
			t.Fatalf("the cache holds a deleted record")
		}
	})
	if st, err := ReadState(db, k, main, 5); err != nil || st != nil {
		t.Fatalf("state %v (%v) after the remove", st, err)
	}
	if got := available(); len(got) != 0 {
		t.Fatalf("available %v after the remove", got)
	}
}

// TestBatchNewStateRecords holds the invariant on Batch's fresh records:
// a new message's state record, written unindexed, is what every read of
// the batch sees, what a later rewrite or delete in the same batch
// replaces, and what the commit stores, also when the batch holds a range
// deletion; with a buffer of its own or a SortedCommit's, reused.
func TestBatchNewStateRecords(t *testing.T) {
	t.Run("own", func(t *testing.T) { testNewStateRecords(t, false) })
	t.Run("commit's", func(t *testing.T) { testNewStateRecords(t, true) })
}

func testNewStateRecords(t *testing.T, borrowed bool) {
	pb, err := pebble.Open("", &pebble.Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	db := &DB{pb: pb}
	defer db.Close()
	check := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	check(CheckFormat(db))
	main := partitionpb.SubQueue_SUB_QUEUE_MAIN
	a, gone := EntityKey{ID: 7, Part: 1}, EntityKey{ID: 8, Part: 0}
	msg := func(seq uint64, id string) *partitionpb.StoredMessage {
		return &partitionpb.StoredMessage{SequenceNumber: seq, SubQueue: main, MessageId: id}
	}
	var commit SortedCommit
	var applied uint64
	apply := func(f func(b *Batch)) {
		t.Helper()
		b := NewBatch(db, 0, NewLockedStates())
		defer b.Close()
		f(&b)
		applied++
		check(b.PutApplied(applied))
		check(commit.Commit(db, &b))
	}
	stored := func(k EntityKey, seq uint64) string {
		t.Helper()
		st, err := ReadState(db, k, main, seq)
		check(err)
		if st == nil {
			return "none"
		}
		return st.MessageId
	}

	apply(func(b *Batch) {
		for seq := uint64(1); seq <= 4; seq++ {
			check(b.PutNewState(a, msg(seq, fmt.Sprint("m", seq))))
		}
		// Read in the batch: by key and in order.
		st, err := b.State(a, main, 2)
		check(err)
		if st == nil || st.MessageId != "m2" {
			t.Fatalf("the batch reads %v for a new record, want m2", st)
		}
		check(b.PutNewState(a, msg(5, "m5")))
		c, err := b.Cursor(a, main, 1, false)
		check(err)
		var seen []uint64
		for ok := c.SeekState(1); ok; ok = c.Next() {
			p, err := c.State()
			check(err)
			s, _, err := StateSlot(p)
			check(err)
			seen = append(seen, s.Seq)
		}
		check(c.Close(nil))
		if !slices.Equal(seen, []uint64{1, 2, 3, 4, 5}) {
			t.Fatalf("a cursor in the batch reads %v, want 1..5", seen)
		}
		// Rewritten and deleted after being written new: the later write wins.
		check(b.PutNewState(a, msg(6, "m6")))
		check(b.PutState(a, msg(6, "m6 again")))
		check(b.PutNewState(a, msg(7, "m7")))
		check(b.DeleteState(a, SlotOf(msg(7, "m7"))))
		check(b.PutNewState(a, msg(8, "m8")))
	})
	for seq, want := range map[uint64]string{1: "m1", 2: "m2", 5: "m5", 6: "m6 again", 7: "none", 8: "m8"} {
		if got := stored(a, seq); got != want {
			t.Fatalf("message %d stored as %s, want %s", seq, got, want)
		}
	}

	// A range deletion commits the batch as written, new records last.
	apply(func(b *Batch) { check(b.PutNewState(gone, msg(1, "doomed"))) })
	apply(func(b *Batch) {
		check(b.PutNewState(gone, msg(2, "doomed too")))
		check(b.PutNewState(a, msg(9, "before")))
		check(b.DeleteEntityData(gone, false))
		check(b.PutNewState(gone, msg(1, "reborn")))
		check(b.PutNewState(a, msg(10, "after")))
	})
	for _, c := range []struct {
		k    EntityKey
		seq  uint64
		want string
	}{{gone, 1, "reborn"}, {gone, 2, "none"}, {a, 9, "before"}, {a, 10, "after"}} {
		if got := stored(c.k, c.seq); got != c.want {
			t.Fatalf("%v message %d stored as %s, want %s", c.k, c.seq, got, c.want)
		}
	}
	if got, err := ReadApplied(db); err != nil || got != applied {
		t.Fatalf("applied %d (%v), want %d", got, err, applied)
	}
}
