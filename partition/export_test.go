package partition

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"

	"github.com/cockroachdb/pebble/v2"

	"github.com/quorumbus/quorumbus/partition/store"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// Every copy written from the one before it is checked against its full
// encoding in partition's tests (the copies' shapes, fanout.go).
func init() { store.VerifyCopies = true }

// WithoutLockedStates makes m read the state records of locked messages
// from the store, as a replica did before lockcache.go, until its next
// load (a Restore).
func WithoutLockedStates(m *Machine) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.lockedStates = nil
}

// AliasBatch is the fast path of DecodeBatch (decode.go).
func AliasBatch(p []byte) (*partitionpb.Batch, bool) { return aliasBatch(p, nil) }

// DecodeLazily decodes data as the apply path does, filter views left in
// the entry (lazyViews), then reads every view as the applier would. It
// says how many views were left undecoded.
func DecodeLazily(data []byte) (*partitionpb.Batch, int, error) {
	a := &applier{views: lazyViews{}}
	b, err := decodeEntry(data, a.views)
	if err != nil {
		return nil, 0, err
	}
	for _, c := range b.Commands {
		for _, nm := range c.GetEnqueue().GetMessages() {
			a.viewOf(nm)
		}
	}
	return b, len(a.views), nil
}

// Messages returns the stored messages of a sub-queue in sequence order.
func Messages(m *Machine, id uint64, part uint32, sub partitionpb.SubQueue) ([]*partitionpb.StoredMessage, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	k := ekey{ID: id, Part: part}
	it, err := store.PrefixIter(m.db, store.SubPrefix(k, store.KindMessage, sub))
	if err != nil {
		return nil, err
	}
	var out []*partitionpb.StoredMessage
	for valid := it.First(); valid; valid = it.Next() {
		seq := binary.BigEndian.Uint64(it.Key()[len(it.Key())-8:])
		msg, err := getMessage(m.db, m.logs, k, sub, seq)
		if err != nil {
			return nil, store.CloseIter(it, err)
		}
		out = append(out, msg)
	}
	return out, store.CloseIter(it, it.Error())
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
	return m.db.Pebble().Set(store.MessageKey(ekey{ID: id, Part: part}, sub, seq), []byte("garbage!"), pebble.NoSync)
}

// SetNextSequence sets the counter of an entity partition's next sequence
// number (to test the wrap without 2^48 messages).
func SetNextSequence(m *Machine, id uint64, part uint32, next uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.entities[ekey{ID: id, Part: part}].next = next
}

// ReadSnapshot decodes a snapshot stream without a store and returns its
// record count and applied index.
func ReadSnapshot(r io.Reader) (records int, applied uint64, err error) {
	return store.ReadSnapshot(r)
}

