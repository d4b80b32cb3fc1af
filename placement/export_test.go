package placement

import (
	"github.com/hashicorp/raft"

	"github.com/quorumbus/quorumbus/placement/catalog"
)

// PendingTasks counts this member's catalog's partition tasks.
func (s *Service) PendingTasks() int {
	n := 0
	s.fsm.Read(func(st *catalog.State) { n = len(st.Tasks()) })
	return n
}

// TakeSnapshot makes this member snapshot the catalog and compact its log.
func (s *Service) TakeSnapshot() error { return s.raft.Load().Snapshot().Error() }

// RaftStats is the meta group's raft state on this member, for a test's
// failure message.
func (s *Service) RaftStats() map[string]string {
	if r := s.raft.Load(); r != nil {
		return r.Stats()
	}
	return nil
}

// MetaConfiguration is the meta group's configuration as this member's
// raft knows it.
func (s *Service) MetaConfiguration() []raft.Server {
	if r := s.raft.Load(); r != nil {
		if f := r.GetConfiguration(); f.Error() == nil {
			return f.Configuration().Servers
		}
	}
	return nil
}
