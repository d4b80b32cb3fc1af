package partition

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/cockroachdb/pebble/v2"

	"github.com/quorumbus/quorumbus/partition/store"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// This file holds the commands of scheduled, deferred and expiring
// messages and the duplicate-detection index. Every time they compare is
// the batch's now_ms.

// errStop ends a scan early without failing.
var errStop = errors.New("stop")

// scanDue calls f, in index order, for the entries of e's index x (whose
// keys are kindPrefix, at(8), seq(8)) with a time <= now, until f returns
// errStop or the entries run out. Writes by f do not disturb the scan.
func (a *applier) scanDue(e *entity, x *timeIndex, kind byte, f func(at int64, seq uint64) error) error {
	if x.floorTime() > a.now {
		return nil
	}
	upper := x.end()
	if a.now < math.MaxInt64 {
		upper = binary.BigEndian.AppendUint64(append([]byte(nil), x.prefix...), store.TimeBits(a.now+1))
	}
	it, err := a.b.NewIter(&pebble.IterOptions{LowerBound: x.floor, UpperBound: upper})
	if err != nil {
		return fmt.Errorf("partition: iterator: %w", err)
	}
	for valid := it.First(); valid; valid = it.Next() {
		if _, err := store.IterValue(it); err != nil {
			return store.CloseIter(it, err)
		}
		at, seq, ok := store.ParseTimeSeqKey(it.Key(), kind)
		if !ok {
			return store.CloseIter(it, fmt.Errorf("%w: index key %x", ErrCorrupt, it.Key()))
		}
		if err := f(at, seq); err != nil {
			if errors.Is(err, errStop) {
				break
			}
			return store.CloseIter(it, err)
		}
	}
	return store.CloseIter(it, it.Error())
}

// mainMessage reads a message of e's main sub-queue that an index names.
func (a *applier) mainMessage(e *entity, seq uint64) (*partitionpb.StoredMessage, error) {
	m, err := store.GetState(a.b, store.MessageKey(e.key, partitionpb.SubQueue_SUB_QUEUE_MAIN, seq))
	if err != nil {
		return nil, err
	}
	if m == nil {
		return nil, fmt.Errorf("%w: %s: index names message %d, which is not there", ErrCorrupt, e.key, seq)
	}
	return m, nil
}

// expiresAt is when a message that becomes active at from expires: 0 for
// never.
func expiresAt(from, ttl int64) int64 {
	if ttl > 0 && from <= math.MaxInt64-ttl {
		return from + ttl
	}
	return 0
}

