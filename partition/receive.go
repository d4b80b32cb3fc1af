package partition

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/quorumbus/quorumbus/partition/store"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// The receive side of the applier: Lock hands messages out, settle and
// renewLocks act on them by lock token, and expireLocks ends the locks
// that ran out.

func expired(m *partitionpb.StoredMessage, now int64) bool { return store.SlotOf(m).Expired(now) }

func (a *applier) lock(c *partitionpb.Lock) (*partitionpb.Result, error) {
	e, err := a.receiving(c.EntityId, c.Partition, c.SubQueue)
	if err != nil {
		return nil, err
	}
	if err := checkTokenSeed(c.ReceiveAndDelete, c.TokenSeed); err != nil {
		return nil, err
	}
	if e.cfg.RequiresSession && c.SubQueue == partitionpb.SubQueue_SUB_QUEUE_MAIN {
		if len(c.SessionToken) == 0 {
			return nil, fmt.Errorf("%w: %s requires sessions: receive from an accepted session", ErrInvalid, e.cfg.Name)
		}
		return a.lockSession(e, c)
	}
	l := lockPass{a: a, e: e, c: c, r: okResult(), want: int(min(c.MaxCount, uint32(a.lim.LockCount))),
		main: c.SubQueue == partitionpb.SubQueue_SUB_QUEUE_MAIN}
	if l.want == 0 {
		return l.r, nil
	}
	// The iterators see the batch as it is now; the writes below do not
	// disturb them. They start at the head: everything before is gone. The
	// available index, the state records and the bodies are all in
	// sequence order, so one forward pass over each reads them: first the
	// index, whose entries are all below entity.fresh, then, in the main
	// queue, the fresh messages, which have no index entries.
	head := e.availHead[c.SubQueue]
	var avail store.AvailableScan // the zero scan: nothing indexed
	if !e.indexEmpty(c.SubQueue) {
		if avail, err = a.b.Available(e.key, c.SubQueue, head); err != nil {
			return nil, err
		}
	}
	from := head
	if l.main {
		from = min(head, e.fresh)
	}
	if l.cur, err = a.newMessageCursor(e, c.SubQueue, from, a.bodies); err != nil {
		return nil, avail.Close(err)
	}
	next, indexDone, err := l.indexed(&avail, head)
	if err == nil && l.main {
		err = l.fresh()
	}
	if err := avail.Close(l.cur.close(err)); err != nil {
		return nil, err
	}
	if e.availHead[c.SubQueue] == head { // unless a write went below it
		if l.main && indexDone {
			// Nothing indexed is left: the main queue's entries lie
			// below fresh, which this Lock may have moved up.
			next = max(next, e.fresh)
		}
		e.availHead[c.SubQueue] = next
	}
	a.dirty[e.key] = true // fresh may have moved
	return l.r, nil
}

// lockPass is one Lock's walk over a sub-queue: the messages it took or
// passed, against the command's and the machine's limits.
type lockPass struct {
	a    *applier
	e    *entity
	c    *partitionpb.Lock
	cur  *messageCursor
	r    *partitionpb.Result
	main bool // the main queue: it has fresh messages, and expiry applies
	want int

	count, passed int // messages taken, and expired or scheduled ones passed
	taken         int64
}

func (l *lockPass) more() bool {
	return l.count < l.want && l.taken < l.a.lim.LockBytes && l.passed < l.a.lim.ExpiredPerLock
}

// indexed takes messages from the available index from head on, and
// returns where the index's head now is and whether the scan ran out
// (nothing is indexed from head on).
func (l *lockPass) indexed(avail *store.AvailableScan, head uint64) (next uint64, done bool, err error) {
	next = head
	for l.more() {
		seq, ok, err := avail.Next()
		if err != nil || !ok {
			return next, err == nil, err
		}
		p, err := l.cur.Record(seq)
		if err != nil {
			return next, false, err
		}
		if p == nil {
			return next, false, fmt.Errorf("%w: %s has no message %d", ErrCorrupt, l.e.key, seq)
		}
		s, _, err := l.cur.Slot(p)
		if err != nil {
			return next, false, err
		}
		if !s.Available() || !l.e.indexedAvailable(s) {
			return next, false, fmt.Errorf("%w: %s: message %d is indexed available but is not", ErrCorrupt, l.e.key, seq)
		}
		if err := l.take(p, s); err != nil {
			return next, false, err
		}
		next = seq + 1 // every entry passed is gone
	}
	return next, false, nil
}

