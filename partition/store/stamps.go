package store

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/cockroachdb/pebble/v2"
)

// Records of ids by time: duplicate detection (a message id), forwarded
// origins (where a forwarded message came from) and a topic's scheduled
// messages (where their copies went), each with a second index by time
// that lets the writes that follow prune stale records a few at a time
// (pruneByTime).

// Stamp is when an id was taken and the sequence number it was given.
type Stamp struct {
	At  int64
	Seq uint64
}

func (s Stamp) encode() []byte {
	v := binary.BigEndian.AppendUint64(make([]byte, 0, 16), TimeBits(s.At))
	return binary.BigEndian.AppendUint64(v, s.Seq)
}

// getStamp reads the stamp under key; what names its kind in errors.
func (b *Batch) getStamp(k EntityKey, key []byte, what string) (Stamp, bool, error) {
	p, found, err := Get(b.pb, key)
	if err != nil || !found {
		return Stamp{}, false, err
	}
	if len(p) != 16 {
		return Stamp{}, false, fmt.Errorf("%w: %s: %s entry of %d bytes", ErrCorrupt, k, what, len(p))
	}
	return Stamp{At: TimeFromBits(binary.BigEndian.Uint64(p)), Seq: binary.BigEndian.Uint64(p[8:])}, true, nil
}

// putStamp writes s under key and its time entry under timeKey(s.At),
// first deleting the time entry of old, the record it replaces, if any
// (so that pruning that entry cannot delete the new record).
func (b *Batch) putStamp(key []byte, timeKey func(at int64) []byte, s Stamp, old *Stamp) error {
	if old != nil {
		if err := b.pb.Delete(timeKey(old.At), nil); err != nil {
			return err
		}
	}
	if err := b.pb.Set(key, Seal(key, s.encode()), nil); err != nil {
		return err
	}
	tk := timeKey(s.At)
	return b.pb.Set(tk, Seal(tk, nil), nil)
}

// Dedup returns the duplicate-detection record of message id in entity
// partition k: when it was first accepted, and its sequence number.
func (b *Batch) Dedup(k EntityKey, id string) (Stamp, bool, error) {
	return b.getStamp(k, DedupKey(k, id), "dedup")
}

// PutDedup records message id as accepted (s), replacing old, a stale
// record of it, if not nil.
func (b *Batch) PutDedup(k EntityKey, id string, s Stamp, old *Stamp) error {
	return b.putStamp(DedupKey(k, id), func(at int64) []byte { return DedupTimeKey(k, at, id) }, s, old)
}

// PruneDedup deletes up to budget dedup records taken at or before
// cutoff, oldest first; *floor is the time below which none is
// (pruneByTime).
func (b *Batch) PruneDedup(k EntityKey, cutoff int64, floor *int64, budget int) error {
	// Plain deletes: PutDedup overwrites the record of an id seen again
	// after its window, so it is not written once between deletes.
	_, err := b.pruneByTime(KindPrefix(k, KindDedupTime), cutoff, floor, budget, b.delete, func(id []byte) []byte {
		return DedupKey(k, string(id))
	})
	return err
}

// Forward returns the record of forwarded origin id (the origin's
// entity, partition, sub-queue and sequence number, 21 bytes) in entity
// partition k: when it was taken and the sequence number it was given.
func (b *Batch) Forward(k EntityKey, id []byte) (Stamp, bool, error) {
	return b.getStamp(k, ForwardKey(k, id), "forward")
}

// PutForward records origin id as taken (s), replacing old, a stale
// record of it, if not nil.
func (b *Batch) PutForward(k EntityKey, id []byte, s Stamp, old *Stamp) error {
	return b.putStamp(ForwardKey(k, id), func(at int64) []byte { return ForwardTimeKey(k, at, id) }, s, old)
}

// PruneForwards deletes up to budget origins taken at or before cutoff.
func (b *Batch) PruneForwards(k EntityKey, cutoff int64, floor *int64, budget int) error {
	_, err := b.pruneByTime(KindPrefix(k, KindForwardTime), cutoff, floor, budget, b.delete, func(id []byte) []byte {
		return ForwardKey(k, id)
	})
	return err
}

// ScheduledCopy is a copy of a message scheduled on a topic: the
// subscription's entity id and the copy's sequence number in it.
type ScheduledCopy struct {
	Sub uint64
	Seq uint64
}

// PutTopicScheduled records where the copies of the message topic
// partition k numbered seq, due at at, went.
func (b *Batch) PutTopicScheduled(k EntityKey, seq uint64, at int64, copies []ScheduledCopy) error {
	v := binary.BigEndian.AppendUint64(make([]byte, 0, 8+16*len(copies)), TimeBits(at))
	for _, c := range copies {
		v = binary.BigEndian.AppendUint64(v, c.Sub)
		v = binary.BigEndian.AppendUint64(v, c.Seq)
	}
	key := TopicSchedKey(k, seq)
	if err := b.pb.Set(key, Seal(key, v), nil); err != nil {
		return err
	}
	tk := TopicSchedTimeKey(k, at, seq)
	return b.pb.Set(tk, Seal(tk, nil), nil)
}

