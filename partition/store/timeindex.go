package store

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"

	"github.com/cockroachdb/pebble/v2"
)

// TimeIndex follows one of an entity partition's indexes by time: the
// scheduled messages (KindScheduled), the expiring ones (KindExpiry) and
// the session locks (KindSessionLock), whose keys are the kind's prefix,
// a time(8), then the entry's id (a sequence number, a session id). It
// keeps the earliest time in the committed store (Min, after Load) and a
// floor: a key below which the index has no entry, so that scans skip
// the entries deleted at the index's head (their tombstones stay in the
// LSM until compaction) instead of stepping over every one. Every write
// below the floor lowers it; Load raises it.
type TimeIndex struct {
	prefix []byte
	floor  []byte
	min    int64
	has    bool
}

// NewScheduledIndex is entity partition k's index of scheduled messages
// by activation time, before Load.
func NewScheduledIndex(k EntityKey) TimeIndex { return newTimeIndex(k, KindScheduled) }

// NewExpiryIndex is entity partition k's index of messages by expiry
// time, before Load.
func NewExpiryIndex(k EntityKey) TimeIndex { return newTimeIndex(k, KindExpiry) }

// NewSessionLockIndex is entity partition k's index of session locks by
// expiry time, before Load.
func NewSessionLockIndex(k EntityKey) TimeIndex { return newTimeIndex(k, KindSessionLock) }

func newTimeIndex(k EntityKey, kind byte) TimeIndex {
	p := KindPrefix(k, kind)
	return TimeIndex{prefix: p, floor: p}
}

// Min returns the earliest time of the index as of the last Load; ok is
// false when it was empty.
func (x *TimeIndex) Min() (at int64, ok bool) { return x.min, x.has }

// lower notes an entry written at key.
func (x *TimeIndex) lower(key []byte) {
	if bytes.Compare(key, x.floor) < 0 {
		x.floor = key
	}
}

// end is the upper bound of the index's keys.
func (x *TimeIndex) end() []byte { return PrefixEnd(x.prefix) }

// FloorTime is the earliest time an entry may have.
func (x *TimeIndex) FloorTime() int64 {
	if len(x.floor) >= KindPrefixLen+8 {
		return TimeFromBits(binary.BigEndian.Uint64(x.floor[KindPrefixLen:]))
	}
	if bytes.Compare(x.floor, x.prefix) <= 0 {
		return math.MinInt64
	}
	return math.MaxInt64 // past the end: empty
}

// Load reads the earliest entry from r, scanning from the floor, and
// raises the floor to it.
func (x *TimeIndex) Load(r pebble.Reader) error {
	end := x.end()
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: x.floor, UpperBound: end})
	if err != nil {
		return fmt.Errorf("partition: iterator: %w", err)
	}
	x.has = false
	x.floor = end
	if it.First() {
		if _, err := IterValue(it); err != nil {
			return CloseIter(it, err)
		}
		if len(it.Key()) < KindPrefixLen+8 {
			return CloseIter(it, fmt.Errorf("%w: index key %x", ErrCorrupt, it.Key()))
		}
		x.min, x.has = TimeFromBits(binary.BigEndian.Uint64(it.Key()[KindPrefixLen:])), true
		x.floor = append([]byte(nil), it.Key()...)
	}
	return CloseIter(it, it.Error())
}

// SetDue sets (or deletes) the entry of message seq, due at at, in index
// x (scheduled or expiring messages). An index entry is written once
// between deletes, so it is deleted with a single delete.
func (b *Batch) SetDue(x *TimeIndex, at int64, seq uint64, set bool) error {
	key := binary.BigEndian.AppendUint64(append(make([]byte, 0, KindPrefixLen+16), x.prefix...), TimeBits(at))
	key = binary.BigEndian.AppendUint64(key, seq)
	if !set {
		return b.pb.SingleDelete(key, nil)
	}
	x.lower(key)
	return SetSealed(b.pb, key, nil)
}

// Due calls f, in index order, with the entries of x (scheduled or
// expiring messages) due at or before now, until f returns false or the
// entries run out. Writes by f do not disturb the scan.
func (b *Batch) Due(x *TimeIndex, now int64, f func(at int64, seq uint64) (bool, error)) error {
	if x.FloorTime() > now {
		return nil
	}
	upper := x.end()
	if now < math.MaxInt64 {
		upper = binary.BigEndian.AppendUint64(append([]byte(nil), x.prefix...), TimeBits(now+1))
	}
	kind := x.prefix[len(x.prefix)-1]
	it, err := b.pb.NewIter(&pebble.IterOptions{LowerBound: x.floor, UpperBound: upper})
	if err != nil {
		return fmt.Errorf("partition: iterator: %w", err)
	}
	for valid := it.First(); valid; valid = it.Next() {
		if _, err := IterValue(it); err != nil {
			return CloseIter(it, err)
		}
		at, seq, ok := ParseTimeSeqKey(it.Key(), kind)
		if !ok {
			return CloseIter(it, fmt.Errorf("%w: index key %x", ErrCorrupt, it.Key()))
		}
		more, err := f(at, seq)
		if err != nil {
			return CloseIter(it, err)
		}
		if !more {
			break
		}
	}
	return CloseIter(it, it.Error())
}

// SetSessionLock sets (or deletes) session sid's entry, ending at until,
// in x, the index of session locks. Entries are deleted with Delete.
func (b *Batch) SetSessionLock(x *TimeIndex, k EntityKey, until int64, sid string, set bool) error {
	key := SessionLockKey(k, until, sid)
	if !set {
		return b.pb.Delete(key, nil)
	}
	if err := b.pb.Set(key, Seal(key, nil), nil); err != nil {
		return err
	}
	x.lower(key)
	return nil
}

// DueSessionLocks returns the sessions whose lock, in x, ends at or
// before now, earliest first, at most max.
func (b *Batch) DueSessionLocks(x *TimeIndex, now int64, max int) ([]string, error) {
	if x.FloorTime() > now {
		return nil, nil
	}
	it, err := b.pb.NewIter(&pebble.IterOptions{LowerBound: x.floor, UpperBound: x.end()})
	if err != nil {
		return nil, fmt.Errorf("partition: iterator: %w", err)
	}
	var sids []string
	for valid := it.First(); valid && len(sids) < max; valid = it.Next() {
		if _, err := IterValue(it); err != nil {
			return nil, CloseIter(it, err)
		}
		key := it.Key()
		if len(key) < KindPrefixLen+8 {
			return nil, CloseIter(it, fmt.Errorf("%w: session lock key %x", ErrCorrupt, key))
		}
		if TimeFromBits(binary.BigEndian.Uint64(key[KindPrefixLen:])) > now {
			break
		}
		sids = append(sids, string(key[KindPrefixLen+8:]))
	}
	return sids, CloseIter(it, it.Error())
}
