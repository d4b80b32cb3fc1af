package partition

import (
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// Messages returns the stored messages of a sub-queue in sequence order.
func Messages(m *Machine, id uint64, part uint32, sub partitionpb.SubQueue) ([]*partitionpb.StoredMessage, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	k := ekey{id, part}
	it, err := prefixIter(m.db, subPrefix(k, kindMessage, sub))
	if err != nil {
		return nil, err
	}
	var out []*partitionpb.StoredMessage
	for valid := it.First(); valid; valid = it.Next() {
		msg, err := getMessage(m.db, append([]byte(nil), it.Key()...))
		if err != nil {
			return nil, closeIter(it, err)
		}
		out = append(out, msg)
	}
	return out, closeIter(it, it.Error())
}

// StageRestore loads a snapshot beside m's store as a complete restore that
// was not swapped in yet, as a crash during Restore leaves it.
func StageRestore(m *Machine, r io.Reader) error {
	tmp := filepath.Join(m.dir, restoreTmp)
	if err := m.loadSnapshot(tmp, r); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(m.dir, restoreNew))
}

// Corrupt overwrites the stored value under the message key of seq with
// garbage, as a disk error would.
func Corrupt(m *Machine, id uint64, part uint32, sub partitionpb.SubQueue, seq uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.db.Set(messageKey(ekey{id, part}, sub, seq), []byte("garbage!"), pebble.NoSync)
}

// SetNextSequence sets the counter of an entity partition's next sequence
// number (to test the wrap without 2^48 messages).
func SetNextSequence(m *Machine, id uint64, part uint32, next uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.entities[ekey{id, part}].next = next
}

// Bounds are the per-command bounds.
type Bounds struct {
	LockCount, ExpiredPerLock, ExpiredLocks int
	LockBytes                               int64
}

// LowerBounds sets the per-command bounds for the test, so that tests reach
// them with few messages.
func LowerBounds(t testing.TB, b Bounds) {
	old := Bounds{lockCount, maxExpiredPerLock, maxExpiredLocks, lockBytes}
	set := func(b Bounds) {
		lockCount, maxExpiredPerLock, maxExpiredLocks, lockBytes = b.LockCount, b.ExpiredPerLock, b.ExpiredLocks, b.LockBytes
	}
	set(b)
	t.Cleanup(func() { set(old) })
}

// ReadSnapshot decodes a snapshot stream without a store and returns its
// record count and applied index.
func ReadSnapshot(r io.Reader) (records int, applied uint64, err error) {
	sr, err := newSnapshotReader(r)
	if err != nil {
		return 0, 0, err
	}
	for {
		_, _, more, err := sr.next()
		if err != nil {
			return records, 0, err
		}
		if !more {
			return records, sr.applied, nil
		}
		records++
	}
}
