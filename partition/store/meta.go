package store

import (
	"encoding/binary"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"google.golang.org/protobuf/proto"
)

// The records outside any entity partition's data: entity records (config
// and counters, partition's entity.record), tombstones of deleted entity
// partitions, and request results (doc.go: prefixes 0x01, 0x03, 0x04,
// 0x05).

// PutEntity writes entity partition k's record.
func (b *Batch) PutEntity(k EntityKey, record []byte) error {
	key := EntityRecordKey(k)
	return b.pb.Set(key, Seal(key, record), nil)
}

// DeleteEntity deletes entity partition k's record.
func (b *Batch) DeleteEntity(k EntityKey) error { return b.pb.Delete(EntityRecordKey(k), nil) }

// EachEntity calls f with every entity partition's record in r, in key
// order; the record is valid until f returns.
func EachEntity(r pebble.Reader, f func(k EntityKey, record []byte) error) error {
	it, err := PrefixIter(r, []byte{PrefixEntity})
	if err != nil {
		return err
	}
	for ok := it.First(); ok; ok = it.Next() {
		k, ok := ParseEntityRecordKey(it.Key())
		if !ok {
			return CloseIter(it, fmt.Errorf("%w: entity key %x", ErrCorrupt, it.Key()))
		}
		p, err := IterValue(it)
		if err != nil {
			return CloseIter(it, err)
		}
		if err := f(k, p); err != nil {
			return CloseIter(it, err)
		}
	}
	return CloseIter(it, it.Error())
}

// Tombstone returns the version of the latest versioned delete of entity
// partition k, 0 if none.
func (b *Batch) Tombstone(k EntityKey) (uint64, error) {
	tk := TombstoneKey(k)
	p, found, err := Get(b.pb, tk)
	if err != nil || !found {
		return 0, err
	}
	if len(p) != 8 {
		return 0, fmt.Errorf("%w: tombstone %x of %d bytes", ErrCorrupt, tk, len(p))
	}
	return binary.BigEndian.Uint64(p), nil
}

// PutTombstone records a delete of entity partition k at version.
func (b *Batch) PutTombstone(k EntityKey, version uint64) error {
	tk := TombstoneKey(k)
	return b.pb.Set(tk, Seal(tk, binary.BigEndian.AppendUint64(nil, version)), nil)
}

// DeleteTombstone deletes entity partition k's tombstone.
func (b *Batch) DeleteTombstone(k EntityKey) error { return b.pb.Delete(TombstoneKey(k), nil) }

// RequestResult returns the result recorded for request id: when it was
// applied, and the encoded Result; found is false when there is none.
func (b *Batch) RequestResult(id []byte) (at int64, result []byte, found bool, err error) {
	p, found, err := Get(b.pb, RequestKey(id))
	if err != nil || !found {
		return 0, nil, false, err
	}
	if len(p) < 8 {
		return 0, nil, false, fmt.Errorf("%w: request %x: record of %d bytes", ErrCorrupt, id, len(p))
	}
	return TimeFromBits(binary.BigEndian.Uint64(p)), p[8:], true, nil
}

// PutRequestResult records result for request id, applied at at, in
// place of the expired result applied at stale, if there is one. A result
// and its time entry are written once between deletes: single deletes.
func (b *Batch) PutRequestResult(id []byte, at int64, stale *int64, result proto.Message) error {
	k := RequestKey(id)
	if stale != nil {
		if err := b.pb.SingleDelete(RequestTimeKey(*stale, id), nil); err != nil {
			return err
		}
		if err := b.pb.SingleDelete(k, nil); err != nil {
			return err
		}
	}
	v := binary.BigEndian.AppendUint64(make([]byte, 0, 8+marshal.Size(result)), TimeBits(at))
	v, err := marshal.MarshalAppend(v, result)
	if err != nil {
		return fmt.Errorf("partition: request %x: %w", id, err)
	}
	if err := SetSealed(b.pb, k, v); err != nil {
		return err
	}
	return SetSealed(b.pb, RequestTimeKey(at, id), nil)
}

// LatestRequest returns when the latest request result in r was applied;
// found is false when there is none.
func LatestRequest(r pebble.Reader) (at int64, found bool, err error) {
	it, err := PrefixIter(r, []byte{PrefixReqTime})
	if err != nil {
		return 0, false, err
	}
	if it.Last() {
		if len(it.Key()) < 9 {
			return 0, false, CloseIter(it, ErrCorrupt)
		}
		at, found = TimeFromBits(binary.BigEndian.Uint64(it.Key()[1:9])), true
	}
	return at, found, CloseIter(it, it.Error())
}
