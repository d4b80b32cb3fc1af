package partition

import (
	"fmt"

	"github.com/quorumbus/quorumbus/partition/store"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// Sessions over the store. On an entity that requires sessions every
// message of the main sub-queue belongs to one session, and its index
// entries are its session's (store/sessions.go: the session record, its
// stream of available messages, its held and parked messages, the index
// of ready sessions and the one of session locks by their end). They take
// the place of the available index and of entity.fresh for session
// messages: index() puts a session message's entries there and keeps the
// session record's counts with them (countSessionMessage), so every rule
// that moves a message (lock, settle, expiry, activation) keeps the
// sessions right without knowing them. The three entries of a session's
// messages (stream, held, parked) together name every message of the
// session in the main sub-queue, which is what a session's peek reads.

// MaxSessionIDBytes caps a session id: the most bytes that Service Bus's
// 128 characters take in UTF-8. The front-end refuses more than 128
// characters; the state machine keeps the byte bound it has always
// applied, so that replicas of every version judge a command alike.
const MaxSessionIDBytes = 512

// MaxSessionStateBytes caps a session's state. Service Bus's limit is
// the entity's maximum message size, which the front-end applies; this
// bound keeps a state within a Raft entry whatever the entity says.
const MaxSessionStateBytes = 1 << 20

// inSession reports whether the message in slot s is kept in a session's
// stream rather than in the entity's available index.
func (e *entity) inSession(s store.Slot) bool {
	return e.cfg.RequiresSession && s.Sub == partitionpb.SubQueue_SUB_QUEUE_MAIN && s.Session != ""
}

// countSessionMessage notes a message of a session entering (+1) or
// leaving (-1) the session's stream (avail), its held messages (held) or
// its parked ones (parked).
func (a *applier) countSessionMessage(e *entity, sid string, seq uint64, avail, held, parked int64) error {
	r, err := a.b.Session(e.key, sid)
	if err != nil {
		return err
	}
	r.Avail += avail
	r.Held += held
	// A store written before parked messages were counted has deferred
	// and scheduled session messages that never counted: the count
	// stops at zero rather than call the store corrupt.
	r.Parked = max(r.Parked+parked, 0)
	if r.Avail < 0 || r.Held < 0 {
		return fmt.Errorf("%w: %s: session %q counts %d available, %d held", ErrCorrupt, e.key, sid, r.Avail, r.Held)
	}
	switch {
	case r.Avail == 0:
		err = a.b.SetReady(&e.ready, e.key, sid, r, false, 0)
	case !r.Locked():
		err = a.b.SetReady(&e.ready, e.key, sid, r, true, seq)
	}
	if err != nil {
		return err
	}
	return a.b.PutSession(e.key, sid, r)
}

// setSessionLock gives (token non-nil) or takes the session's lock and
// keeps the index of session locks by their end with it. The caller
// writes the record.
func (a *applier) setSessionLock(e *entity, sid string, r *store.Session, token []byte, until int64) error {
	if r.Locked() {
		if err := a.b.SetSessionLock(&e.slock, e.key, r.Until, sid, false); err != nil {
			return err
		}
	}
	r.Token, r.Until = token, 0
	if token != nil {
		r.Until = until
		if err := a.b.SetSessionLock(&e.slock, e.key, until, sid, true); err != nil {
			return err
		}
	}
	if a.slocks == nil {
		a.slocks = make(map[ekey]bool)
	}
	a.slocks[e.key] = true
	return nil
}
