package node

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quorumbus/quorumbus/node/raftmux"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// A replica that opens without Raft state (docs/recovery.md, "A replica
// on an empty disk").
//
// hashicorp/raft lets a replica with an empty log and no record of its
// votes vote at once. That is right for a replica that never took part in
// its group, and wrong for one whose data directory was lost (a new disk,
// a pod rescheduled onto a fresh volume) and that restarts under its old
// id: its old self may have held entries the group counted to commit, and
// may have voted in a term; the empty one would help elect a candidate
// without those entries, or vote twice in one term. The replica cannot
// tell the two apart from its own disk, so every replica that opens
// without Raft state rejoins as a new replica would:
//
//  1. It asks for no vote, takes no leadership transfer, and votes for no
//     candidate, until a leader has reached it and its log holds an entry
//     of that leader's term at or past the commit index the leader
//     announced. A leader elected without this replica holds every
//     committed entry, and an entry of its term follows all of them in
//     its log; so from then on this replica's log holds what its old self
//     may have promised, as far as anyone relies on it.
//  2. One candidate is exempt: the group's bootstrapper (its first
//     replica, not joined by a move) whose log is the bootstrap entry
//     alone. Every replica of a brand-new group starts empty, and without
//     this exemption the bootstrapper could never gather a majority.
//     It is safe: the first leader of a group is its bootstrapper (the
//     others have no configuration and never campaign), and a leader's
//     first act writes an entry past the bootstrap entry; a bootstrapper
//     whose log holds nothing more never led and never followed, so
//     nothing was ever committed.
//  3. Rule 2 would make a bootstrapper that lost its disk dangerous: it
//     would bootstrap again and claim to be new. So the bootstrapper of a
//     group of more than one replica first asks its peers (GroupStatus)
//     and bootstraps only once every one of them has answered that it
//     holds no Raft state for the group; when one holds some, the group
//     exists and the bootstrapper rejoins as in rule 1. A majority would
//     not do: a peer that opened the group and died before it heard from
//     anyone answers "empty" for good, and with the one peer that holds
//     the group's entries down, the wiped bootstrapper and it would start
//     a second history. The price: a group whose replica is down when
//     it is created forms once that replica is up.
//
// The rejoin mark in the stable store keeps a replica rejoining across
// restarts until rule 1 lets it go: a replica that crashed half caught
// up has Raft state, but not what its old self promised.

// rejoinKey marks, in a group's stable store, a replica that rejoins: set
// before its raft starts, emptied once it has caught up.
var rejoinKey = []byte("quorumbus/rejoining")

// Bounds of the backoff between two rounds of asking the peers whether
// the group exists (rule 3).
const (
	bootstrapProbeMin = 50 * time.Millisecond
	bootstrapProbeMax = time.Second
)

// rejoin is the state of a replica that rejoins its group.
type rejoin struct {
	// bootstrapper is the replica whose bootstrap-only candidacy this one
	// votes for (rule 2); "" when the group's first replica joined by a
	// move, and so bootstraps nothing.
	bootstrapper raft.ServerID
	stable       raft.StableStore
	log          *slog.Logger

	active atomic.Bool // rule 1 holds
}

// openRejoin returns the rejoin state of a replica opened with or without
// Raft state (hasState), or nil when it votes as Raft says. It marks a
// replica that opens empty before its raft starts.
func openRejoin(stable raft.StableStore, hasState bool, replicas []Peer, log *slog.Logger) (*rejoin, error) {
	marked, err := stable.Get(rejoinKey)
	if err != nil && !errors.Is(err, raftboltdb.ErrKeyNotFound) {
		return nil, fmt.Errorf("read the rejoin mark: %w", err)
	}
	if hasState && len(marked) == 0 {
		return nil, nil
	}
	if len(marked) == 0 {
		if err := stable.Set(rejoinKey, []byte{1}); err != nil {
			return nil, fmt.Errorf("write the rejoin mark: %w", err)
		}
	}
	r := &rejoin{stable: stable, log: log}
	if len(replicas) > 0 && !replicas[0].Joined {
		r.bootstrapper = raft.ServerID(replicas[0].ID)
	}
	r.active.Store(true)
	log.Info("rejoining: this replica opened without Raft state (or had not caught up since); it votes once a leader has brought it up to date",
		"had_state", hasState)
	return r, nil
}

// withholding says why this replica does not vote in b, or nil (rules 1
// and 2).
func (r *rejoin) withholding(b raftmux.Ballot) error {
	if !r.active.Load() {
		return nil
	}
	if !b.Self && b.Candidate != "" && b.Candidate == r.bootstrapper && b.LastLogIndex == 1 && b.LastLogTerm == 1 {
		return nil
	}
	return errors.New("vote withheld: this replica opened without Raft state (a new replica, or one whose disk was lost) and has not yet caught up from a leader; it votes once its log holds an entry of the term of a leader that reached it, at or past that leader's commit index")
}

// appended ends rule 1 once a successful AppendEntries shows this
// replica's log holds an entry of the leader's term at or past the commit
// index the leader announced. On success raft's log matches the leader's
// through the request's last entry (or its previous entry, when it
// carries none); heartbeats carry neither and prove nothing.
func (r *rejoin) appended(req *raft.AppendEntriesRequest, _ *raft.AppendEntriesResponse) {
	if !r.active.Load() {
		return
	}
	index, term := req.PrevLogEntry, req.PrevLogTerm
	if n := len(req.Entries); n > 0 {
		index, term = req.Entries[n-1].Index, req.Entries[n-1].Term
	}
	if index == 0 || term != req.Term || index < req.LeaderCommitIndex {
		return
	}
	r.finish("caught up from the leader", "term", term, "index", index, "leader_commit", req.LeaderCommitIndex)
}