// activateScheduled makes due scheduled messages active, entity by entity
// in key order, earliest first, within Limits.Activated and ActivateBytes.
// Each is appended to its queue as if sent now: a new sequence number,
// enqueued now, its time to live counting from now. Its old (scheduled)
// sequence number is gone.
func (a *applier) activateScheduled() (*partitionpb.Result, error) {
	count, bytes := 0, int64(0)
	for _, k := range sortedKeys(a.entities) {
		if count >= a.lim.Activated || count > 0 && bytes >= a.lim.ActivateBytes {
			break
		}
		e := a.entities[k]
		err := a.scanDue(e, &e.sched, store.KindScheduled, func(at int64, seq uint64) error {
			if count >= a.lim.Activated || count > 0 && bytes >= a.lim.ActivateBytes {
				return errStop
			}
			m, err := a.mainMessage(e, seq)
			if err != nil {
				return err
			}
			old := store.SlotOf(m)
			if old.State != partitionpb.MessageState_MESSAGE_STATE_SCHEDULED || old.At != at {
				return fmt.Errorf("%w: %s: message %d is indexed scheduled at %d but is not", ErrCorrupt, k, seq, at)
			}
			m.SequenceNumber = e.nextSequence()
			m.EnqueuedTimeMs = a.now
			m.State = partitionpb.MessageState_MESSAGE_STATE_ACTIVE
			m.ExpiresAtMs = expiresAt(a.now, m.TtlMs)
			if err := a.update(e, old, m); err != nil {
				return err
			}
			count++
			bytes += old.Size
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return okResult(), nil
}

// expireMessages ends the unlocked main-queue messages whose time to live
// ran out (the expiry index), entity by entity in key order, earliest
// first, at most Limits.ExpiredMessages: they are removed, or dead-lettered
// where the entity dead-letters on expiration.
func (a *applier) expireMessages() (*partitionpb.Result, error) {
	budget := a.lim.ExpiredMessages
	for _, k := range sortedKeys(a.entities) {
		if budget == 0 {
			break
		}
		e := a.entities[k]
		err := a.scanDue(e, &e.exp, store.KindExpiry, func(at int64, seq uint64) error {
			if budget == 0 {
				return errStop
			}
			m, err := a.mainMessage(e, seq)
			if err != nil {
				return err
			}
			old := store.SlotOf(m)
			if !old.Expiring() || old.Exp != at {
				return fmt.Errorf("%w: %s: message %d is indexed expiring at %d but is not", ErrCorrupt, k, seq, at)
			}
			budget--
			return a.expire(e, old, m)
		})
		if err != nil {
			return nil, err
		}
	}
	return okResult(), nil
}

// expire ends an expired message that sat in store.Slot old.
func (a *applier) expire(e *entity, old store.Slot, m *partitionpb.StoredMessage) error {
	if e.cfg.DeadLetteringOnExpiration {
		deadLetter(e, m, ReasonTTLExpired, "The message expired and was dead lettered.")
		return a.update(e, old, m)
	}
	return a.remove(e, old)
}

// uniqueSeqs returns seqs without repeats, in first-seen order, or
// ErrInvalid when there are too many.
func uniqueSeqs(seqs []uint64) ([]uint64, error) {
	if len(seqs) > MaxSequenceNumbers {
		return nil, fmt.Errorf("%w: %d sequence numbers, at most %d", ErrInvalid, len(seqs), MaxSequenceNumbers)
	}
	seen := make(map[uint64]bool, len(seqs))
	out := make([]uint64, 0, len(seqs))
	for _, s := range seqs {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out, nil
}

// cancelScheduled deletes the scheduled messages the sequence numbers
// name and ignores the numbers that name none.
func (a *applier) cancelScheduled(c *partitionpb.CancelScheduled) (*partitionpb.Result, error) {
	e, err := a.entity(c.EntityId, c.Partition)
	if err != nil {
		return nil, err
	}
	seqs, err := uniqueSeqs(c.SequenceNumbers)
	if err != nil {
		return nil, err
	}
	if isTopic(e.cfg) {
		// The copies are in the subscriptions, under their own sequence
		// numbers (topicsched.go).
		seqs = slices.DeleteFunc(seqs, func(seq uint64) bool { return partitionpb.PartitionOfSequence(seq) != e.key.Part })
		return okResult(), a.cancelTopicScheduled(e, seqs)
	}
	for _, seq := range seqs {
		if partitionpb.PartitionOfSequence(seq) != e.key.Part {
			continue
		}
		m, err := store.GetState(a.b, store.MessageKey(e.key, partitionpb.SubQueue_SUB_QUEUE_MAIN, seq))
		if err != nil {
			return nil, err
		}
		if m == nil || m.State != partitionpb.MessageState_MESSAGE_STATE_SCHEDULED {
			continue
		}
		if err := a.remove(e, store.SlotOf(m)); err != nil {
			return nil, err
		}
	}
	return okResult(), nil
}

// ErrMessageNotFound rejects a LockBySequence that found none of its
// messages. It is an ErrInvalid (RESULT_INVALID) whose description says
// "message not found".
var ErrMessageNotFound = fmt.Errorf("%w: message not found", ErrInvalid)

// lockBySequence locks (or removes) deferred messages by sequence number.
// A number that names no unlocked, unexpired deferred message of the
// sub-queue is left out of the result; if none is found the command is
// rejected with ErrMessageNotFound.
func (a *applier) lockBySequence(c *partitionpb.LockBySequence) (*partitionpb.Result, error) {
	e, err := a.receiving(c.EntityId, c.Partition, c.SubQueue)
	if err != nil {
		return nil, err
	}
	if err := checkTokenSeed(c.ReceiveAndDelete, c.TokenSeed); err != nil {
		return nil, err
	}
	seqs, err := uniqueSeqs(c.SequenceNumbers)
	if err != nil {
		return nil, err
	}
	// Deferred messages of a session are received under its lock, and
	// held until it ends.
	until := a.now + e.cfg.LockDurationMs
	session := e.cfg.RequiresSession && c.SubQueue == partitionpb.SubQueue_SUB_QUEUE_MAIN
	if session {
		if len(c.SessionToken) == 0 {
			return nil, fmt.Errorf("%w: %s requires sessions: receive deferred messages from an accepted session", ErrInvalid, e.cfg.Name)
		}
		s, err := a.heldSession(e, c.SessionId, c.SessionToken)
		if err != nil {
			return nil, err
		}
		until = s.until
	}
	r := okResult()
	for _, seq := range seqs {
		if partitionpb.PartitionOfSequence(seq) != e.key.Part {
			continue
		}
		m, err := store.GetState(a.b, store.MessageKey(e.key, c.SubQueue, seq))
		if err != nil {
			return nil, err
		}
		if m == nil || m.State != partitionpb.MessageState_MESSAGE_STATE_DEFERRED || len(m.LockToken) > 0 ||
			c.SubQueue == partitionpb.SubQueue_SUB_QUEUE_MAIN && expired(m, a.now) ||
			session && m.SessionId != c.SessionId {
			continue
		}
		old := store.SlotOf(m)
		if c.ReceiveAndDelete {
			if err = a.withBody(e, m); err == nil { // before the body goes
				err = a.remove(e, old)
			}
		} else {
			m.LockToken = lockToken(m.SequenceNumber, c.TokenSeed)
			m.LockedUntilMs = until
			if a.recordLocks {
				a.handedOut = append(a.handedOut, seq)
			}
			if err = a.update(e, old, m); err == nil {
				err = a.withBody(e, m)
			}
		}
		if err != nil {
			return nil, err
		}
		r.Messages = append(r.Messages, m)
	}
	if len(r.Messages) == 0 {
		return nil, fmt.Errorf("%w: no deferred message with sequence numbers %v in %s", ErrMessageNotFound, c.SequenceNumbers, c.SubQueue)
	}
	return r, nil
}

// ---------------------------------------------------------------------------
// Duplicate detection. The dedup entry of a message id holds when it was
// first accepted and its sequence number; a message with the same id
// within the entity's window is a duplicate. A second index by time lets
// Enqueue prune stale entries as it goes.

type dedupEntry struct {
	at  int64
	seq uint64
	ok  bool // found in the store
}

// dedupEntry returns the dedup entry of id, or nil.
func (a *applier) dedupEntry(e *entity, id string) (*dedupEntry, error) {
	p, found, err := store.Get(a.b, store.DedupKey(e.key, id))
	if err != nil || !found {
		return nil, err
	}
	if len(p) != 16 {
		return nil, fmt.Errorf("%w: %s: dedup entry of %d bytes", ErrCorrupt, e.key, len(p))
	}
	return &dedupEntry{at: store.TimeFromBits(binary.BigEndian.Uint64(p)), seq: binary.BigEndian.Uint64(p[8:]), ok: true}, nil
}

// recordDedup records id as accepted now with sequence number seq,
// replacing old (a stale entry) if old.ok.
func (a *applier) recordDedup(e *entity, id string, seq uint64, old *dedupEntry) error {
	if old.ok {
		if err := a.b.Delete(store.DedupTimeKey(e.key, old.at, id), nil); err != nil {
			return err
		}
	}
	v := binary.BigEndian.AppendUint64(nil, store.TimeBits(a.now))
	v = binary.BigEndian.AppendUint64(v, seq)
	k := store.DedupKey(e.key, id)
	if err := a.b.Set(k, store.Seal(k, v), nil); err != nil {
		return err
	}
	tk := store.DedupTimeKey(e.key, a.now, id)
	if err := a.b.Set(tk, store.Seal(tk, nil), nil); err != nil {
		return err
	}
	e.dedupFloor = min(e.dedupFloor, a.now)
	return nil
}

// pruneDedup deletes up to budget dedup entries older than the entity's
// window, oldest first (pruneByTime).
func (a *applier) pruneDedup(e *entity, budget int) error {
	window := e.cfg.DuplicateDetectionWindowMs
	if window <= 0 || a.now < math.MinInt64+window {
		return nil
	}
	prefix := store.KindPrefix(e.key, store.KindDedupTime)
	// Plain deletes: recordDedup overwrites the record of an id seen again
	// after its window, so it is not written once between deletes.
	del := func(key []byte) error { return a.b.Delete(key, nil) }
	return a.pruneByTime(prefix, a.now-window, &e.dedupFloor, budget, del, func(id []byte) []byte {
		return store.DedupKey(e.key, string(id))
	})
}

// pruneByTime deletes, oldest first, up to budget entries of a time index
// (keys: prefix, a time, an id) at or before cutoff, each with the record
// recordKey names for its id, by del. *floor is the time below which the index
// holds nothing: the scan starts there and is skipped while floor is past
// cutoff, and afterwards floor is the oldest entry left (or past every
// time, when none is), so that the entries that follow skip the scan until
// that entry falls out of the window. A scan per entry over an empty
// range, with an iterator over every level of the store, cost 4% of the
// dev cluster's CPU under load.
func (a *applier) pruneByTime(prefix []byte, cutoff int64, floor *int64, budget int, del func([]byte) error, recordKey func(id []byte) []byte) error {
	if *floor > cutoff {
		return nil
	}
	lower := binary.BigEndian.AppendUint64(append([]byte(nil), prefix...), store.TimeBits(*floor))
	it, err := a.b.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: store.PrefixEnd(prefix)})
	if err != nil {
		return fmt.Errorf("partition: iterator: %w", err)
	}
	next := int64(math.MaxInt64) // unless an entry is left
	for valid := it.First(); valid; valid = it.Next() {
		key := it.Key()
		if len(key) < len(prefix)+8 {
			return store.CloseIter(it, fmt.Errorf("%w: time index key %x", ErrCorrupt, key))
		}
		at := store.TimeFromBits(binary.BigEndian.Uint64(key[len(prefix):]))
		if at > cutoff || budget == 0 {
			next = at
			break
		}
		budget--
		if err := del(recordKey(key[len(prefix)+8:])); err != nil {
			return store.CloseIter(it, err)
		}
		if err := del(append([]byte(nil), key...)); err != nil {
			return store.CloseIter(it, err)
		}
	}
	if err := store.CloseIter(it, it.Error()); err != nil {
		return err
	}
	*floor = next
	return nil
}
