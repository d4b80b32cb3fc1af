package store

import (
	"bytes"
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble/v2"
)

// Committing an applied batch in key order.
//
// Pebble inserts a committed batch into its memtable's skiplist entry by
// entry, in the order the batch was written, and each insert searches the
// skiplist from where the previous one left off. An applier writes in the
// order its commands need: a message's body, then its state record, then
// the next message's body; a state record, then a lock index entry. Every
// insert then lands far from the last and searches the skiplist from the
// top. Inserted in key order, each lands next to the last, and the
// memtable inserts are a good part of the store's work under a backlog
// (partition's BenchmarkBacklogCycle; the commit that introduced the sort
// has the measurements).
//
// The order of writes to one key is kept (the sort is stable), so the
// result is the same store. A batch with a range deletion (an entity
// deleted) is committed as written: reordering would move writes across
// the deletion's place in the batch.

// SortedCommit holds what Commit reuses from one Apply to the next.
type SortedCommit struct {
	db        *DB           // out's and unindexed's; a Restore replaces the machine's
	out       *pebble.Batch // what Commit commits
	unindexed *pebble.Batch // lent to the Batch that NewBatch starts
	entries   []batchEntry
	buckets   []bucket
	order     []int
}

// batchEntry is one write of a batch; key and value alias the batch.
type batchEntry struct {
	kind       pebble.InternalKeyKind
	key, value []byte
}

// bucket gathers the entries whose keys share a prefix of bucketPrefix
// bytes (one kind of record of one entity partition), in batch order.
type bucket struct {
	prefix  []byte
	entries []int
}

// bucketPrefix covers the data prefix, entity id, partition and record
// kind (store/doc.go); shorter keys are their own prefix.
const bucketPrefix = 14

// retainedBatchBytes is how much of its buffers a SortedCommit keeps from
// one Apply to the next. Pebble keeps at most 1 MiB of a batch it resets,
// and a topic's fan-out writes several: its batches would grow from
// nothing by doubling, copy after copy, at every Apply. partition's
// maxBatchHint bounds the rest.
const retainedBatchBytes = 16 << 20

// NewBatch starts a batch of db's as the package's NewBatch does, whose
// new messages' state records go into a buffer that s keeps from one
// Apply to the next. One Batch at a time: it is to be committed (or
// closed) before the next is started.
func (s *SortedCommit) NewBatch(db *DB, size int, locked *LockedStates) Batch {
	s.use(db)
	b := NewBatch(db, size, locked)
	b.unindexed, b.borrowed = s.unindexed, true
	return b
}

// use makes s's batches db's.
func (s *SortedCommit) use(db *DB) {
	if s.db == db {
		return
	}
	retain := pebble.WithMaxRetainedSizeBytes(retainedBatchBytes)
	s.db, s.out, s.unindexed = db, db.pb.NewBatch(retain), db.pb.NewBatch(retain)
}

// Commit commits the writes of b, in key order, through a batch of
// its own. The new messages' state records (unindexed) come after the
// indexed batch's writes (the invariant on Batch).
func (s *SortedCommit) Commit(db *DB, b *Batch) error {
	s.entries = s.entries[:0]
	whole, err := s.read(b.pb)
	if err == nil && !whole && b.unindexed != nil {
		whole, err = s.read(b.unindexed)
	}
	if err != nil {
		return err
	}
	if whole {
		// A range deletion: committed as written, unindexed last.
		if err := b.settle(); err != nil {
			return err
		}
		return b.pb.Commit(pebble.NoSync)
	}
	s.sortEntries()
	s.use(db)
	out := s.out
	defer out.Reset()
	for _, i := range s.order {
		e := &s.entries[i]
		var err error
		switch e.kind {
		case pebble.InternalKeyKindSet:
			err = out.Set(e.key, e.value, nil)
		case pebble.InternalKeyKindDelete:
			err = out.Delete(e.key, nil)
		case pebble.InternalKeyKindSingleDelete:
			err = out.SingleDelete(e.key, nil)
		default:
			err = fmt.Errorf("unexpected write of kind %v to %x", e.kind, e.key)
		}
		if err != nil {
			return err
		}
	}
	return out.Commit(pebble.NoSync)
}

// read appends the writes of pb to s.entries; whole is true when pb holds
// a range deletion (the batch is then committed as written).
func (s *SortedCommit) read(pb *pebble.Batch) (whole bool, err error) {
	n := len(s.entries)
	for r := pb.Reader(); ; {
		kind, key, value, ok, err := r.Next()
		if err != nil {
			return false, fmt.Errorf("read batch: %w", err)
		}
		if !ok {
			break
		}
		if kind == pebble.InternalKeyKindRangeDelete {
			return true, nil
		}
		s.entries = append(s.entries, batchEntry{kind, key, value})
	}
	if c := int(pb.Count()); c != len(s.entries)-n {
		return false, fmt.Errorf("read batch: %d entries of %d", len(s.entries)-n, c)
	}
	return false, nil
}

// sortEntries puts into s.order the entries' indexes sorted by key,
// writes to one key in batch order. It buckets by record kind first: an
// applier writes few kinds, and within a kind mostly in ascending order,
// so most buckets need no sort at all.
func (s *SortedCommit) sortEntries() {
	for i := range s.buckets {
		s.buckets[i].entries = s.buckets[i].entries[:0]
	}
	used, last := 0, 0
	for i, e := range s.entries {
		p := e.key[:min(len(e.key), bucketPrefix)]
		// The search looks at the bucket after the last entry's first,
		// then at the last entry's, then at the others: a topic's copies
		// go to its subscriptions in turn (the next bucket), and a drain
		// writes runs of one subscription's records (the same bucket
		// again); a search from the first bucket, or from the next one
		// on, compared most of them for every write. The order changes
		// no bucket.
		j := -1
		for k := range used {
			b := (last + k) % used // k >= 2: the others
			switch k {
			case 0:
				b = (last + 1) % used
			case 1:
				b = last
			}
			if bytes.Equal(s.buckets[b].prefix, p) {
				j = b
				break
			}
		}
		if j < 0 {
			if used == len(s.buckets) {
				s.buckets = append(s.buckets, bucket{})
			}
			s.buckets[used].prefix = append(s.buckets[used].prefix[:0], p...)
			j = used
			used++
		}
		s.buckets[j].entries = append(s.buckets[j].entries, i)
		last = j
	}
	bs := s.buckets[:used]
	slices.SortFunc(bs, func(x, y bucket) int { return bytes.Compare(x.prefix, y.prefix) })
	s.order = s.order[:0]
	for _, b := range bs {
		keyOf := func(i int) []byte { return s.entries[i].key }
		ascending := true
		for k := 1; k < len(b.entries) && ascending; k++ {
			ascending = bytes.Compare(keyOf(b.entries[k-1]), keyOf(b.entries[k])) <= 0
		}
		if !ascending {
			slices.SortStableFunc(b.entries, func(x, y int) int { return bytes.Compare(keyOf(x), keyOf(y)) })
		}
		s.order = append(s.order, b.entries...)
	}
}
