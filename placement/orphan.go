package placement

import (
	"time"

	"github.com/hashicorp/raft"
)

// A member that hears from no leader for long stops serving the routing
// table from its own replica.
//
// Its catalog stops changing while it has no leader: in a minority
// partition, while the meta group has no quorum, or for good when the
// leader removed it from the group (metavoters.go) without it ever
// receiving the entry that removes it (the leader stops replicating to a
// removed server at once). Such a removed member still finds itself in
// its own configuration, so Member() says yes, and, serving its frozen
// table, it would keep its storage node, and any front-end watching it,
// on routes that moved on: replicas that moved away stay open, and
// entities created since are unknown. So after orphanAfter without a
// leader, WatchRoutes answers UNAVAILABLE (ErrOrphaned) and ends the
// streams it serves; the watchers (the storage node's own agent, the
// front-ends' routers) then read the table from another member, which
// for a removed member means the live group's.
//
// The price: while the whole meta group has been without a leader for
// orphanAfter, no member serves a table, so a process started then waits
// for the meta group to recover; processes that had a table keep it.

// orphanAfter is how long a member may go without a leader before it
// counts as orphaned: ten election timeouts (10 s by default), well past
// an election or a leader's restart.
func (s *Service) orphanAfter() time.Duration { return 10 * s.cfg.ElectionTimeout }

// Orphaned reports whether this member has heard from no meta leader for
// orphanAfter (a leader is never orphaned). It counts from the start of
// Raft on this member, not from the beginning of time.
func (s *Service) Orphaned() bool {
	r := s.raft.Load()
	if r == nil {
		return false
	}
	if r.State() == raft.Leader {
		return false
	}
	last := r.LastContact()
	if last.Before(s.startedAt) {
		last = s.startedAt
	}
	return time.Since(last) > s.orphanAfter()
}
