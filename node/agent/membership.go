package agent

import (
	"context"
	"slices"
	"time"

	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// Replicas removed from their group's configuration (node/retire.go).
//
// A replica that has known no leader for LeaderlessAfter may be one the
// group's leader removed without its hearing of it. The agent asks the
// group's other replicas, as the latest table lists them, for the
// group's status; the one that leads answers with its configuration. A
// replica that configuration does not hold is retired: closed, quiet,
// its data kept until the table takes the group off this node. A retired
// replica that the leader's configuration holds again (a move brought
// the group back, adding it as a learner first) is let open again.
// Without a leader that answers, nothing changes.

// statusTimeout bounds one GroupStatus call to another replica.
const statusTimeout = time.Second

// startMembershipCheck checks, in the background, the replicas of
// leaderless and the retired ones, unless a check runs still.
func (a *Agent) startMembershipCheck(ctx context.Context, leaderless []uint64) {
	retired := a.cfg.Node.Retired()
	if len(leaderless) == 0 && len(retired) == 0 {
		return
	}
	a.mu.Lock()
	if a.checking {
		a.mu.Unlock()
		return
	}
	a.checking = true
	a.checks.Add(1)
	a.mu.Unlock()
	go func() {
		defer a.checks.Done()
		defer func() {
			a.mu.Lock()
			a.checking = false
			a.mu.Unlock()
		}()
		a.checkMembership(ctx, leaderless, retired)
	}()
}

func (a *Agent) checkMembership(ctx context.Context, leaderless, retired []uint64) {
	n := a.cfg.Node
	for _, id := range leaderless {
		if member, known := a.leaderCounts(ctx, id); known && !member {
			if err := n.Retire(id); err != nil {
				a.log.Warn("retire a replica removed from its group", "group", id, "err", err)
			}
		}
	}
	for _, id := range retired {
		if member, known := a.leaderCounts(ctx, id); known && member {
			a.log.Info("a retired replica is a member of its group again", "group", id)
			n.Unretire(id)
			a.mu.Lock()
			peers := a.peers[id]
			a.mu.Unlock()
			if peers == nil {
				continue // the table no longer places it here: apply removes it
			}
			if err := n.EnsureGroup(id, peers); err != nil {
				a.log.Debug("open group", "group", id, "err", err)
			}
		}
	}
}

// leaderCounts asks the group's other replicas whether its leader counts
// this node's replica in its configuration; known is false when no
// replica answered as the leader.
func (a *Agent) leaderCounts(ctx context.Context, group uint64) (member, known bool) {
	self := a.cfg.Node.ID()
	a.mu.Lock()
	peers := slices.Clone(a.peers[group])
	a.mu.Unlock()
	for _, p := range peers {
		if p.ID == self || p.Addr == "" {
			continue
		}
		cc, err := a.pc.conn(p.Addr)
		if err != nil {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, statusTimeout)
		st, err := partitionpb.NewGroupMembershipClient(cc).GroupStatus(cctx, &partitionpb.GroupStatusRequest{GroupId: group})
		cancel()
		if err != nil || st.State != "Leader" || len(st.Configuration) == 0 {
			continue
		}
		return slices.ContainsFunc(st.Configuration, func(r *partitionpb.ReplicaConfig) bool { return r.NodeId == self }), true
	}
	return false, false
}