// fresh takes the main queue's fresh messages: every one passed is no
// longer fresh, so fresh moves past it once it has been handled (as
// fresh).
func (l *lockPass) fresh() error {
	valid := l.cur.SeekState(l.e.fresh)
	for ; valid && l.more(); valid = l.cur.Next() {
		p, err := l.cur.State()
		if err != nil {
			return err
		}
		s, _, err := l.cur.Slot(p)
		if err != nil {
			return err
		}
		if s.Available() {
			err = l.take(p, s)
		} else {
			l.passed++ // scheduled: it will come back with a new number
		}
		if err != nil {
			return err
		}
		l.e.fresh = s.Seq + 1
	}
	l.e.freshLeft = false
	if !valid {
		return l.cur.Error()
	}
	// Stopped at the limits: is the next fresh message available?
	p, err := l.cur.State()
	if err != nil {
		return err
	}
	s, _, err := l.cur.Slot(p)
	l.e.freshLeft = err == nil && s.Available()
	return err
}

// take hands out (or drops, when expired) the available message in slot
// old whose state record, where the cursor stands, is p. Only a replica
// that answers the batch decodes the messages it hands out, for its result
// (see lockRecord).
func (l *lockPass) take(p []byte, old store.Slot) error {
	a, e := l.a, l.e
	if l.main && old.Expired(a.now) {
		l.passed++
		if !e.cfg.DeadLetteringOnExpiration {
			return a.remove(e, old)
		}
		m, err := l.cur.Decode(p)
		if err != nil {
			return err
		}
		deadLetter(e, m, ReasonTTLExpired, "The message expired and was dead lettered.")
		return a.update(e, old, m)
	}
	l.count++
	l.taken += old.Size
	var token []byte
	var until int64
	if !l.c.ReceiveAndDelete {
		token, until = lockToken(old.Seq, l.c.TokenSeed), a.now+e.cfg.LockDurationMs
		if a.recordLocks {
			a.handedOut = append(a.handedOut, old.Seq)
		}
	}
	if a.bodies {
		m, err := l.cur.Decode(p)
		if err != nil {
			return err
		}
		m.LockToken, m.LockedUntilMs = token, until
		if err := l.cur.body(m); err != nil { // before a receive-and-delete's body goes
			return err
		}
		l.r.Messages = append(l.r.Messages, handOut(m))
	}
	if l.c.ReceiveAndDelete {
		return a.remove(e, old)
	}
	return a.lockRecord(e, old, p, token, until)
}

