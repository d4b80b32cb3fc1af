package partition

import (
	"fmt"

	"github.com/quorumbus/quorumbus/partition/store"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// ---------------------------------------------------------------------------
// Writing messages. Every change of a message goes through add, remove or
// update, which keep its two records (store/doc.go), its index entries and the
// counters in step. Messages read from the store carry no sections unless
// withBody added them; only add writes sections.

// add stores a new message, sections and all, under a sequence number
// its sub-queue has not used (its state record is a new one: PutNewState).
// When like is true, m differs from the message added last in its
// sequence number alone, and its record is that one's (PutNewCopy).
func (a *applier) add(e *entity, m *partitionpb.StoredMessage, like bool) error {
	m.Size = messageSize(m)
	if m.BodyIndex == 0 {
		if err := a.b.PutBody(e.key, m); err != nil {
			return err
		}
	}
	put := a.b.PutNewState
	if like {
		put = a.b.PutNewCopy
	}
	if err := put(e.key, m); err != nil {
		return err
	}
	return a.indexed(e, m)
}

// putState writes the state record of m, which the caller has taken out of
// the indexes and counters, and puts it back into them.
func (a *applier) putState(e *entity, m *partitionpb.StoredMessage) error {
	if err := a.b.PutState(e.key, m); err != nil {
		return err
	}
	return a.indexed(e, m)
}

// indexed puts m, whose state record was just written, into its entity's
// indexes and counters.
func (a *applier) indexed(e *entity, m *partitionpb.StoredMessage) error {
	s := store.SlotOf(m)
	if err := a.index(e, s, true); err != nil {
		return err
	}
	a.count(e, s, +1)
	a.dirty[e.key] = true
	return nil
}

// lockRecord locks the available message in slot old, whose state record
// is p: it writes p with the lock token and locked-until put in, and moves
// the message to its locked slot (what update does, without decoding the
// record and encoding it again).
//
// The record it writes is the one the encoder would write for the locked
// message, byte for byte (store.AppendLocked), so every replica writes the same
// bytes whichever way it locks. A replica that does not answer the batch
// (its Lock results carry no messages) therefore never decodes the
// messages it locks: decoding and encoding each message locked was a
// large share of the CPU a receive costs, most of it on the replicas
// whose results nobody reads. An available message has no lock
// fields (unlock clears both, and the encoder leaves zero fields out); one
// that has is locked the long way.
func (a *applier) lockRecord(e *entity, old store.Slot, p, token []byte, until int64) error {
	if old.Until != 0 || old.Locked || until == 0 {
		return a.lockWhole(e, old, p, token, until)
	}
	v, ok := a.b.LockedRecord(p, token, until)
	if !ok {
		return a.lockWhole(e, old, p, token, until)
	}
	if err := a.index(e, old, false); err != nil {
		return err
	}
	a.count(e, old, -1)
	if err := a.b.PutLocked(e.key, old, v); err != nil {
		return err
	}
	s := old
	s.Locked, s.Until = true, until
	if err := a.index(e, s, true); err != nil {
		return err
	}
	a.count(e, s, +1)
	a.dirty[e.key] = true
	return nil
}

// lockWhole locks the long way: decode, then update.
func (a *applier) lockWhole(e *entity, old store.Slot, p, token []byte, until int64) error {
	m, err := store.DecodeMessageState(e.key, old.Sub, old.Seq, p)
	if err != nil {
		return err
	}
	m.LockToken, m.LockedUntilMs = token, until
	return a.update(e, old, m)
}

// remove deletes the message in slot s.
func (a *applier) remove(e *entity, s store.Slot) error {
	if err := a.unslot(e, s); err != nil {
		return err
	}
	if len(s.Blob) > 0 {
		var err error
		if s.BlobEntity != 0 {
			err = a.b.ReleaseSharedBlob(e.key, s.BlobEntity, s.Blob, 1, true)
		} else {
			err = a.dropBlob(e, s.Blob)
		}
		if err != nil {
			return err
		}
	}
	if s.InLog {
		return nil // no body record (logbodies.go)
	}
	return a.b.DeleteBody(e.key, s.Sub, s.Seq)
}

// unslot deletes the state record of the message in slot s and takes it
// out of the indexes and counters.
func (a *applier) unslot(e *entity, s store.Slot) error {
	if err := a.index(e, s, false); err != nil {
		return err
	}
	if err := a.b.DeleteState(e.key, s); err != nil {
		return err
	}
	a.count(e, s, -1)
	a.dirty[e.key] = true
	return nil
}

// update replaces the state of the message that sat in slot old by m's.
// When m has moved (to another sub-queue, or to a new sequence number) its
// body record moves with it, unread (a body in the Raft log is named by
// the state record, which moves anyway).
func (a *applier) update(e *entity, old store.Slot, m *partitionpb.StoredMessage) error {
	if old.Sub != m.SubQueue || old.Seq != m.SequenceNumber {
		if !old.InLog {
			if err := a.b.MoveBody(e.key, old.Sub, old.Seq, m.SubQueue, m.SequenceNumber); err != nil {
				return err
			}
		}
		if err := a.unslot(e, old); err != nil {
			return err
		}
	} else {
		if err := a.index(e, old, false); err != nil {
			return err
		}
		a.count(e, old, -1)
	}
	return a.putState(e, m)
}

// withBody reads the sections of m, which is about to be returned in a
// result, when this replica answers the batch (see Batch.proposer).
func (a *applier) withBody(e *entity, m *partitionpb.StoredMessage) error {
	if !a.bodies {
		return nil
	}
	r, err := a.b.ReadView()
	if err != nil {
		return err
	}
	return readBody(r, a.logs, e.key, m)
}

// index sets (or deletes) the index entries of a message in slot s.
func (a *applier) index(e *entity, s store.Slot, set bool) error {
	if !set && s.Sub == partitionpb.SubQueue_SUB_QUEUE_MAIN && s.Seq >= e.fresh {
		e.freshLeft = false // a fresh message changes or goes
	}
	session := e.inSession(s)
	var dAvail, dHeld, dParked int64
	if s.Available() {
		if set {
			a.woken[wakeKey{e.key, s.Sub}] = true
		}
		if session {
			if err := a.b.SetSessionEntry(e.key, store.SessionStream, s.Sub, s.Session, s.Seq, set); err != nil {
				return err
			}
			dAvail = 1
		} else if e.indexedAvailable(s) {
			if set {
				e.availHead[s.Sub] = min(e.availHead[s.Sub], s.Seq)
			}
			if err := a.b.SetAvailable(e.key, s.Sub, s.Seq, set); err != nil {
				return err
			}
		}
	}
	if s.Locked {
		a.locks[e.key] = true
		if err := a.b.MarkLock(&e.locks, e.key, s, set); err != nil {
			return err
		}
		if session {
			if err := a.b.SetSessionEntry(e.key, store.SessionHeld, s.Sub, s.Session, s.Seq, set); err != nil {
				return err
			}
			dHeld = 1
		}
	}
	if session && !s.Available() && !s.Locked {
		if err := a.b.SetSessionEntry(e.key, store.SessionParked, s.Sub, s.Session, s.Seq, set); err != nil {
			return err
		}
		dParked = 1
	}
	if s.State == partitionpb.MessageState_MESSAGE_STATE_SCHEDULED {
		a.scheds[e.key] = true
		if err := a.b.SetDue(&e.sched, s.At, s.Seq, set); err != nil {
			return err
		}
	}
	if s.Expiring() && !session {
		a.exps[e.key] = true
		if err := a.b.SetDue(&e.exp, s.Exp, s.Seq, set); err != nil {
			return err
		}
	}
	if dAvail != 0 || dHeld != 0 || dParked != 0 {
		if !set {
			dAvail, dHeld, dParked = -dAvail, -dHeld, -dParked
		}
		return a.countSessionMessage(e, s.Session, s.Seq, dAvail, dHeld, dParked)
	}
	return nil
}

func unlock(m *partitionpb.StoredMessage) {
	m.LockToken = nil
	m.LockedUntilMs = 0
}

// deadLetter turns m into a dead-lettered message (update stores it).
func deadLetter(e *entity, m *partitionpb.StoredMessage, reason, description string) {
	unlock(m)
	m.SubQueue = partitionpb.SubQueue_SUB_QUEUE_DEAD_LETTER
	m.State = partitionpb.MessageState_MESSAGE_STATE_ACTIVE
	m.DeadLetterReason = reason
	m.DeadLetterDescription = description
	m.DeadLetterSource = e.cfg.Name
}

// countDelivery counts a failed delivery of an unlocked message and
// dead-letters it in the main sub-queue once it reached max_delivery_count.
func countDelivery(e *entity, m *partitionpb.StoredMessage) {
	m.DeliveryCount++
	if m.SubQueue == partitionpb.SubQueue_SUB_QUEUE_MAIN && m.DeliveryCount >= e.cfg.MaxDeliveryCount {
		deadLetter(e, m, ReasonMaxDeliveryCount,
			fmt.Sprintf("Message could not be consumed after %d delivery attempts.", e.cfg.MaxDeliveryCount))
	}
}

// handOut is message m as a result carries it: what a front-end renders,
// and nothing of where the store keeps its body or what it counts it as
// (the results of every replica are the same whichever way each keeps
// the body: in the Raft log, a body record or a blob).
func handOut(m *partitionpb.StoredMessage) *partitionpb.Message {
	return &partitionpb.Message{
		SequenceNumber:         m.SequenceNumber,
		EnqueuedTimeMs:         m.EnqueuedTimeMs,
		DeliveryCount:          m.DeliveryCount,
		State:                  m.State,
		SubQueue:               m.SubQueue,
		LockToken:              m.LockToken,
		LockedUntilMs:          m.LockedUntilMs,
		ExpiresAtMs:            m.ExpiresAtMs,
		ScheduledEnqueueTimeMs: m.ScheduledEnqueueTimeMs,
		MessageId:              m.MessageId,
		SessionId:              m.SessionId,
		PartitionKey:           m.PartitionKey,
		Header:                 m.Header,
		Annotations:            m.Annotations,
		Bare:                   m.Bare,
		DeadLetterReason:       m.DeadLetterReason,
		DeadLetterDescription:  m.DeadLetterDescription,
		DeadLetterSource:       m.DeadLetterSource,
		TtlMs:                  m.TtlMs,
		ModifiedProperties:     m.ModifiedProperties,
		ActionSet:              m.ActionSet,
		ActionRemoved:          m.ActionRemoved,
		ForwardHops:            m.ForwardHops,
	}
}

// messageCursor is a store.Cursor whose bodies come from wherever they
// are: a body record, the Raft log (logbodies.go) or a staged blob
// (blobs.go).
type messageCursor struct {
	store.Cursor
	k    ekey
	logs *logReader   // bodies kept in the Raft log, if any
	r    store.Reader // where blobs are read
}

func (a *applier) newMessageCursor(e *entity, sub partitionpb.SubQueue, from uint64, bodies bool) (*messageCursor, error) {
	r, err := a.b.ReadView()
	if err != nil {
		return nil, err
	}
	c := &messageCursor{k: e.key, logs: a.logs, r: r}
	if err := a.b.OpenCursor(&c.Cursor, e.key, sub, from, bodies); err != nil {
		return nil, err
	}
	return c, nil
}

// body fills in m's sections, if the cursor reads bodies.
func (c *messageCursor) body(m *partitionpb.StoredMessage) error {
	if !c.ReadsBodies() {
		return nil
	}
	if m.BodyIndex != 0 {
		return c.logs.sections(m)
	}
	if err := c.Body(m); err != nil || len(m.BodyBlob) == 0 {
		return err
	}
	return readBlob(c.r, c.k, m)
}

// close closes the cursor and returns the first of err and its errors; a
// nil cursor (one never made) returns err.
func (c *messageCursor) close(err error) error {
	if c == nil {
		return err
	}
	return c.Close(err)
}
