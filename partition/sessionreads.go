package partition

import (
	"fmt"

	"github.com/quorumbus/quorumbus/partition/store"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// Reads of sessions, from the machine's committed state (like Peek).

// MaxListSessions caps the sessions one ListSessions returns.
const MaxListSessions = 1000

// sessionEntity returns the entity partition of a session read, if it
// requires sessions.
func (m *Machine) sessionEntity(entityID uint64, partition uint32) (*entity, error) {
	if err := m.usable(); err != nil {
		return nil, err
	}
	e, ok := m.entities[ekey{ID: entityID, Part: partition}]
	if !ok {
		return nil, fmt.Errorf("%w: %d/%d", ErrEntityNotFound, entityID, partition)
	}
	if !e.cfg.RequiresSession {
		return nil, fmt.Errorf("%w: %s does not require sessions", ErrInvalid, e.cfg.Name)
	}
	return e, nil
}

// SessionState returns the state of a session that token locks at nowMs
// (the reader's clock), nil when it has none; ErrSessionLockLost when the
// token does not lock it.
func (m *Machine) SessionState(entityID uint64, partition uint32, sid string, token []byte, nowMs int64) ([]byte, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	e, err := m.sessionEntity(entityID, partition)
	if err != nil {
		return nil, err
	}
	if err := checkSessionID(sid); err != nil {
		return nil, err
	}
	r, err := store.ReadSession(m.db, e.key, sid)
	if err != nil {
		return nil, err
	}
	if !r.LockedBy(token, nowMs) {
		return nil, fmt.Errorf("%w: session %q of %s", ErrSessionLockLost, sid, e.cfg.Name)
	}
	return r.State, nil
}

// ListSessions returns the ids of the sessions that have messages
// (deferred and scheduled ones too), state or a lock, in id order,
// skipping skip, at most top (capped at MaxListSessions); with
// updatedSinceMs > 0 only those whose state was set or cleared since.
func (m *Machine) ListSessions(entityID uint64, partition uint32, skip, top uint32, updatedSinceMs int64) ([]string, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	e, err := m.sessionEntity(entityID, partition)
	if err != nil {
		return nil, err
	}
	return store.ListSessions(m.db, e.key, int(skip), int(min(top, MaxListSessions)), updatedSinceMs)
}

// SessionReady reports whether the entity partition has a session with
// available messages and no lock: one that an accept-next would take.
func (m *Machine) SessionReady(entityID uint64, partition uint32) bool {
	m.mu.RLock()
	defer m.mu.RUnlock()
	e, err := m.sessionEntity(entityID, partition)
	if err != nil {
		return false
	}
	_, _, ok, err := e.ready.FirstReady(m.db, e.key)
	if err != nil {
		m.log.Error("partition: session ready", "entity", e.key, "err", err)
	}
	return ok
}

// SessionAvailable reports whether a session has available messages (it
// may have expired ones: Lock drops those).
func (m *Machine) SessionAvailable(entityID uint64, partition uint32, sid string) bool {
	m.mu.RLock()
	defer m.mu.RUnlock()
	e, err := m.sessionEntity(entityID, partition)
	if err != nil {
		return false
	}
	r, err := store.ReadSession(m.db, e.key, sid)
	if err != nil {
		m.log.Error("partition: session available", "entity", e.key, "err", err)
		return false
	}
	return r.Avail > 0
}

// PeekSession is Peek restricted to one session's messages (a session
// receiver's peek). On an entity that requires sessions it reads the
// session's own entries (stream, held, parked: every message of the
// session in the main sub-queue) merged in sequence order, so its cost
// does not grow with the other sessions' messages; elsewhere it filters
// the entity partition's messages.
func (m *Machine) PeekSession(entityID uint64, partition uint32, from uint64, max uint32, nowMs int64, sessionID string) ([]*partitionpb.Message, error) {
	return m.peekSession(entityID, partition, from, max, nowMs, sessionID, PeekBounds{})
}

func (m *Machine) peekSession(entityID uint64, partition uint32, from uint64, max uint32, nowMs int64, sessionID string, b PeekBounds) ([]*partitionpb.Message, error) {
	m.mu.RLock()
	e, ok := m.entities[ekey{ID: entityID, Part: partition}]
	indexed := ok && e.cfg.RequiresSession
	m.mu.RUnlock()
	if !indexed {
		return m.peek(entityID, partition, partitionpb.SubQueue_SUB_QUEUE_MAIN, from, max, nowMs, sessionID, b)
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	if err := m.usable(); err != nil {
		return nil, err
	}
	e, err := m.sessionEntity(entityID, partition)
	if err != nil {
		return nil, err
	}
	if err := checkSessionID(sessionID); err != nil {
		return nil, err
	}
	page := newPeekPage(max, b)
	if page.want == 0 {
		return nil, nil
	}
	scan, err := store.ScanSession(m.db, e.key, sessionID, from)
	if err != nil {
		return nil, err
	}
	defer scan.Close()
	for !page.full() {
		seq, ok, err := scan.Next()
		if err != nil {
			return nil, err
		}
		if !ok {
			break
		}
		msg, err := store.ReadState(m.db, e.key, partitionpb.SubQueue_SUB_QUEUE_MAIN, seq)
		if err != nil {
			return nil, err
		}
		if msg == nil {
			return nil, fmt.Errorf("%w: %s: session %q names message %d, which is not there", ErrCorrupt, e.key, sessionID, seq)
		}
		if msg.State != partitionpb.MessageState_MESSAGE_STATE_SCHEDULED && expired(msg, nowMs) {
			continue
		}
		more, err := page.add(m.db, m.logs, e.key, msg)
		if err != nil {
			return nil, err
		}
		if !more {
			break
		}
	}
	return page.out, nil
}

// sessionOf reports whether a peeked message belongs to the session a
// peek names ("": every message).
func sessionOf(msg *partitionpb.StoredMessage, sid string) bool {
	return sid == "" || msg.SessionId == sid
}