// relock answers a repeated peek-lock Lock or LockBySequence (lockOnce)
// with the messages its first application handed out (done) that are
// still locked by it: not settled, expired or locked again since, in the
// order it handed them out. It changes nothing. Replicas that do not
// answer leave out what the command leaves out: a Lock's messages, a
// LockBySequence's bodies. A LockBySequence that finds none of them is
// refused as the command would be.
func (a *applier) relock(l lockTarget, done *partitionpb.Result) (*partitionpb.Result, error) {
	e, err := a.receiving(l.entity, l.part, l.sub)
	if err != nil {
		return nil, err
	}
	r := okResult()
	if !a.bodies && !l.bySequence || len(done.SequenceNumbers) == 0 || len(done.TokenSeed) == 0 {
		return r, nil // (or the id was another command's)
	}
	seqs := slices.Sorted(slices.Values(done.SequenceNumbers)) // readLocked reads forward
	found, err := a.readLocked(e, l.sub, seqs, true)
	if err != nil {
		return nil, err
	}
	cur, err := a.newMessageCursor(e, l.sub, seqs[0], a.bodies)
	if err != nil {
		return nil, err
	}
	still := make(map[uint64]*partitionpb.StoredMessage, len(seqs))
	for i, f := range found {
		if !f.found || !f.s.Locked || f.s.Until <= a.now || !bytes.Equal(f.token[:], lockToken(seqs[i], done.TokenSeed)) {
			continue
		}
		if err := cur.body(f.m); err != nil {
			return nil, cur.close(err)
		}
		still[seqs[i]] = f.m
	}
	if err := cur.close(nil); err != nil {
		return nil, err
	}
	for _, seq := range done.SequenceNumbers {
		if m := still[seq]; m != nil {
			r.Messages = append(r.Messages, handOut(m))
		}
	}
	if len(r.Messages) == 0 && l.bySequence {
		return nil, fmt.Errorf("%w: the deferred messages %v of %s were locked and are no longer", ErrMessageNotFound, done.SequenceNumbers, l.sub)
	}
	return r, nil
}

// lockedRecord is a locked message found by its lock token: its slot,
// and the message itself when the caller changes it rather than removes it.
type lockedRecord struct {
	s     store.Slot
	token [16]byte
	m     *partitionpb.StoredMessage // nil unless asked for
	found bool                       // the message is there (readLocked)
}

// newLockedRecord makes the record of a message in slot s locked by
// token (m is the message, if decoded).
func newLockedRecord(s store.Slot, token []byte, m *partitionpb.StoredMessage) lockedRecord {
	r := lockedRecord{s: s, m: m}
	if len(token) == len(r.token) {
		copy(r.token[:], token)
	} else {
		r.s.Locked = false // no token of 16 bytes names it
	}
	return r
}

// lockedMessages returns the messages the tokens lock, each once, in the
// order of the tokens, or ErrLockLost if any token does not name a current
// lock in the sub-queue. With whole false the records carry only their
// slots.
//
// The tokens are put in sequence order (a token starts with its message's
// number) so that one forward pass reads their records, and a token given
// twice lands next to its twin and is settled once. Maps for either, before,
// were most of what a settle allocated on every replica.
func (a *applier) lockedMessages(e *entity, sub partitionpb.SubQueue, tokens [][]byte, whole bool) ([]lockedRecord, error) {
	for _, tok := range tokens {
		seq, ok := partitionpb.SequenceOfToken(tok)
		if !ok {
			return nil, fmt.Errorf("%w: lock token %x is not %d bytes", ErrLockLost, tok, partitionpb.LockTokenBytes)
		}
		if p := partitionpb.PartitionOfSequence(seq); p != e.key.Part {
			return nil, fmt.Errorf("%w: lock token %x is of partition %d, not %d", ErrLockLost, tok, p, e.key.Part)
		}
	}
	order := make([]int, len(tokens)) // token positions, to be sorted by token
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(x, y int) int {
		if c := bytes.Compare(tokens[x], tokens[y]); c != 0 {
			return c
		}
		return x - y // the first of twins leads
	})
	seqs := make([]uint64, len(order))
	at := make([]int, len(tokens)) // token position -> index in order, or -1 for a repeat
	for i, pos := range order {
		seqs[i] = binary.BigEndian.Uint64(tokens[pos])
		at[pos] = i
		if i > 0 && bytes.Equal(tokens[pos], tokens[order[i-1]]) {
			at[pos] = -1
		}
	}
	found, err := a.readLocked(e, sub, seqs, whole)
	if err != nil {
		return nil, err
	}
	out := make([]lockedRecord, 0, len(tokens))
	for pos, tok := range tokens {
		i := at[pos]
		if i < 0 {
			continue // the same token twice settles once
		}
		seq, r := seqs[i], found[i]
		switch {
		case !r.found:
			return nil, fmt.Errorf("%w: lock token %x: message %d is not in %s", ErrLockLost, tok, seq, sub)
		case !r.s.Locked || r.token != [16]byte(tok):
			return nil, fmt.Errorf("%w: lock token %x: message %d is not locked by it", ErrLockLost, tok, seq)
		case r.s.Until <= a.now:
			return nil, fmt.Errorf("%w: lock token %x: message %d: the lock expired at %d", ErrLockLost, tok, seq, r.s.Until)
		}
		out = append(out, r)
	}
	return out, nil
}

