package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/cockroachdb/pebble/v2"
)

// ErrCorrupt is a record that fails its checksum, or records that
// disagree. partition.ErrCorrupt is this error.
var ErrCorrupt = errors.New("partition: store corrupt")

// Every value in the store is sealed: its payload followed by the CRC-32C
// of key and payload. Covering the key too catches a record read back
// under the wrong key. Every read unseals and fails with ErrCorrupt on a
// mismatch.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// CRCLen is the length of a value's seal.
const CRCLen = 4

func Checksum(key, payload []byte) uint32 {
	return crc32.Update(crc32.Checksum(key, castagnoli), castagnoli, payload)
}

// Seal returns payload sealed for key.
func Seal(key, payload []byte) []byte {
	v := make([]byte, len(payload), len(payload)+CRCLen)
	copy(v, payload)
	return binary.BigEndian.AppendUint32(v, Checksum(key, payload))
}

// SetSealed writes key → payload sealed into b, in place: the value is
// assembled in the batch's own buffer rather than in a copy first.
func SetSealed(b *pebble.Batch, key, payload []byte) error {
	op := b.SetDeferred(len(key), len(payload)+CRCLen)
	copy(op.Key, key)
	copy(op.Value, payload)
	binary.BigEndian.PutUint32(op.Value[len(payload):], Checksum(key, payload))
	return op.Finish()
}

// Unseal verifies a stored value and returns its payload, which aliases v.
func Unseal(key, v []byte) ([]byte, error) {
	if len(v) < CRCLen {
		return nil, fmt.Errorf("%w: key %x: value of %d bytes", ErrCorrupt, key, len(v))
	}
	p := v[:len(v)-CRCLen]
	if binary.BigEndian.Uint32(v[len(p):]) != Checksum(key, p) {
		return nil, fmt.Errorf("%w: key %x", ErrCorrupt, key)
	}
	return p, nil
}

// Get reads and unseals one value; found is false if the key is absent.
// The payload is a copy.
func Get(r pebble.Reader, key []byte) (payload []byte, found bool, err error) {
	v, closer, err := r.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("partition: read %x: %w", key, err)
	}
	defer closer.Close()
	p, err := Unseal(key, v)
	if err != nil {
		return nil, false, err
	}
	return append([]byte(nil), p...), true, nil
}

// PrefixIter returns an iterator over the keys with prefix p.
func PrefixIter(r pebble.Reader, p []byte) (*pebble.Iterator, error) {
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: p, UpperBound: PrefixEnd(p)})
	if err != nil {
		return nil, fmt.Errorf("partition: iterator: %w", err)
	}
	return it, nil
}

// IterValue unseals the value under the iterator.
func IterValue(it *pebble.Iterator) ([]byte, error) {
	v, err := it.ValueAndErr()
	if err != nil {
		return nil, fmt.Errorf("partition: read %x: %w", it.Key(), err)
	}
	return Unseal(it.Key(), v)
}

// CloseIter closes it and returns the first of err and its error.
func CloseIter(it *pebble.Iterator, err error) error {
	if cerr := it.Close(); err == nil && cerr != nil {
		return fmt.Errorf("partition: iterator: %w", cerr)
	}
	return err
}