// CheckIndexes checks that the body records, the available, scheduled and
// expiry indexes and the lock grants of an entity partition hold exactly
// what its messages call for (fresh messages have no available entry).
func CheckIndexes(m *Machine, id uint64, part uint32) error {
	m.mu.RLock()
	defer m.mu.RUnlock()
	k := ekey{ID: id, Part: part}
	e, ok := m.entities[k]
	if !ok {
		return fmt.Errorf("%s: no such entity", k)
	}
	want := map[string]bool{}
	type grantOf struct {
		until int64
		sub   partitionpb.SubQueue
		base  uint64
	}
	grants := map[grantOf][]uint64{}
	for _, sub := range []partitionpb.SubQueue{partitionpb.SubQueue_SUB_QUEUE_MAIN, partitionpb.SubQueue_SUB_QUEUE_DEAD_LETTER} {
		it, err := store.PrefixIter(m.db, store.SubPrefix(k, store.KindMessage, sub))
		if err != nil {
			return err
		}
		for valid := it.First(); valid; valid = it.Next() {
			seq := binary.BigEndian.Uint64(it.Key()[len(it.Key())-8:])
			msg, err := getMessage(m.db, m.logs, k, sub, seq)
			if err != nil {
				return store.CloseIter(it, err)
			}
			if msg.Size != messageSize(msg) {
				return store.CloseIter(it, fmt.Errorf("%s: message %d records size %d, its body holds %d", k, seq, msg.Size, messageSize(msg)))
			}
			want[string(store.BodyKey(k, sub, seq))] = true
			s := store.SlotOf(msg)
			// A session's messages are in its stream instead
			// (CheckSessions), and in no expiry index.
			if s.Available() && !e.inSession(s) && e.indexedAvailable(s) {
				want[string(store.AvailableKey(k, sub, seq))] = true
			}
			if s.State == partitionpb.MessageState_MESSAGE_STATE_SCHEDULED {
				want[string(store.ScheduledKey(k, s.At, s.Seq))] = true
			}
			if s.Expiring() && !e.inSession(s) {
				want[string(store.ExpiryKey(k, s.Exp, s.Seq))] = true
			}
			if s.Locked {
				gk := grantOf{s.Until, s.Sub, s.Seq &^ (store.GrantSpan - 1)}
				grants[gk] = append(grants[gk], s.Seq)
			}
		}
		if err := store.CloseIter(it, it.Error()); err != nil {
			return err
		}
	}
	// Every body belongs to a message, and every scheduled or expiry
	// index entry names one in that state.
	for _, kind := range []byte{store.KindBody, store.KindAvailable, store.KindScheduled, store.KindExpiry} {
		it, err := store.PrefixIter(m.db, store.KindPrefix(k, kind))
		if err != nil {
			return err
		}
		for valid := it.First(); valid; valid = it.Next() {
			if !want[string(it.Key())] {
				return store.CloseIter(it, fmt.Errorf("%s: stray index entry %x", k, it.Key()))
			}
			delete(want, string(it.Key()))
		}
		if err := store.CloseIter(it, it.Error()); err != nil {
			return err
		}
	}
	for key := range want {
		return fmt.Errorf("%s: missing index entry %x", k, key)
	}
	// Each lock grant holds exactly the locks it names.
	err := store.EachGrant(m.db, k, func(until int64, sub partitionpb.SubQueue, base uint64, got []uint64) error {
		gk := grantOf{until, sub, base}
		if want := grants[gk]; !slices.Equal(want, got) {
			return fmt.Errorf("%s: lock grant %+v holds %v, the messages call for %v", k, gk, got, want)
		}
		delete(grants, gk)
		return nil
	})
	if err != nil {
		return err
	}
	for gk, want := range grants {
		return fmt.Errorf("%s: missing lock grant %+v for %v", k, gk, want)
	}
	return nil
}

// DedupEntries counts an entity partition's duplicate-detection entries:
// the records by message id and those by time, which must agree.
func DedupEntries(m *Machine, id uint64, part uint32) (int, error) {
	k := ekey{ID: id, Part: part}
	return countPaired(m, store.KindPrefix(k, store.KindDedup), store.KindPrefix(k, store.KindDedupTime))
}

// countPaired counts the keys under two prefixes, a record kind and its
// time index, which must hold as many.
func countPaired(m *Machine, records, byTime []byte) (int, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	var n [2]int
	for i, p := range [][]byte{records, byTime} {
		it, err := store.PrefixIter(m.db, p)
		if err != nil {
			return 0, err
		}
		for valid := it.First(); valid; valid = it.Next() {
			n[i]++
		}
		if err := store.CloseIter(it, it.Error()); err != nil {
			return 0, err
		}
	}
	if n[0] != n[1] {
		return 0, fmt.Errorf("%d records under %x, %d time entries under %x", n[0], records, n[1], byTime)
	}
	return n[0], nil
}

// CursorLookups reads the state records of seqs, in the order given, with
// one message cursor over a sub-queue (as Lock and Settle read), and
// returns which it found.
func CursorLookups(m *Machine, id uint64, part uint32, sub partitionpb.SubQueue, seqs []uint64) ([]bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.entities[ekey{ID: id, Part: part}]
	if !ok {
		return nil, fmt.Errorf("%d/%d: no such entity", id, part)
	}
	a := &applier{lim: m.limits, entities: m.entities, b: store.NewBatch(m.db, 0, nil)}
	defer a.b.Close()
	c, err := a.newMessageCursor(e, sub, 0, true)
	if err != nil {
		return nil, err
	}
	found := make([]bool, len(seqs))
	for i, seq := range seqs {
		msg, err := c.Lookup(seq)
		if err != nil {
			return nil, c.close(err)
		}
		if found[i] = msg != nil; msg != nil {
			if msg.SequenceNumber != seq {
				return nil, c.close(fmt.Errorf("lookup %d read message %d", seq, msg.SequenceNumber))
			}
			if err := c.body(msg); err != nil {
				return nil, c.close(err)
			}
			if want := fmt.Sprint("m", seq); string(msg.Bare) != want {
				return nil, c.close(fmt.Errorf("lookup %d: body %q, want %q", seq, msg.Bare, want))
			}
		}
	}
	return found, c.close(nil)
}

// StoreMetrics returns the store's pebble metrics.
func StoreMetrics(m *Machine) *pebble.Metrics { return m.db.Pebble().Metrics() }

// FlushStore writes the store's memtable out to a table, so that the next
// records meet the earlier ones only in compactions.
func FlushStore(m *Machine) error { return m.db.Flush() }