// readLocked reads the state records of the given messages of a
// sub-queue, whole or only their slots, in one forward pass of a cursor (a
// settle names a few hundred, mostly in order: a point read each costs a
// walk through every level). seqs is sorted and may repeat a number; the
// records come back in its order, absent ones with found false.
func (a *applier) readLocked(e *entity, sub partitionpb.SubQueue, seqs []uint64, whole bool) ([]lockedRecord, error) {
	out := make([]lockedRecord, len(seqs))
	decode := func(seq uint64, p []byte) (lockedRecord, error) {
		if whole {
			m := new(partitionpb.StoredMessage)
			if err := store.UnmarshalState(p, m); err != nil {
				return lockedRecord{}, fmt.Errorf("%w: %s %s message %d: %v", ErrCorrupt, e.key, sub, seq, err)
			}
			return newLockedRecord(store.SlotOf(m), m.LockToken, m), nil
		}
		s, token, err := store.StateSlot(p)
		if err != nil {
			return lockedRecord{}, fmt.Errorf("%w: %s %s message %d: %v", ErrCorrupt, e.key, sub, seq, err)
		}
		return newLockedRecord(s, token, nil), nil
	}
	var cur *messageCursor // made at the first record not kept in memory
	for i, seq := range seqs {
		if i > 0 && seq == seqs[i-1] {
			out[i] = out[i-1]
			continue
		}
		p, ok := a.b.CachedLocked(e.key, sub, seq)
		if !ok {
			if cur == nil {
				var err error
				if cur, err = a.newMessageCursor(e, sub, seq, false); err != nil {
					return nil, err
				}
			}
			var err error
			if p, err = cur.Record(seq); err != nil {
				return nil, cur.close(err)
			}
			if p == nil {
				continue
			}
		}
		r, err := decode(seq, p)
		if err != nil {
			return nil, cur.close(err)
		}
		r.found = true
		out[i] = r
	}
	return out, cur.close(nil)
}

// settle settles messages by lock token. It is all or nothing: when one
// token is lost, the command is rejected with RESULT_LOCK_LOST and none of
// its messages changes. (Per-token results would let a client settle the
// rest of a batch, but the SDKs settle one message per disposition anyway.)
func (a *applier) settle(c *partitionpb.Settle) (*partitionpb.Result, error) {
	e, err := a.receiving(c.EntityId, c.Partition, c.SubQueue)
	if err != nil {
		return nil, err
	}
	switch c.Disposition {
	case partitionpb.Disposition_DISPOSITION_COMPLETE, partitionpb.Disposition_DISPOSITION_ABANDON,
		partitionpb.Disposition_DISPOSITION_DEFER, partitionpb.Disposition_DISPOSITION_RELEASE:
	case partitionpb.Disposition_DISPOSITION_DEAD_LETTER:
		if c.SubQueue == partitionpb.SubQueue_SUB_QUEUE_DEAD_LETTER {
			return nil, fmt.Errorf("%w: a dead-lettered message cannot be dead-lettered again", ErrInvalid)
		}
	default:
		return nil, fmt.Errorf("%w: disposition %d", ErrInvalid, c.Disposition)
	}
	complete := c.Disposition == partitionpb.Disposition_DISPOSITION_COMPLETE
	locked, err := a.lockedMessages(e, c.SubQueue, c.LockTokens, !complete)
	if err != nil {
		return nil, err
	}
	for _, r := range locked {
		old, m := r.s, r.m
		if complete {
			if err := a.remove(e, old); err != nil {
				return nil, err
			}
			continue
		}
		unlock(m)
		if len(c.PropertiesToModify) > 0 && c.Disposition != partitionpb.Disposition_DISPOSITION_RELEASE {
			m.ModifiedProperties = append(m.ModifiedProperties, c.PropertiesToModify)
		}
		switch c.Disposition {
		case partitionpb.Disposition_DISPOSITION_ABANDON:
			countDelivery(e, m)
		case partitionpb.Disposition_DISPOSITION_DEAD_LETTER:
			deadLetter(e, m, c.DeadLetterReason, c.DeadLetterDescription)
		case partitionpb.Disposition_DISPOSITION_DEFER:
			m.State = partitionpb.MessageState_MESSAGE_STATE_DEFERRED
		}
		if err := a.update(e, old, m); err != nil {
			return nil, err
		}
	}
	return okResult(), nil
}

