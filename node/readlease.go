package node

import (
	"time"

	"github.com/hashicorp/raft"
)

// readLease is how long a quorum's acknowledgement of this replica's
// leadership lets it answer counter reads (Stats, GroupStats) without
// confirming it again. The followers acknowledge it with every answer to
// a heartbeat (sent every ElectionTimeout/10 to /5) or an append, so a
// leader in contact with a quorum always has a confirmation this recent;
// one that lost the quorum falls back to VerifyLeader, which fails. A
// deposed leader that has not noticed yet answers counts stale by at most
// readLease, well inside the second Service Bus's counts may lag; the true
// leader's are never stale (an acknowledged operation was applied on it
// before it was acknowledged).
func (n *Node) readLease() time.Duration { return n.cfg.ElectionTimeout / 3 }

// confirmLeadership returns nil once this replica, a ready leader,
// knows that no other replica can have been elected within readLease:
// from the followers' answers the transport keeps, else from a round of
// heartbeats (raft's VerifyLeader).
func (g *group) confirmLeadership() error {
	now := time.Now()
	conf := g.raft.GetConfiguration()
	if conf.Error() == nil && g.trans != nil {
		at := g.trans.LeadershipConfirmedAt(g.raft.CurrentTerm(), conf.Configuration(), raft.ServerID(g.node.cfg.ID), now)
		if now.Sub(at) < g.node.readLease() {
			return nil
		}
	}
	if err := g.raft.VerifyLeader().Error(); err != nil {
		return g.leaderError(err)
	}
	return nil
}
