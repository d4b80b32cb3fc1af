package partition

import (
	"fmt"
	"math"

	"github.com/quorumbus/quorumbus/partition/filter"
	"github.com/quorumbus/quorumbus/partition/rules"
	"github.com/quorumbus/quorumbus/partition/store"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// Admin operations (issue 23): purge and re-drive. Both are ordinary
// commands of bounded size: an operator's purge of a million messages is
// many Purge entries, each deleting at most MaxPurgeCount, so no entry
// and no store batch grows with the backlog, and a leader that dies
// between two entries leaves every message either deleted or in place. A
// re-drive moves a message from the dead-letter sub-queue to the main
// one within one command (one entry, one store batch): the copy and the
// removal of the original commit together or not at all.

// Bounds of one admin command. They are part of the replicated behaviour:
// change them only with a new batch format.
const (
	// MaxPurgeCount caps the messages one Purge deletes.
	MaxPurgeCount = 5000
	// MaxPurgeScan caps the state records one Purge looks at, deleted or
	// not (those enqueued after its bound are passed over).
	MaxPurgeScan = 4 * MaxPurgeCount
	// MaxRedriveCount caps the candidates of one Redrive.
	MaxRedriveCount = 1000
	// MaxRedriveFilterBytes caps a Redrive's SQL filter.
	MaxRedriveFilterBytes = 4096
)

// purge deletes, in sequence order, the messages of a sub-queue enqueued
// before the command's bound (see partitionpb.Purge).
func (a *applier) purge(c *partitionpb.Purge) (*partitionpb.Result, error) {
	e, err := a.entity(c.EntityId, c.Partition)
	if err != nil {
		return nil, err
	}
	if err := checkSubQueue(c.SubQueue); err != nil {
		return nil, err
	}
	want := int(min(c.MaxCount, MaxPurgeCount))
	if want == 0 {
		return nil, fmt.Errorf("%w: purge of 0 messages", ErrInvalid)
	}
	cur, err := a.b.Cursor(e.key, c.SubQueue, c.FromSequenceNumber, false)
	if err != nil {
		return nil, err
	}
	// Collected first, removed after: the slots are all the removal needs.
	var doomed []store.Slot
	r := okResult()
	scanned := 0
	for valid := cur.First(); valid; valid = cur.Next() {
		if len(doomed) == want || scanned == MaxPurgeScan {
			r.More = true
			m, err := cur.Message()
			if err != nil {
				return nil, cur.Close(err)
			}
			r.NextSequenceNumber = m.SequenceNumber
			break
		}
		scanned++
		m, err := cur.Message()
		if err != nil {
			return nil, cur.Close(err)
		}
		if c.BeforeEnqueuedTimeMs != 0 && m.EnqueuedTimeMs >= c.BeforeEnqueuedTimeMs {
			continue
		}
		doomed = append(doomed, store.SlotOf(m))
	}
	if err := cur.Close(cur.Error()); err != nil {
		return nil, err
	}
	r.SequenceNumbers = make([]uint64, 0, len(doomed))
	for _, s := range doomed {
		if err := a.remove(e, s); err != nil {
			return nil, err
		}
		r.SequenceNumbers = append(r.SequenceNumbers, s.Seq)
	}
	return r, nil
}

// redrive moves dead-lettered messages back to the main sub-queue (see
// partitionpb.Redrive).
func (a *applier) redrive(c *partitionpb.Redrive) (*partitionpb.Result, error) {
	e, err := a.entity(c.EntityId, c.Partition)
	if err != nil {
		return nil, err
	}
	if isTopic(e.cfg) {
		return nil, fmt.Errorf("%w: %s is a topic, which keeps no messages; re-drive its subscriptions", ErrInvalid, e.cfg.Name)
	}
	if err := e.checkSend(); err != nil {
		return nil, err
	}
	if len(c.Candidates) > MaxRedriveCount {
		return nil, fmt.Errorf("%w: %d candidates, at most %d", ErrInvalid, len(c.Candidates), MaxRedriveCount)
	}
	var f filter.Filter
	if c.SqlFilter != "" {
		if len(c.SqlFilter) > MaxRedriveFilterBytes {
			return nil, fmt.Errorf("%w: filter of %d bytes, at most %d", ErrInvalid, len(c.SqlFilter), MaxRedriveFilterBytes)
		}
		if f, err = filter.CompileSQL(c.SqlFilter, nil); err != nil {
			return nil, fmt.Errorf("%w: filter: %v", ErrInvalid, err)
		}
	}
	seen := make(map[uint64]bool, len(c.Candidates))
	r := &partitionpb.Result{SequenceNumbers: make([]uint64, 0, len(c.Candidates))}
	for _, cand := range c.Candidates {
		if seen[cand.SequenceNumber] {
			continue
		}
		seen[cand.SequenceNumber] = true
		m, err := a.b.State(e.key, partitionpb.SubQueue_SUB_QUEUE_DEAD_LETTER, cand.SequenceNumber)
		if err != nil {
			return nil, err
		}
		if m == nil || len(m.LockToken) > 0 {
			continue // gone (moved, received, purged) or being received
		}
		if f != nil {
			ok, err := f.Match(redriveView(m, cand.View))
			if err != nil || !ok {
				continue // an evaluation error matches nothing, as in a rule
			}
		}
		old := store.SlotOf(m)
		undeadLetter(e, m, a.now)
		if err := a.update(e, old, m); err != nil {
			return nil, err
		}
		r.SequenceNumbers = append(r.SequenceNumbers, old.Seq)
	}
	return r, nil
}

// undeadLetter turns dead-lettered m into a message of the main queue as
// if it had just been sent again (update stores it).
func undeadLetter(e *entity, m *partitionpb.StoredMessage, now int64) {
	unlock(m)
	m.SequenceNumber = e.nextSequence()
	m.SubQueue = partitionpb.SubQueue_SUB_QUEUE_MAIN
	m.State = partitionpb.MessageState_MESSAGE_STATE_ACTIVE
	m.EnqueuedTimeMs = now
	m.ScheduledEnqueueTimeMs = 0
	m.DeliveryCount = 0
	m.DeadLetterReason, m.DeadLetterDescription, m.DeadLetterSource = "", "", ""
	m.ExpiresAtMs = 0
	if m.TtlMs > 0 && now <= math.MaxInt64-m.TtlMs {
		m.ExpiresAtMs = now + m.TtlMs
	}
}

// redriveView is what a re-drive filter sees of dead-lettered m: its
// stored fields, the caller's view of its properties, and its dead-letter
// reason and description as the application properties a receiver of the
// dead-letter queue reads them as.
func redriveView(m *partitionpb.StoredMessage, v *partitionpb.FilterView) *filter.Message {
	fm := &filter.Message{
		MessageID:        m.MessageId,
		SessionID:        m.SessionId,
		PartitionKey:     m.PartitionKey,
		CorrelationID:    v.GetCorrelationId(),
		To:               v.GetTo(),
		ReplyTo:          v.GetReplyTo(),
		Subject:          v.GetSubject(),
		ContentType:      v.GetContentType(),
		ReplyToSessionID: v.GetReplyToSessionId(),
		DeadLetterSource: m.DeadLetterSource,
		State:            "Active",
		Size:             m.Size,
		DeliveryCount:    int64(m.DeliveryCount),
		SequenceNumber:   int64(m.SequenceNumber),
		EnqueuedTimeUtc:  filter.Timestamp(m.EnqueuedTimeMs),
		TimeToLive:       filter.Duration(m.TtlMs),
		Properties:       make(map[string]any, len(v.GetProperties())+2),
	}
	if m.State == partitionpb.MessageState_MESSAGE_STATE_DEFERRED {
		fm.State = "Deferred"
	}
	for k, rv := range v.GetProperties() {
		if x, err := rules.ValueAny(rv); err == nil {
			fm.Properties[k] = x
		}
	}
	fm.Properties["DeadLetterReason"] = m.DeadLetterReason
	fm.Properties["DeadLetterErrorDescription"] = m.DeadLetterDescription
	return fm
}
