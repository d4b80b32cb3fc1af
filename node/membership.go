package node

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/hashicorp/raft"

	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// membership serves GroupMembership: the placement leader's view into a
// group's replicas and its way to change them, one step of a move at a
// time (add a learner, promote it, remove the replica that leaves).
type membership struct {
	partitionpb.UnimplementedGroupMembershipServer
	n *Node
}

// changeTimeout bounds a configuration change: it commits like any entry,
// unless the group has no quorum.
const changeTimeout = 10 * time.Second

func (m *membership) GroupStatus(ctx context.Context, req *partitionpb.GroupStatusRequest) (*partitionpb.GroupStatusResponse, error) {
	if req.GroupId == MetaGroup {
		if mg := m.n.metaGuard.Load(); mg != nil {
			return mg.status()
		}
	}
	g, err := m.n.group(req.GroupId)
	if err != nil {
		return nil, m.n.notOpenStatus(req.GroupId, err)
	}
	_, leader := g.raft.LeaderWithID()
	commit, _ := strconv.ParseUint(g.raft.Stats()["commit_index"], 10, 64)
	resp := &partitionpb.GroupStatusResponse{
		State:        g.raft.State().String(),
		LeaderId:     string(leader),
		Term:         g.raft.CurrentTerm(),
		AppliedIndex: g.machine.AppliedIndex(),
		LastIndex:    g.raft.LastIndex(),
		CommitIndex:  commit,
	}
	f := g.raft.GetConfiguration()
	if err := f.Error(); err == nil {
		resp.Configuration = configOf(f.Configuration())
	}
	return resp, nil
}

func (m *membership) ChangeReplica(ctx context.Context, req *partitionpb.ChangeReplicaRequest) (*partitionpb.ChangeReplicaResponse, error) {
	if req.NodeId == "" {
		return nil, toStatus(fmt.Errorf("%w: ChangeReplica without node_id", ErrInvalid))
	}
	g, err := m.n.group(req.GroupId)
	if err != nil {
		return nil, toStatus(err)
	}
	if g.raft.State() != raft.Leader {
		return nil, toStatus(g.leaderError(raft.ErrNotLeader))
	}
	id, addr := raft.ServerID(req.NodeId), raft.ServerAddress(req.Addr)
	var f raft.IndexFuture
	switch req.Change {
	case partitionpb.ReplicaChange_REPLICA_CHANGE_ADD_LEARNER:
		if addr == "" {
			return nil, toStatus(fmt.Errorf("%w: adding %s without an address", ErrInvalid, id))
		}
		if cur, ok := g.server(id); ok && cur.Suffrage == raft.Voter {
			break // a voter already: adding it as a learner would demote it
		}
		f = g.raft.AddNonvoter(id, addr, 0, changeTimeout)
	case partitionpb.ReplicaChange_REPLICA_CHANGE_PROMOTE:
		if addr == "" {
			return nil, toStatus(fmt.Errorf("%w: promoting %s without an address", ErrInvalid, id))
		}
		f = g.raft.AddVoter(id, addr, 0, changeTimeout)
	case partitionpb.ReplicaChange_REPLICA_CHANGE_REMOVE:
		if _, ok := g.server(id); !ok {
			break
		}
		if id == raft.ServerID(m.n.cfg.ID) {
			// A leader that removes itself leaves the group leaderless
			// until an election: hand the leadership over first, and let
			// the new leader remove this replica (the caller follows the
			// hint).
			if err := g.raft.LeadershipTransfer().Error(); err != nil {
				return nil, toStatus(fmt.Errorf("node: group %d: handing over leadership before leaving: %w", req.GroupId, g.leaderError(err)))
			}
			return nil, toStatus(g.leaderError(raft.ErrNotLeader))
		}
		f = g.raft.RemoveServer(id, 0, changeTimeout)
	case partitionpb.ReplicaChange_REPLICA_CHANGE_LEAD:
		if id == raft.ServerID(m.n.cfg.ID) {
			break // leads already
		}
		// hashicorp/raft refuses every proposal while a transfer runs,
		// and a transfer to a replica that is behind can run for as long
		// as that replica's catch-up (its replication goroutine may be
		// sending a snapshot, and the transfer waits on it first). So
		// only a replica within maxTransferLag entries of this leader's
		// log is handed the leadership.
		if last, ok := g.trans.FollowerLastLog(addr); !ok || last+maxTransferLag < g.raft.LastIndex() {
			return nil, toStatus(fmt.Errorf("%w: group %d: %s (last log %d, the leader's %d); not handing it the leadership", ErrReplicaBehind, req.GroupId, id, last, g.raft.LastIndex()))
		}
		if err := g.raft.LeadershipTransferToServer(id, addr).Error(); err != nil {
			return nil, toStatus(fmt.Errorf("node: group %d: handing the leadership to %s: %w", req.GroupId, id, g.leaderError(err)))
		}
		m.n.log.Info("group leadership handed over", "group", req.GroupId, "to", req.NodeId)
	default:
		return nil, toStatus(fmt.Errorf("%w: change %v", ErrInvalid, req.Change))
	}
	if f != nil {
		if err := f.Error(); err != nil {
			return nil, toStatus(fmt.Errorf("node: group %d: %v %s: %w", req.GroupId, req.Change, id, g.leaderError(err)))
		}
		m.n.log.Info("group membership changed", "group", req.GroupId, "change", req.Change.String(), "replica", req.NodeId)
	}
	cf := g.raft.GetConfiguration()
	if err := cf.Error(); err != nil {
		return nil, toStatus(g.leaderError(err))
	}
	return &partitionpb.ChangeReplicaResponse{Configuration: configOf(cf.Configuration())}, nil
}

// server returns the group's latest configuration entry for id.
func (g *group) server(id raft.ServerID) (raft.Server, bool) {
	f := g.raft.GetConfiguration()
	if f.Error() != nil {
		return raft.Server{}, false
	}
	for _, s := range f.Configuration().Servers {
		if s.ID == id {
			return s, true
		}
	}
	return raft.Server{}, false
}

// followers is a leader's view of its followers' logs against its commit
// index: the last log index each reported in its latest answer to an
// AppendEntries (heartbeats included, so a follower that stopped
// answering keeps the index it had while the commit index moves on).
func (g *group) followers(commit uint64) []FollowerProgress {
	f := g.raft.GetConfiguration()
	if f.Error() != nil {
		return nil
	}
	var out []FollowerProgress
	for _, s := range f.Configuration().Servers {
		if s.ID == raft.ServerID(g.node.cfg.ID) {
			continue
		}
		p := FollowerProgress{ID: string(s.ID)}
		p.LastLog, p.Known = g.trans.FollowerLastLog(s.Address)
		if p.Known && p.LastLog < commit {
			p.Lag = commit - p.LastLog
		}
		out = append(out, p)
	}
	return out
}

func configOf(c raft.Configuration) []*partitionpb.ReplicaConfig {
	out := make([]*partitionpb.ReplicaConfig, len(c.Servers))
	for i, s := range c.Servers {
		out[i] = &partitionpb.ReplicaConfig{NodeId: string(s.ID), Addr: string(s.Address), Voter: s.Suffrage == raft.Voter}
	}
	return out
}

// maxTransferLag is how far behind this leader's last log index a
// replica may be and still be handed the leadership: a moment's entries.
const maxTransferLag = 64