// renewLocks extends the locks of the tokens to now + lock duration, all or
// nothing like settle.
func (a *applier) renewLocks(c *partitionpb.RenewLocks) (*partitionpb.Result, error) {
	e, err := a.receiving(c.EntityId, c.Partition, c.SubQueue)
	if err != nil {
		return nil, err
	}
	locked, err := a.lockedMessages(e, c.SubQueue, c.LockTokens, true)
	if err != nil {
		return nil, err
	}
	until := a.now + e.cfg.LockDurationMs
	for _, r := range locked {
		old, m := r.s, r.m
		m.LockedUntilMs = until
		if err := a.update(e, old, m); err != nil {
			return nil, err
		}
	}
	r := &partitionpb.Result{LockedUntilMs: make([]int64, len(c.LockTokens))}
	for i := range r.LockedUntilMs {
		r.LockedUntilMs[i] = until
	}
	return r, nil
}

// expireLocks ends every lock whose locked_until_ms <= now, entity by
// entity in key order, earliest first, at most Limits.ExpiredLocks of them.
// Each counts a delivery; the message is available again at its place in
// sequence order, or dead-lettered at max_delivery_count.
func (a *applier) expireLocks() (*partitionpb.Result, error) {
	// The scan reads grants from the batch: it must hold this Apply's.
	if err := a.b.FlushGrants(); err != nil {
		return nil, err
	}
	budget := a.lim.ExpiredLocks
	for _, k := range sortedKeys(a.entities) {
		if budget == 0 {
			break
		}
		e := a.entities[k]
		if e.locks.Stale {
			// Raise the floor past the locks ended since it was read, so
			// that the scan does not step over them (on a follower, no one
			// asked for the earliest lock since).
			r, err := a.b.ReadView()
			if err != nil {
				return nil, err
			}
			if err := e.locks.Load(r); err != nil {
				return nil, err
			}
			a.locks[k] = true // the store's view moves on with this batch
		}
		// The scan sees the grants as flushed; expiring a lock clears its
		// bit in the batch's copy, and each message is in one grant.
		err := a.b.DueLocks(&e.locks, a.now, func(until int64, sub partitionpb.SubQueue, seq uint64) (bool, error) {
			if err := a.expireLock(e, until, sub, seq); err != nil {
				return false, err
			}
			budget--
			return budget > 0, nil
		})
		if err != nil {
			return nil, err
		}
	}
	return okResult(), nil
}

// expireLock ends the lock of message seq, which its grant says is locked
// until `until`.
func (a *applier) expireLock(e *entity, until int64, sub partitionpb.SubQueue, seq uint64) error {
	m, err := a.b.State(e.key, sub, seq)
	if err != nil {
		return err
	}
	if m == nil {
		return fmt.Errorf("%w: %s: lock grant names message %d, which is not there", ErrCorrupt, e.key, seq)
	}
	old := store.SlotOf(m)
	if !old.Locked || old.Until != until {
		return fmt.Errorf("%w: %s: message %d is in a lock grant until %d but is not locked until then", ErrCorrupt, e.key, seq, until)
	}
	unlock(m)
	countDelivery(e, m)
	return a.update(e, old, m)
}
