package partition

import (
	"github.com/quorumbus/quorumbus/partition/store"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// The leader's clock: the machine reads no clock of its own; the commands
// that act on time (lock and message expiry, scheduled activation, session
// lock expiry) are stamped and proposed by the group's leader when their
// due times, read here, pass.

// Timer is a leader-clock command: the machine reads no clock, so the
// group's leader proposes Command (stamped with its clock) once its clock
// passes the time Next returns (node's runClock). Each such command does a
// bounded amount of work and the leader proposes it again while Next stays
// due. A new timed command is added to Timers alone.
type Timer struct {
	Name    string
	Next    func() (ms int64, ok bool)
	Command *partitionpb.Command
}

// Timers are the machine's leader-clock commands: lock expiry, scheduled
// activation, message expiry and session lock expiry.
func (m *Machine) Timers() []Timer {
	return []Timer{
		{Name: "ExpireLocks", Next: m.NextLockExpiry,
			Command: &partitionpb.Command{Op: &partitionpb.Command_ExpireLocks{ExpireLocks: &partitionpb.ExpireLocks{}}}},
		{Name: "ActivateScheduled", Next: m.NextScheduledDue,
			Command: &partitionpb.Command{Op: &partitionpb.Command_ActivateScheduled{ActivateScheduled: &partitionpb.ActivateScheduled{}}}},
		{Name: "ExpireMessages", Next: m.NextMessageExpiry,
			Command: &partitionpb.Command{Op: &partitionpb.Command_ExpireMessages{ExpireMessages: &partitionpb.ExpireMessages{}}}},
		{Name: "ExpireSessionLocks", Next: m.NextSessionLockExpiry,
			Command: &partitionpb.Command{Op: &partitionpb.Command_ExpireSessionLocks{ExpireSessionLocks: &partitionpb.ExpireSessionLocks{}}}},
	}
}

// RearmsTimers reports whether applying c may create a due time of a
// Timer or move one (a lock, a scheduled message, a message with a time to
// live, a session lock), so that the leader, once c is applied, reads the
// timers' Next again instead of sleeping until the due time it knew. The
// timers' own commands are not among them: the leader reads Next again
// after proposing those anyway. A command that adds a due time is added
// here alone.
func RearmsTimers(c *partitionpb.Command) bool {
	switch c.GetOp().(type) {
	case *partitionpb.Command_Lock, *partitionpb.Command_RenewLocks, *partitionpb.Command_UpsertEntity,
		*partitionpb.Command_Enqueue, *partitionpb.Command_Settle, *partitionpb.Command_LockBySequence,
		*partitionpb.Command_AcceptSession, *partitionpb.Command_RenewSessionLock, *partitionpb.Command_ReleaseSession:
		return true
	}
	return false
}

// NextLockExpiry returns the earliest locked_until_ms of any lock in the
// group; ok is false when nothing is locked. The leader proposes
// ExpireLocks once its clock passes it.
//
// Only a leader asks, so followers, which apply the same locks, never
// scan for the earliest: Apply marks an entity whose locks changed, and
// the scan runs here, once for however many entries were applied since.
// (It ran after every Apply: 4.4% of the dev cluster's CPU receiving.)
func (m *Machine) NextLockExpiry() (ms int64, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.usable() != nil {
		return 0, false
	}
	for _, e := range m.entities {
		if e.locks.Stale {
			if err := e.locks.Load(m.db); err != nil {
				m.fail(err)
				return 0, false
			}
		}
		if until, has := e.locks.Min(); has && (!ok || until < ms) {
			ms, ok = until, true
		}
	}
	return ms, ok
}

// NextScheduledDue returns the earliest scheduled_enqueue_time_ms of any
// scheduled message in the group, or of a topic's record of one
// (topiccounts.go); ok is false when none is scheduled. The leader
// proposes ActivateScheduled once its clock passes it.
func (m *Machine) NextScheduledDue() (ms int64, ok bool) {
	ms, ok = m.earliest(func(e *entity) *store.TimeIndex { return &e.sched })
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.usable() != nil {
		return 0, false
	}
	if at, has := m.nextTopicScheduledDue(); has && (!ok || at < ms) {
		ms, ok = at, true
	}
	return ms, ok
}

// NextMessageExpiry returns the earliest expires_at_ms of any message that
// ExpireMessages may end (unlocked, not scheduled, in a main sub-queue);
// ok is false when there is none. The leader proposes ExpireMessages once
// its clock passes it.
func (m *Machine) NextMessageExpiry() (ms int64, ok bool) {
	return m.earliest(func(e *entity) *store.TimeIndex { return &e.exp })
}

// NextSessionLockExpiry returns the earliest end of any session lock in
// the group; ok is false when no session is locked. The leader proposes
// ExpireSessionLocks once its clock passes it.
func (m *Machine) NextSessionLockExpiry() (ms int64, ok bool) {
	return m.earliest(func(e *entity) *store.TimeIndex { return &e.slock })
}

func (m *Machine) earliest(index func(*entity) *store.TimeIndex) (ms int64, ok bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.usable() != nil {
		return 0, false
	}
	for _, e := range m.entities {
		if at, has := index(e).Min(); has && (!ok || at < ms) {
			ms, ok = at, true
		}
	}
	return ms, ok
}
