package partition

import (
	"fmt"

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
	e, ok := m.entities[ekey{entityID, partition}]
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
	r, err := readSession(m.db, e.key, sid)
	if err != nil {
		return nil, err
	}
	if !r.lockedBy(token, nowMs) {
		return nil, fmt.Errorf("%w: session %q of %s", ErrSessionLockLost, sid, e.cfg.Name)
	}
	return r.state, nil
}

// ListSessions returns the ids of the sessions that have messages, state
// or a lock, in id order, skipping skip, at most top (capped at
// MaxListSessions).
func (m *Machine) ListSessions(entityID uint64, partition uint32, skip, top uint32) ([]string, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	e, err := m.sessionEntity(entityID, partition)
	if err != nil {
		return nil, err
	}
	return listSessions(m.db, e.key, int(skip), int(min(top, MaxListSessions)))
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
	_, ok, err := firstReadySession(m.db, e.key)
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
	r, err := readSession(m.db, e.key, sid)
	if err != nil {
		m.log.Error("partition: session available", "entity", e.key, "err", err)
		return false
	}
	return r.avail > 0
}

// sessionOf reports whether a peeked message belongs to the session a
// peek names ("": every message).
func sessionOf(msg *partitionpb.StoredMessage, sid string) bool {
	return sid == "" || msg.SessionId == sid
}
