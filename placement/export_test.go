package placement

import "github.com/quorumbus/quorumbus/placement/catalog"

// PendingTasks counts this member's catalog's partition tasks.
func (s *Service) PendingTasks() int {
	n := 0
	s.fsm.Read(func(st *catalog.State) { n = len(st.Tasks()) })
	return n
}

// TakeSnapshot makes this member snapshot the catalog and compact its log.
func (s *Service) TakeSnapshot() error { return s.raft.Load().Snapshot().Error() }
