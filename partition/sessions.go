package partition

import (
	"fmt"

	"github.com/quorumbus/quorumbus/partition/store"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// The session rules (Service Bus message sessions). A receiver first takes
// a session's lock (AcceptSession); its Locks then take that session's
// messages in sequence order, each locked until the session lock ends,
// and renewing the session lock renews theirs. When the session lock ends
// (ExpireSessionLocks, counting a delivery; ReleaseSession, not) the
// messages held under it return to the session's stream at their places,
// so an abandoned or expired message comes back before later ones.

// maxExpiredSessions bounds the session locks one ExpireSessionLocks ends.
const maxExpiredSessions = 1000

// checkSessionID checks the session id of a message or a command.
func checkSessionID(sid string) error {
	switch {
	case sid == "":
		return fmt.Errorf("%w: no session id", ErrInvalid)
	case len(sid) > MaxSessionIDBytes:
		return fmt.Errorf("%w: session id of %d bytes, at most %d", ErrInvalid, len(sid), MaxSessionIDBytes)
	}
	return nil
}

// sessionEntity returns the entity partition a session command names, if
// it requires sessions and may be received from.
func (a *applier) sessionEntity(id uint64, part uint32) (*entity, error) {
	e, err := a.receiving(id, part, partitionpb.SubQueue_SUB_QUEUE_MAIN)
	if err != nil {
		return nil, err
	}
	if !e.cfg.RequiresSession {
		return nil, fmt.Errorf("%w: %s does not require sessions", ErrInvalid, e.cfg.Name)
	}
	return e, nil
}

// heldSession returns the record of a session that token locks now, or
// ErrSessionLockLost.
func (a *applier) heldSession(e *entity, sid string, token []byte) (*store.Session, error) {
	if err := checkSessionID(sid); err != nil {
		return nil, err
	}
	r, err := a.b.Session(e.key, sid)
	if err != nil {
		return nil, err
	}
	if !r.LockedBy(token, a.now) {
		return nil, fmt.Errorf("%w: session %q of %s", ErrSessionLockLost, sid, e.cfg.Name)
	}
	return r, nil
}

func (a *applier) acceptSession(c *partitionpb.AcceptSession) (*partitionpb.Result, error) {
	e, err := a.sessionEntity(c.EntityId, c.Partition)
	if err != nil {
		return nil, err
	}
	if len(c.Token) != partitionpb.LockTokenBytes {
		return nil, fmt.Errorf("%w: session token of %d bytes", ErrInvalid, len(c.Token))
	}
	sid := c.SessionId
	if c.Next {
		var ok bool
		sid, ok, err = a.b.NextReady(&e.ready, e.key)
		if err != nil {
			return nil, err
		}
		if !ok {
			return okResult(), nil // none available
		}
	} else if err := checkSessionID(sid); err != nil {
		return nil, err
	}
	r, err := a.b.Session(e.key, sid)
	if err != nil {
		return nil, err
	}
	if r.LockedBy(c.Token, a.now) {
		// A repeated request, whose first answer was lost: it has it.
		return &partitionpb.Result{SessionId: sid, LockedUntilMs: []int64{r.Until}}, nil
	}
	if r.Locked() {
		if r.Until > a.now {
			return nil, fmt.Errorf("%w: session %q of %s is locked by another receiver", ErrSessionLocked, sid, e.cfg.Name)
		}
		// Run out but not yet ended by ExpireSessionLocks: end it now,
		// as that would.
		if err := a.endSessionLock(e, sid, true); err != nil {
			return nil, err
		}
		if r, err = a.b.Session(e.key, sid); err != nil {
			return nil, err
		}
	}
	until := a.now + e.cfg.LockDurationMs
	if err := a.b.SetReady(&e.ready, e.key, sid, r, false, 0); err != nil {
		return nil, err
	}
	if err := a.setSessionLock(e, sid, r, c.Token, until); err != nil {
		return nil, err
	}
	if err := a.b.PutSession(e.key, sid, r); err != nil {
		return nil, err
	}
	return &partitionpb.Result{SessionId: sid, LockedUntilMs: []int64{until}}, nil
}

// endSessionLock ends a session's lock: the messages held under it return
// to the session's stream, counting a delivery when countDeliveries (the
// lock ran out) and not when the receiver gave the session back.
func (a *applier) endSessionLock(e *entity, sid string, countDeliveries bool) error {
	held, err := a.b.SessionSeqs(e.key, store.SessionHeld, sid, 0)
	if err != nil {
		return err
	}
	for _, seq := range held {
		m, err := a.mainMessage(e, seq)
		if err != nil {
			return err
		}
		old := store.SlotOf(m)
		if !old.Locked {
			return fmt.Errorf("%w: %s: message %d is held by session %q but not locked", ErrCorrupt, e.key, seq, sid)
		}
		unlock(m)
		if countDeliveries {
			countDelivery(e, m)
		}
		if err := a.update(e, old, m); err != nil {
			return err
		}
	}
	r, err := a.b.Session(e.key, sid)
	if err != nil {
		return err
	}
	if err := a.setSessionLock(e, sid, r, nil, 0); err != nil {
		return err
	}
	if r.Avail > 0 {
		head, err := a.b.SessionSeqs(e.key, store.SessionStream, sid, 1)
		if err != nil {
			return err
		}
		if len(head) != 1 {
			return fmt.Errorf("%w: %s: session %q counts %d available but has none", ErrCorrupt, e.key, sid, r.Avail)
		}
		if err := a.b.SetReady(&e.ready, e.key, sid, r, true, head[0]); err != nil {
			return err
		}
	}
	a.woken[wakeKey{e.key, partitionpb.SubQueue_SUB_QUEUE_MAIN}] = true // an accept-next may take it
	return a.b.PutSession(e.key, sid, r)
}

func (a *applier) renewSessionLock(c *partitionpb.RenewSessionLock) (*partitionpb.Result, error) {
	e, err := a.sessionEntity(c.EntityId, c.Partition)
	if err != nil {
		return nil, err
	}
	r, err := a.heldSession(e, c.SessionId, c.Token)
	if err != nil {
		return nil, err
	}
	until := a.now + e.cfg.LockDurationMs
	held, err := a.b.SessionSeqs(e.key, store.SessionHeld, c.SessionId, 0)
	if err != nil {
		return nil, err
	}
	for _, seq := range held {
		m, err := a.mainMessage(e, seq)
		if err != nil {
			return nil, err
		}
		old := store.SlotOf(m)
		m.LockedUntilMs = until
		if err := a.update(e, old, m); err != nil {
			return nil, err
		}
	}
	if err := a.setSessionLock(e, c.SessionId, r, c.Token, until); err != nil {
		return nil, err
	}
	if err := a.b.PutSession(e.key, c.SessionId, r); err != nil {
		return nil, err
	}
	return &partitionpb.Result{SessionId: c.SessionId, LockedUntilMs: []int64{until}}, nil
}

func (a *applier) setSessionState(c *partitionpb.SetSessionState) (*partitionpb.Result, error) {
	e, err := a.sessionEntity(c.EntityId, c.Partition)
	if err != nil {
		return nil, err
	}
	if len(c.State) > MaxSessionStateBytes {
		return nil, fmt.Errorf("%w: session state of %d bytes, at most %d", ErrInvalid, len(c.State), MaxSessionStateBytes)
	}
	r, err := a.heldSession(e, c.SessionId, c.Token)
	if err != nil {
		return nil, err
	}
	r.State = nil
	if len(c.State) > 0 {
		r.State = c.State
	}
	r.Updated = a.now
	return okResult(), a.b.PutSession(e.key, c.SessionId, r)
}

func (a *applier) releaseSession(c *partitionpb.ReleaseSession) (*partitionpb.Result, error) {
	e, err := a.sessionEntity(c.EntityId, c.Partition)
	if err != nil {
		return nil, err
	}
	if _, err := a.heldSession(e, c.SessionId, c.Token); err != nil {
		return nil, err
	}
	return okResult(), a.endSessionLock(e, c.SessionId, false)
}

// expireSessionLocks ends the session locks that ran out, entity by entity
// in key order, earliest first, at most maxExpiredSessions.
func (a *applier) expireSessionLocks() (*partitionpb.Result, error) {
	budget := maxExpiredSessions
	for _, k := range sortedKeys(a.entities) {
		if budget == 0 {
			break
		}
		e := a.entities[k]
		sids, err := a.b.DueSessionLocks(&e.slock, a.now, budget)
		if err != nil {
			return nil, err
		}
		for _, sid := range sids {
			if err := a.endSessionLock(e, sid, true); err != nil {
				return nil, err
			}
			budget--
		}
	}
	return okResult(), nil
}

// lockSession takes the next messages of the session that c's session
// token locks, in sequence order: locked until the session lock ends, or
// removed with receive_and_delete.
//
// Time to live within a session follows Service Bus: messages expire
// only while a receiver holds the session (they are in no expiry index),
// and once one of them has expired, the session's messages are expired
// with it: the Lock that meets an expired message ends it and every
// message after it in the stream (dropped, or dead-lettered where the
// entity says so) and hands out only those before it.
func (a *applier) lockSession(e *entity, c *partitionpb.Lock) (*partitionpb.Result, error) {
	r, err := a.heldSession(e, c.SessionId, c.SessionToken)
	if err != nil {
		return nil, err
	}
	want := int(min(c.MaxCount, uint32(a.lim.LockCount)))
	res := okResult()
	if want == 0 || r.Avail == 0 {
		return res, nil
	}
	seqs, err := a.b.SessionSeqs(e.key, store.SessionStream, c.SessionId, want+a.lim.ExpiredPerLock)
	if err != nil {
		return nil, err
	}
	cur, err := a.newMessageCursor(e, partitionpb.SubQueue_SUB_QUEUE_MAIN, seqs[0], a.bodies)
	if err != nil {
		return nil, err
	}
	count, taken := 0, int64(0)
	expiring := false // an expired message was met: the rest expire too
	err = func() error {
		for _, seq := range seqs {
			if !expiring && (count >= want || taken >= a.lim.LockBytes) {
				return nil
			}
			p, err := cur.Record(seq)
			if err != nil {
				return err
			}
			if p == nil {
				return fmt.Errorf("%w: %s: session %q names message %d, which is not there", ErrCorrupt, e.key, c.SessionId, seq)
			}
			old, _, err := cur.Slot(p)
			if err != nil {
				return err
			}
			if !old.Available() {
				return fmt.Errorf("%w: %s: message %d is in session %q's stream but not available", ErrCorrupt, e.key, seq, c.SessionId)
			}
			if old.Expired(a.now) || expiring {
				expiring = true
				m, err := cur.Decode(p)
				if err != nil {
					return err
				}
				if err := a.expire(e, old, m); err != nil {
					return err
				}
				continue
			}
			count++
			taken += old.Size
			// As Lock does: only the answering replica decodes what it
			// hands out; the others lock the record as it is.
			var m *partitionpb.StoredMessage
			if a.bodies {
				if m, err = cur.Decode(p); err != nil {
					return err
				}
				if err := cur.body(m); err != nil {
					return err
				}
			}
			if c.ReceiveAndDelete {
				if m != nil {
					res.Messages = append(res.Messages, handOut(m))
				}
				if err := a.remove(e, old); err != nil {
					return err
				}
				continue
			}
			if a.recordLocks {
				a.handedOut = append(a.handedOut, seq)
			}
			token := lockToken(seq, c.TokenSeed)
			if m != nil {
				m.LockToken, m.LockedUntilMs = token, r.Until
				res.Messages = append(res.Messages, handOut(m))
			}
			if err := a.lockRecord(e, old, p, token, r.Until); err != nil {
				return err
			}
		}
		return nil
	}()
	if err := cur.close(err); err != nil {
		return nil, err
	}
	return res, nil
}