// finish ends rule 1 and removes the mark. Failing to remove it costs a
// later restart another wait for a leader, nothing more.
func (r *rejoin) finish(why string, args ...any) {
	if !r.active.CompareAndSwap(true, false) {
		return
	}
	r.log.Info("rejoined: votes as any replica from now on; "+why, args...)
	if err := r.stable.Set(rejoinKey, []byte{}); err != nil {
		r.log.Warn("removing the rejoin mark", "err", err)
	}
}

// votes combines the rules that keep this replica's vote: the rejoin's
// and the log's written ahead of fsync (withhold.go).
func (g *group) votes(b raftmux.Ballot) error {
	if g.rejoin != nil {
		if err := g.rejoin.withholding(b); err != nil {
			return err
		}
	}
	if g.ahead != nil {
		return g.ahead.withholding(b.LastLogTerm)
	}
	return nil
}

// bootstrapWhenNew bootstraps the group once its peers show it is new
// (rule 3), and gives up once they show it exists or a leader reaches
// this replica first.
func (g *group) bootstrapWhenNew(replicas []Peer) {
	backoff := bootstrapProbeMin
	for g.ctx.Err() == nil && g.rejoin.active.Load() {
		if g.raft.LastIndex() > 0 {
			return // a leader reached it: the group exists
		}
		empty, exists, who := g.probePeers(replicas)
		if exists {
			g.log.Warn("not bootstrapping: a peer already holds Raft state for the group, so this replica lost its own; it rejoins and waits for a leader", "peer", who)
			return
		}
		if empty == len(replicas)-1 {
			servers := make([]raft.Server, len(replicas))
			for i, p := range replicas {
				servers[i] = raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(p.ID), Address: raft.ServerAddress(p.Addr)}
			}
			if err := g.raft.BootstrapCluster(raft.Configuration{Servers: servers}).Error(); err != nil {
				if !errors.Is(err, raft.ErrCantBootstrap) {
					g.log.Warn("bootstrap", "err", err)
				}
				return
			}
			g.log.Info("bootstrapped group", "replicas", len(replicas), "empty_peers", empty)
			g.rejoin.finish("bootstrapped a new group")
			return
		}
		select {
		case <-time.After(backoff):
		case <-g.ctx.Done():
		}
		backoff = min(2*backoff, bootstrapProbeMax)
	}
}

// probePeers asks the group's other replicas whether they hold Raft state
// for it: how many answered that they hold none, and whether one does
// (and which). A peer that does not answer, or has not opened the group,
// counts for neither. replicas must not list this node twice.
func (g *group) probePeers(replicas []Peer) (empty int, exists bool, who string) {
	timeout := max(g.node.cfg.ElectionTimeout, 200*time.Millisecond)
	for _, p := range replicas {
		if p.ID == g.node.cfg.ID {
			continue
		}
		cc, err := g.node.mux.Conn(raft.ServerAddress(p.Addr))
		if err != nil {
			continue
		}
		ctx, cancel := context.WithTimeout(g.ctx, timeout)
		st, err := partitionpb.NewGroupMembershipClient(cc).GroupStatus(ctx, &partitionpb.GroupStatusRequest{GroupId: g.id})
		cancel()
		switch {
		case err != nil && absent(err):
			empty++
		case err != nil:
			if status.Code(err) != codes.NotFound {
				g.log.Debug("asking a peer whether the group exists", "peer", p.ID, "err", err)
			}
		case st.Term == 0 && st.LastIndex == 0:
			empty++
		default:
			return empty, true, p.ID
		}
	}
	return empty, false, ""
}

// absentState is the State of the GroupStatusResponse that a node
// attaches to its refusal of GroupStatus for a group it has not open and
// holds no Raft state of on disk (notOpenStatus).
const absentState = "Absent"

// notOpenStatus is GroupStatus's answer for group id, which this node
// has not open (err says why). When the node holds no stable store of
// the group on disk, the answer carries a GroupStatusResponse of
// absentState: the replica holds no Raft state, which is what a peer
// deciding whether to bootstrap asks (bootstrapWhenNew). A replica that
// failed to open because its directory cannot be made is such a one; one
// whose files exist and cannot be read is not known to be empty. The code
// stays what it was, for the callers that only look at it.
func (n *Node) notOpenStatus(id uint64, err error) error {
	serr := toStatus(err)
	if id == MetaGroup || n.isRetired(id) {
		return serr
	}
	_, statErr := os.Stat(filepath.Join(raftDir(n.groupDir(id)), "stable.db"))
	if !errors.Is(statErr, fs.ErrNotExist) && !errors.Is(statErr, syscall.ENOTDIR) {
		return serr
	}
	st := status.Convert(serr)
	if with, derr := st.WithDetails(&partitionpb.GroupStatusResponse{State: absentState}); derr == nil {
		return with.Err()
	}
	return serr
}

// absent tells whether a GroupStatus refusal says the replica holds no
// Raft state (notOpenStatus).
func absent(err error) bool {
	for _, d := range status.Convert(err).Details() {
		if st, ok := d.(*partitionpb.GroupStatusResponse); ok && st.GetState() == absentState {
			return true
		}
	}
	return false
}
