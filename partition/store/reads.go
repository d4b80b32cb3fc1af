package store

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble/v2"

	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// Reads outside an Apply (partition's Machine reads a consistent view of
// its db under its read lock) and the store-wide rewrite before a
// snapshot.

// ReadState reads the state record of message seq of sub-queue sub of
// entity partition k in r; nil if there is none.
func ReadState(r pebble.Reader, k EntityKey, sub partitionpb.SubQueue, seq uint64) (*partitionpb.StoredMessage, error) {
	return GetState(r, MessageKey(k, sub, seq))
}

// DecodeMessageState decodes p, the state record of message seq of
// sub-queue sub of entity partition k.
func DecodeMessageState(k EntityKey, sub partitionpb.SubQueue, seq uint64, p []byte) (*partitionpb.StoredMessage, error) {
	return DecodeState(MessageKey(k, sub, seq), p)
}

// First moves the state iterator to the first message from the cursor's
// start on.
func (c *Cursor) First() bool { return c.states.First() }

// Message decodes the state record the state iterator stands at.
func (c *Cursor) Message() (*partitionpb.StoredMessage, error) { return IterState(c.states) }

// SessionScan reads the sequence numbers of one session's messages in
// the main sub-queue, merged in order from its three sets (stream, held,
// parked: every message of the session).
type SessionScan struct {
	its []*pebble.Iterator
}

// ScanSession scans session sid of entity partition k in r from sequence
// number from on.
func ScanSession(r pebble.Reader, k EntityKey, sid string, from uint64) (*SessionScan, error) {
	s := &SessionScan{}
	for _, kind := range []byte{KindSessionMsg, KindSessionHeld, KindSessionParked} {
		prefix := SessionStreamPrefix(k, kind, partitionpb.SubQueue_SUB_QUEUE_MAIN, sid)
		it, err := r.NewIter(&pebble.IterOptions{
			LowerBound: binary.BigEndian.AppendUint64(prefix, from),
			UpperBound: PrefixEnd(prefix),
		})
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("partition: iterator: %w", err)
		}
		s.its = append(s.its, it)
		it.First()
	}
	return s, nil
}

// Next returns the lowest sequence number among the three sets' next
// entries; ok is false once they are all read.
func (s *SessionScan) Next() (seq uint64, ok bool, err error) {
	var next *pebble.Iterator
	for _, it := range s.its {
		if !it.Valid() {
			if err := it.Error(); err != nil {
				return 0, false, fmt.Errorf("partition: iterator: %w", err)
			}
			continue
		}
		key := it.Key()
		if len(key) < 8 {
			return 0, false, fmt.Errorf("%w: session key %x", ErrCorrupt, key)
		}
		if q := binary.BigEndian.Uint64(key[len(key)-8:]); next == nil || q < seq {
			next, seq = it, q
		}
	}
	if next == nil {
		return 0, false, nil
	}
	if _, err := IterValue(next); err != nil {
		return 0, false, err
	}
	next.Next()
	return seq, true, nil
}

// Close closes the scan.
func (s *SessionScan) Close() {
	for _, it := range s.its {
		it.Close()
	}
}

// A Rewrite is what RewriteMessages does with a message: nothing, or write
// it back (Move), with its bare message in a shared blob (Shared) when
// that is set.
type Rewrite struct {
	Move   bool
	Shared *SharedBlob
}

// SharedBlob names a blob of topic partition Owner that copies of one
// message share (ShareBody).
type SharedBlob struct {
	Owner EntityKey
	Blob  []byte
}

// RewriteMessages calls f with the state of every message of the given
// entity partitions in db; when f says to move it, having filled in the
// message's sections, the message is written back as two records: its
// body record from its sections, and its state. A message whose bare
// message goes to a shared blob (which m names already: BodyBlob and the
// fields after it) keeps only its header and annotations in its body
// record; the blob is written the first time the pass meets it, and
// counted as ShareBody and UseSharedBlob count it, once per message. The
// writes are committed in batches of about batchBytes. It returns how many
// it rewrote. (Moving bodies kept in the Raft log into the store before a
// snapshot.)
func RewriteMessages(d *DB, keys []EntityKey, batchBytes int, f func(k EntityKey, m *partitionpb.StoredMessage) (Rewrite, error)) (int, error) {
	db := d.pb
	b := db.NewBatch()
	defer func() { b.Close() }()
	moved := 0
	written := map[string]bool{} // shared blobs written in this pass
	counts := map[string]int64{} // count keys: references added in this pass
	for _, k := range keys {
		prefix := KindPrefix(k, KindMessage)
		it, err := db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: PrefixEnd(prefix)})
		if err != nil {
			return moved, fmt.Errorf("partition: iterator: %w", err)
		}
		for valid := it.First(); valid; valid = it.Next() {
			st, err := IterState(it)
			if err != nil {
				return moved, CloseIter(it, err)
			}
			rw, err := f(k, st)
			if err != nil {
				return moved, CloseIter(it, err)
			}
			if !rw.Move {
				continue
			}
			if s := rw.Shared; s != nil {
				if chunk := BlobChunkKey(s.Owner, s.Blob, 0); !written[string(chunk)] {
					written[string(chunk)] = true
					if err := SetSealed(b, chunk, st.Bare); err != nil {
						return moved, CloseIter(it, err)
					}
				}
				counts[string(BlobRefsKey(s.Owner, s.Blob))]++
				counts[string(BlobUseKey(k, s.Owner.ID, s.Blob))]++
				st.Bare = nil
			}
			if err := SetBody(b, BodyKey(k, st.SubQueue, st.SequenceNumber), st); err != nil {
				return moved, CloseIter(it, err)
			}
			st.Header, st.Annotations, st.Bare = nil, nil, nil
			if err := SetState(b, it.Key(), st); err != nil {
				return moved, CloseIter(it, err)
			}
			moved++
			if b.Len() >= batchBytes {
				if err := b.Commit(pebble.NoSync); err != nil {
					return moved, CloseIter(it, fmt.Errorf("partition: write: %w", err))
				}
				b.Close()
				b = db.NewBatch()
			}
		}
		if err := CloseIter(it, it.Error()); err != nil {
			return moved, err
		}
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		return moved, fmt.Errorf("partition: write: %w", err)
	}
	return moved, addCounts(db, counts)
}

// addCounts adds the given references to the counts in db (in key order,
// as the store writes nothing in map order).
func addCounts(db *pebble.DB, counts map[string]int64) error {
	if len(counts) == 0 {
		return nil
	}
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b := db.NewIndexedBatch()
	defer b.Close()
	cb := &Batch{pb: b}
	for _, k := range keys {
		if _, err := cb.addCount([]byte(k), counts[k]); err != nil {
			return err
		}
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		return fmt.Errorf("partition: write: %w", err)
	}
	return nil
}