// TopicScheduled reads the record of topic message seq: its due time and
// copies; found is false when there is none.
func (b *Batch) TopicScheduled(k EntityKey, seq uint64) (at int64, copies []ScheduledCopy, found bool, err error) {
	p, found, err := Get(b.pb, TopicSchedKey(k, seq))
	if err != nil || !found {
		return 0, nil, false, err
	}
	if len(p) < 8 || (len(p)-8)%16 != 0 {
		return 0, nil, false, fmt.Errorf("%w: %s: scheduled topic message %d: record of %d bytes", ErrCorrupt, k, seq, len(p))
	}
	at = TimeFromBits(binary.BigEndian.Uint64(p))
	for q := p[8:]; len(q) > 0; q = q[16:] {
		copies = append(copies, ScheduledCopy{Sub: binary.BigEndian.Uint64(q), Seq: binary.BigEndian.Uint64(q[8:])})
	}
	return at, copies, true, nil
}

// CountTopicScheduled counts the records of messages scheduled on topic
// partition k (one key read each, none of the messages): what its
// scheduled counter holds, for an entity record written before the
// counter was kept.
func CountTopicScheduled(r Reader, k EntityKey) (int64, error) {
	it, err := PrefixIter(r, KindPrefix(k, KindTopicSched))
	if err != nil {
		return 0, err
	}
	n := int64(0)
	for ok := it.First(); ok; ok = it.Next() {
		n++
	}
	return n, CloseIter(it, it.Error())
}

// FirstTopicScheduled returns the earliest due time of the messages
// scheduled on topic partition k; ok is false when none is.
func FirstTopicScheduled(r Reader, k EntityKey) (at int64, ok bool, err error) {
	prefix := KindPrefix(k, KindTopicSchedTime)
	it, err := PrefixIter(r, prefix)
	if err != nil {
		return 0, false, err
	}
	if it.First() {
		key := it.Key()
		if len(key) < len(prefix)+8 {
			return 0, false, CloseIter(it, fmt.Errorf("%w: time index key %x", ErrCorrupt, key))
		}
		at, ok = TimeFromBits(binary.BigEndian.Uint64(key[len(prefix):])), true
	}
	return at, ok, CloseIter(it, it.Error())
}

// DeleteTopicScheduled deletes the record of topic message seq, due at at.
func (b *Batch) DeleteTopicScheduled(k EntityKey, seq uint64, at int64) error {
	if err := b.pb.Delete(TopicSchedKey(k, seq), nil); err != nil {
		return err
	}
	return b.pb.Delete(TopicSchedTimeKey(k, at, seq), nil)
}

// PruneTopicScheduled deletes up to budget records due at or before
// cutoff and returns how many it deleted.
func (b *Batch) PruneTopicScheduled(k EntityKey, cutoff int64, floor *int64, budget int) (int, error) {
	return b.pruneByTime(KindPrefix(k, KindTopicSchedTime), cutoff, floor, budget, b.delete, func(id []byte) []byte {
		return append(KindPrefix(k, KindTopicSched), id...)
	})
}

// PruneRequests deletes up to budget request results applied at or
// before cutoff.
func (b *Batch) PruneRequests(cutoff int64, floor *int64, budget int) error {
	// Single deletes: partition's recordRequest deletes an expired result
	// before it writes the id's new one, so each is written once between
	// deletes.
	_, err := b.pruneByTime([]byte{PrefixReqTime}, cutoff, floor, budget, b.singleDelete, RequestKey)
	return err
}

func (b *Batch) delete(key []byte) error { return b.pb.Delete(key, nil) }

// singleDelete deletes a record written once since it was last deleted
// (indexes.go: single deletes).
func (b *Batch) singleDelete(key []byte) error { return b.pb.SingleDelete(key, nil) }

// pruneByTime deletes, oldest first, up to budget entries of a time index
// (keys: prefix, a time, an id) at or before cutoff, each with the record
// recordKey names for its id, by del. *floor is the time below which the index
// holds nothing: the scan starts there and is skipped while floor is past
// cutoff, and afterwards floor is the oldest entry left (or past every
// time, when none is), so that the entries that follow skip the scan until
// that entry falls out of the window. A scan per entry over an empty
// range would position an iterator over every level of the store each
// time.
func (b *Batch) pruneByTime(prefix []byte, cutoff int64, floor *int64, budget int, del func([]byte) error, recordKey func(id []byte) []byte) (deleted int, err error) {
	if *floor > cutoff {
		return 0, nil
	}
	lower := binary.BigEndian.AppendUint64(append([]byte(nil), prefix...), TimeBits(*floor))
	it, err := b.pb.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: PrefixEnd(prefix)})
	if err != nil {
		return 0, fmt.Errorf("partition: iterator: %w", err)
	}
	next := int64(math.MaxInt64) // unless an entry is left
	for valid := it.First(); valid; valid = it.Next() {
		key := it.Key()
		if len(key) < len(prefix)+8 {
			return deleted, CloseIter(it, fmt.Errorf("%w: time index key %x", ErrCorrupt, key))
		}
		at := TimeFromBits(binary.BigEndian.Uint64(key[len(prefix):]))
		if at > cutoff || budget == 0 {
			next = at
			break
		}
		budget--
		if err := del(recordKey(key[len(prefix)+8:])); err != nil {
			return deleted, CloseIter(it, err)
		}
		if err := del(append([]byte(nil), key...)); err != nil {
			return deleted, CloseIter(it, err)
		}
		deleted++
	}
	if err := CloseIter(it, it.Error()); err != nil {
		return deleted, err
	}
	*floor = next
	return deleted, nil
}