// CompactStore compacts the whole store.
func CompactStore(m *Machine) error {
	return m.db.Pebble().Compact(context.Background(), []byte{0}, bytes.Repeat([]byte{0xff}, 64), false)
}

// Misuse is how many single deletes pebble found meeting no write or two.
func Misuse(m *Machine) int64 { return m.misuse.Load() }

// RequestEntries counts the stored request results, which must have one
// time entry each.
func RequestEntries(m *Machine) (int, error) {
	return countPaired(m, []byte{store.PrefixRequest}, []byte{store.PrefixReqTime})
}

// BodyPlaces counts the messages whose body is in a body record and those
// whose body is in the Raft log.
func BodyPlaces(m *Machine) (inStore, inLog int, err error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	for k := range m.entities {
		it, err := store.PrefixIter(m.db, store.KindPrefix(k, store.KindMessage))
		if err != nil {
			return 0, 0, err
		}
		for valid := it.First(); valid; valid = it.Next() {
			st, err := store.IterState(it)
			if err != nil {
				return 0, 0, store.CloseIter(it, err)
			}
			if st.BodyIndex != 0 {
				inLog++
			}
		}
		if err := store.CloseIter(it, it.Error()); err != nil {
			return 0, 0, err
		}
		if it, err = store.PrefixIter(m.db, store.KindPrefix(k, store.KindBody)); err != nil {
			return 0, 0, err
		}
		for valid := it.First(); valid; valid = it.Next() {
			inStore++
		}
		if err := store.CloseIter(it, it.Error()); err != nil {
			return 0, 0, err
		}
	}
	return inStore, inLog, nil
}

// DowngradeLockIndex rewrites the store's lock grants as the lock index of
// store.FormatLockEntries, an entry per locked message, and sets that format
// version: a store as the release before grants left it.
func DowngradeLockIndex(m *Machine) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	b := m.db.Pebble().NewBatch()
	defer b.Close()
	for k := range m.entities {
		err := store.EachGrant(m.db, k, func(until int64, sub partitionpb.SubQueue, base uint64, seqs []uint64) error {
			if err := b.Delete(store.LockKey(k, until, sub, base), nil); err != nil {
				return err
			}
			for _, seq := range seqs {
				if err := store.SetSealed(b, store.LockKey(k, until, sub, seq), nil); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	if err := b.Set(store.KeyFormat, store.Seal(store.KeyFormat, binary.BigEndian.AppendUint64(nil, store.FormatLockEntries)), nil); err != nil {
		return err
	}
	return b.Commit(pebble.NoSync)
}

// LockGrants counts the lock grant records of an entity partition.
func LockGrants(m *Machine, id uint64, part uint32) (int, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	it, err := store.PrefixIter(m.db, store.KindPrefix(ekey{ID: id, Part: part}, store.KindLock))
	if err != nil {
		return 0, err
	}
	n := 0
	for valid := it.First(); valid; valid = it.Next() {
		n++
	}
	return n, store.CloseIter(it, it.Error())
}

// NewMessageSections is newMessageSections, for FuzzNewMessageSections.
var NewMessageSections = newMessageSections

// BlobRecords counts the blob chunks and staged records of an entity
// partition (blobs.go).
func BlobRecords(m *Machine, id uint64, part uint32) (chunks, staged int, err error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	k := ekey{ID: id, Part: part}
	for _, c := range []struct {
		kind byte
		n    *int
	}{{store.KindBlob, &chunks}, {store.KindStaged, &staged}} {
		it, err := store.PrefixIter(m.db, store.KindPrefix(k, c.kind))
		if err != nil {
			return 0, 0, err
		}
		for valid := it.First(); valid; valid = it.Next() {
			*c.n++
		}
		if err := store.CloseIter(it, it.Error()); err != nil {
			return 0, 0, err
		}
	}
	return chunks, staged, nil
}

// HandOut is a stored message as a result carries it.
func HandOut(m *partitionpb.StoredMessage) *partitionpb.Message { return handOut(m) }

// PlanCounts says how many Enqueues to topics m applied with the leader's
// plan taken, and how many with a plan it found stale (plan.go).
func PlanCounts(m *Machine) (taken, stale uint64) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.plans.taken, m.plans.stale
}

// CutBody is cutBody (bodycut.go).
func CutBody(bare []byte, prefix int) ([]byte, bool) { return cutBody(bare, prefix) }

// CutHead is cutHead (bodycut.go).
func CutHead(head []byte, complete bool, prefix int) ([]byte, bool, bool) {
	return cutHead(head, complete, prefix)
}
