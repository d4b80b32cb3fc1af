package partition

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/quorumbus/quorumbus/partition/store"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// ---------------------------------------------------------------------------
// Writing messages. Every change of a message goes through add, remove or
// update, which keep its two records (store/doc.go), its index entries and the
// counters in step. Messages read from the store carry no sections unless
// withBody added them; only add writes sections.

// add stores a new message, sections and all.
func (a *applier) add(e *entity, m *partitionpb.StoredMessage) error {
	m.Size = messageSize(m)
	if m.BodyIndex == 0 {
		if err := store.SetBody(a.b.Batch, a.seqKey(e, store.KindBody, m.SubQueue, m.SequenceNumber), m); err != nil {
			return err
		}
	}
	return a.putState(e, m)
}

// putState writes the state record of m, which the caller has taken out of
// the indexes and counters, and puts it back into them.
func (a *applier) putState(e *entity, m *partitionpb.StoredMessage) error {
	h, an, bare := m.Header, m.Annotations, m.Bare
	m.Header, m.Annotations, m.Bare = nil, nil, nil
	key := a.seqKey(e, store.KindMessage, m.SubQueue, m.SequenceNumber)
	p, err := store.SetRecord(a.b.Batch, key, m, false)
	m.Header, m.Annotations, m.Bare = h, an, bare
	if err != nil {
		return err
	}
	a.lockedStates.wrote(key, p, len(m.LockToken) > 0)
	s := store.SlotOf(m)
	if err := a.index(e, s, true); err != nil {
		return err
	}
	e.n.add(s, +1)
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
// messages it locks: a Lock's decode and encode of each message were a
// seventh of the dev cluster's CPU when receiving, two thirds of it on
// replicas whose results nobody reads. An available message has no lock
// fields (unlock clears both, and the encoder leaves zero fields out); one
// that has is locked the long way.
func (a *applier) lockRecord(e *entity, old store.Slot, p, token []byte, until int64) error {
	if old.Until != 0 || old.Locked || until == 0 {
		return a.lockWhole(e, old, p, token, until)
	}
	v, ok := store.AppendLocked(a.recBuf[:0], p, token, until)
	if !ok {
		return a.lockWhole(e, old, p, token, until)
	}
	a.recBuf = v
	if err := a.index(e, old, false); err != nil {
		return err
	}
	e.n.add(old, -1)
	key := a.seqKey(e, store.KindMessage, old.Sub, old.Seq)
	if err := store.SetSealed(a.b.Batch, key, v); err != nil {
		return err
	}
	a.lockedStates.wrote(key, v, true)
	s := old
	s.Locked, s.Until = true, until
	if err := a.index(e, s, true); err != nil {
		return err
	}
	e.n.add(s, +1)
	a.dirty[e.key] = true
	return nil
}

// lockWhole locks the long way: decode, then update.
func (a *applier) lockWhole(e *entity, old store.Slot, p, token []byte, until int64) error {
	m, err := store.DecodeState(a.seqKey(e, store.KindMessage, old.Sub, old.Seq), p)
	if err != nil {
		return err
	}
	m.LockToken, m.LockedUntilMs = token, until
	return a.update(e, old, m)
}

// singleDelete deletes a record written once since it was last deleted:
// a body record (written when its message is added or moves, deleted when
// it goes or moves) or an index entry (set when a message enters a slot,
// deleted when it leaves it; update takes the old entries out before it
// puts the new ones in). Pebble drops such a delete together with the
// write it meets, at the first flush or compaction that holds both,
// instead of carrying a tombstone down the levels: a lock's index entry
// and its delete mostly share a memtable and never reach a table. A
// BacklogCycle benchmark compacted 37% fewer bytes per message received.
// A record written twice without a delete between would come back after
// the delete, so state records, which locks and settlements rewrite, are
// deleted with Delete; pebble reports a single delete that meets no write
// or two (Machine.misuse), and TestDeterminism checks that it never does.
func (a *applier) singleDelete(key []byte) error { return a.b.SingleDelete(key, nil) }

// seqKey returns the key of a message's record of the given kind in the
// applier's key buffer, valid until the next call. The batch copies keys.
func (a *applier) seqKey(e *entity, kind byte, sub partitionpb.SubQueue, seq uint64) []byte {
	a.keyBuf = store.AppendSeqKey(a.keyBuf[:0], e.key, kind, sub, seq)
	return a.keyBuf
}

// remove deletes the message in slot s.
func (a *applier) remove(e *entity, s store.Slot) error {
	if err := a.unslot(e, s); err != nil {
		return err
	}
	if len(s.Blob) > 0 {
		var err error
		if s.BlobEntity != 0 {
			err = a.releaseSharedBlob(e.key, s.BlobEntity, s.Blob, 1, true)
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
	return a.singleDelete(a.seqKey(e, store.KindBody, s.Sub, s.Seq))
}

// unslot deletes the state record of the message in slot s and takes it
// out of the indexes and counters.
func (a *applier) unslot(e *entity, s store.Slot) error {
	if err := a.index(e, s, false); err != nil {
		return err
	}
	key := a.seqKey(e, store.KindMessage, s.Sub, s.Seq)
	if err := a.b.Delete(key, nil); err != nil {
		return err
	}
	a.lockedStates.deleted(key)
	e.n.add(s, -1)
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
			if err := a.moveBody(e, old, m.SubQueue, m.SequenceNumber); err != nil {
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
		e.n.add(old, -1)
	}
	return a.putState(e, m)
}

// moveBody moves the body record of the message in slot old to its new
// place, sealed for its new key.
func (a *applier) moveBody(e *entity, old store.Slot, sub partitionpb.SubQueue, seq uint64) error {
	from := store.BodyKey(e.key, old.Sub, old.Seq)
	p, found, err := store.Get(a.b, from)
	if err != nil {
		return err
	}
	if !found {
		return fmt.Errorf("%w: message %d of %s has no body", ErrCorrupt, old.Seq, e.key)
	}
	to := store.BodyKey(e.key, sub, seq)
	if err := a.b.Set(to, store.Seal(to, p), nil); err != nil {
		return err
	}
	return a.singleDelete(from)
}

// withBody reads the sections of m, which is about to be returned in a
// result, when this replica answers the batch (see Batch.proposer).
func (a *applier) withBody(e *entity, m *partitionpb.StoredMessage) error {
	if !a.bodies {
		return nil
	}
	return readBody(a.b, a.logs, e.key, m)
}

// index sets (or deletes) the index entries of a message in slot s.
func (a *applier) index(e *entity, s store.Slot, set bool) error {
	session := e.inSession(s)
	var dAvail, dHeld, dParked int64
	if s.Available() {
		if set {
			a.woken[wakeKey{e.key, s.Sub}] = true
		}
		if session {
			if err := a.b.SetSessionEntry(e.key, store.KindSessionMsg, s.Sub, s.Session, s.Seq, set); err != nil {
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
			if err := a.b.SetSessionEntry(e.key, store.KindSessionHeld, s.Sub, s.Session, s.Seq, set); err != nil {
				return err
			}
			dHeld = 1
		}
	}
	if session && !s.Available() && !s.Locked {
		if err := a.b.SetSessionEntry(e.key, store.KindSessionParked, s.Sub, s.Session, s.Seq, set); err != nil {
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

// messageCursor reads the messages of one sub-queue in ascending sequence
// order, from a state iterator and (when bodies are wanted) a body
// iterator, each moved forward by seeks: a pass over an index or a list of
// tokens in sequence order costs one iterator step per message instead of
// a point read through every level of the store.
type messageCursor struct {
	k      ekey
	state0 []byte // prefix of the sub-queue's state records
	body0  []byte // prefix of its body records
	states *pebble.Iterator
	bodies *pebble.Iterator // nil: no bodies are read
	logs   *logReader       // bodies kept in the Raft log, if any
	r      pebble.Reader    // where blobs are read (blobs.go)
	key    []byte
}

func (a *applier) newMessageCursor(e *entity, sub partitionpb.SubQueue, from uint64, bodies bool) (*messageCursor, error) {
	c := &messageCursor{k: e.key, state0: store.SubPrefix(e.key, store.KindMessage, sub), body0: store.SubPrefix(e.key, store.KindBody, sub), logs: a.logs, r: a.b}
	var err error
	if c.states, err = a.b.NewIter(&pebble.IterOptions{
		LowerBound: store.MessageKey(e.key, sub, from),
		UpperBound: store.PrefixEnd(c.state0),
	}); err != nil {
		return nil, fmt.Errorf("partition: iterator: %w", err)
	}
	if bodies {
		if c.bodies, err = a.b.NewIter(&pebble.IterOptions{
			LowerBound: store.BodyKey(e.key, sub, from),
			UpperBound: store.PrefixEnd(c.body0),
		}); err != nil {
			return nil, store.CloseIter(c.states, fmt.Errorf("partition: iterator: %w", err))
		}
	}
	return c, nil
}

// seek positions it at key and returns its unsealed value, or nil if the
// key is absent. Callers seek forward: pebble then tries the next few keys
// of each level before it searches (TrySeekUsingNext), and a seek to where
// the iterator already stands costs nothing. Stepping with Next first, as
// an earlier version did, lost that for the seek after it: completing
// every other message of a lock went from 71-85k to 60-63k msgs/s
// (BenchmarkSettleScattered).
func (c *messageCursor) seek(it *pebble.Iterator, key []byte) ([]byte, error) {
	if !it.SeekGE(key) || !bytes.Equal(it.Key(), key) {
		if err := it.Error(); err != nil {
			return nil, fmt.Errorf("partition: read %x: %w", key, err)
		}
		return nil, nil
	}
	return store.IterValue(it)
}

// lookup reads the state record of seq; nil if there is none.
func (c *messageCursor) lookup(seq uint64) (*partitionpb.StoredMessage, error) {
	p, err := c.record(seq)
	if err != nil || p == nil {
		return nil, err
	}
	return store.DecodeState(c.key, p)
}

// record returns the unsealed state record of seq, valid until the cursor
// moves, with its key in c.key; nil if there is none.
func (c *messageCursor) record(seq uint64) ([]byte, error) {
	c.key = binary.BigEndian.AppendUint64(append(c.key[:0], c.state0...), seq)
	return c.seek(c.states, c.key)
}

// seekState positions the state iterator at the first message with a
// sequence number of seq or more.
func (c *messageCursor) seekState(seq uint64) bool {
	c.key = binary.BigEndian.AppendUint64(append(c.key[:0], c.state0...), seq)
	return c.states.SeekGE(c.key)
}

// body fills in m's sections, if the cursor reads bodies.
func (c *messageCursor) body(m *partitionpb.StoredMessage) error {
	if c.bodies == nil {
		return nil
	}
	if m.BodyIndex != 0 {
		return c.logs.sections(m)
	}
	c.key = binary.BigEndian.AppendUint64(append(c.key[:0], c.body0...), m.SequenceNumber)
	p, err := c.seek(c.bodies, c.key)
	if err == nil && p == nil {
		err = fmt.Errorf("%w: message %d of %s has no body", ErrCorrupt, m.SequenceNumber, c.k)
	}
	if err != nil {
		return err
	}
	if err := store.MergeBody(c.key, p, m); err != nil || len(m.BodyBlob) == 0 {
		return err
	}
	return readBlob(c.r, c.k, m)
}

// close closes the iterators and returns the first of err and their errors;
// a nil cursor (one never made) returns err.
func (c *messageCursor) close(err error) error {
	if c == nil {
		return err
	}
	if c.bodies != nil {
		err = store.CloseIter(c.bodies, err)
	}
	return store.CloseIter(c.states, err)
}
