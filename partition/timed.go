package partition

import (
	"fmt"
	"math"
	"slices"

	"github.com/quorumbus/quorumbus/partition/store"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// This file holds the commands of scheduled, deferred and expiring
// messages and the duplicate-detection index. Every time they compare is
// the batch's now_ms.

// mainMessage reads a message of e's main sub-queue that an index names.
func (a *applier) mainMessage(e *entity, seq uint64) (*partitionpb.StoredMessage, error) {
	m, err := a.b.State(e.key, partitionpb.SubQueue_SUB_QUEUE_MAIN, seq)
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
		err := a.b.Due(&e.sched, a.now, func(at int64, seq uint64) (bool, error) {
			if count >= a.lim.Activated || count > 0 && bytes >= a.lim.ActivateBytes {
				return false, nil
			}
			m, err := a.mainMessage(e, seq)
			if err != nil {
				return false, err
			}
			old := store.SlotOf(m)
			if old.State != partitionpb.MessageState_MESSAGE_STATE_SCHEDULED || old.At != at {
				return false, fmt.Errorf("%w: %s: message %d is indexed scheduled at %d but is not", ErrCorrupt, k, seq, at)
			}
			m.SequenceNumber = e.nextSequence()
			m.EnqueuedTimeMs = a.now
			m.State = partitionpb.MessageState_MESSAGE_STATE_ACTIVE
			m.ExpiresAtMs = expiresAt(a.now, m.TtlMs)
			if err := a.update(e, old, m); err != nil {
				return false, err
			}
			count++
			bytes += old.Size
			return true, nil
		})
		if err != nil {
			return nil, err
		}
	}
	// The topics' records of the messages whose copies came due
	// (topiccounts.go).
	if err := a.pruneDueTopicScheduled(a.lim.Activated); err != nil {
		return nil, err
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
		err := a.b.Due(&e.exp, a.now, func(at int64, seq uint64) (bool, error) {
			if budget == 0 {
				return false, nil
			}
			m, err := a.mainMessage(e, seq)
			if err != nil {
				return false, err
			}
			old := store.SlotOf(m)
			if !old.Expiring() || old.Exp != at {
				return false, fmt.Errorf("%w: %s: message %d is indexed expiring at %d but is not", ErrCorrupt, k, seq, at)
			}
			budget--
			return true, a.expire(e, old, m)
		})
		if err != nil {
			return nil, err
		}
	}
	return okResult(), nil
}

// expire ends an expired message that sat in slot old.
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
		m, err := a.b.State(e.key, partitionpb.SubQueue_SUB_QUEUE_MAIN, seq)
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
		until = s.Until
	}
	r := okResult()
	for _, seq := range seqs {
		if partitionpb.PartitionOfSequence(seq) != e.key.Part {
			continue
		}
		m, err := a.b.State(e.key, c.SubQueue, seq)
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
		r.Messages = append(r.Messages, handOut(m))
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
	s, found, err := a.b.Dedup(e.key, id)
	if err != nil || !found {
		return nil, err
	}
	return &dedupEntry{at: s.At, seq: s.Seq, ok: true}, nil
}

// recordDedup records id as accepted now with sequence number seq,
// replacing old (a stale entry) if old.ok.
func (a *applier) recordDedup(e *entity, id string, seq uint64, old *dedupEntry) error {
	var replaced *store.Stamp
	if old.ok {
		replaced = &store.Stamp{At: old.at, Seq: old.seq}
	}
	if err := a.b.PutDedup(e.key, id, store.Stamp{At: a.now, Seq: seq}, replaced); err != nil {
		return err
	}
	e.dedupFloor = min(e.dedupFloor, a.now)
	return nil
}

// pruneDedup deletes up to budget dedup entries older than the entity's
// window, oldest first.
func (a *applier) pruneDedup(e *entity, budget int) error {
	window := e.cfg.DuplicateDetectionWindowMs
	if window <= 0 || a.now < math.MinInt64+window {
		return nil
	}
	return a.b.PruneDedup(e.key, a.now-window, &e.dedupFloor, budget)
}
