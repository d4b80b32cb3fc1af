package node

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quorumbus/quorumbus/node/raftmux"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// MetaGuard keeps this node's member of the meta group (the placement
// catalog's Raft, which placement runs over RaftTransport(MetaGroup)) out
// of the group's elections while it rejoins, as rejoin.go does for a
// partition group's replica, and tells a bootstrap voter whether the
// group exists already. placement.Config.Guard takes it (cmd wires the
// two: placement and node meet only there).
//
// The meta group differs in one way: each of its first voters bootstraps
// it with the same list (-bootstrap), so they all hold Raft state before
// they vote and none of them rejoins; there is no bootstrapper to exempt.
// A member that opens without Raft state is one added later by the meta
// leader, one whose disk was lost, or a first voter waiting for its peers
// to show the group is new (Exists). Each rejoins until a leader reaches
// it.
type MetaGuard struct {
	n     *Node
	trans *raftmux.Transport

	mu     sync.Mutex
	rejoin *rejoin
	logs   raft.LogStore
	stable raft.StableStore
}

// MetaGuard returns the guard of the meta group's member that runs over
// trans, which must come from RaftTransport(MetaGroup). Its status answers
// the peers' GroupStatus for MetaGroup once Open has run.
func (n *Node) MetaGuard(trans raft.Transport) (*MetaGuard, error) {
	t, ok := trans.(*raftmux.Transport)
	if !ok || t.Group() != MetaGroup {
		return nil, fmt.Errorf("%w: the meta guard needs the transport of RaftTransport(MetaGroup)", ErrInvalid)
	}
	g := &MetaGuard{n: n, trans: t}
	n.metaGuard.Store(g)
	return g, nil
}

// Open is called before the member's Raft starts, with whether its stores
// hold Raft state, and the stores. A member without state (or that had
// not caught up when it stopped) withholds its vote until a leader has
// brought it up to date.
func (m *MetaGuard) Open(hasState bool, stable raft.StableStore, logs raft.LogStore) error {
	rj, err := openRejoin(stable, hasState, nil, m.n.log.With("group", MetaGroup))
	if err != nil {
		return fmt.Errorf("node: meta group: %w", err)
	}
	m.mu.Lock()
	m.rejoin, m.logs, m.stable = rj, logs, stable
	m.mu.Unlock()
	if rj != nil {
		m.trans.WithholdVotes(rj.withholding)
		m.trans.ObserveAppends(rj.appended)
	}
	return nil
}

// Bootstrapped ends the rejoin of a first voter that has bootstrapped the
// group, having learnt from Exists that it is new.
func (m *MetaGuard) Bootstrapped() {
	m.mu.Lock()
	rj := m.rejoin
	m.mu.Unlock()
	if rj != nil {
		rj.finish("bootstrapped a new meta group")
	}
}

// ErrUndecided: not every other first voter has answered yet.
var ErrUndecided = errors.New("node: not every other voter has answered")

// Exists asks the meta group's other first voters (every voter but this
// node) whether the group exists: true once one holds an entry past the
// bootstrap entry (a leader wrote it: the group formed), false once every
// one has answered that it holds no more than the bootstrap entry, and
// ErrUndecided until then. The first leader of a meta group is one of its
// first voters and writes past the bootstrap entry before anything
// commits, so a group none of whose first voters holds more never
// committed anything; it takes every one of them, since one that holds
// the group's entries may be the one that is down.
func (m *MetaGuard) Exists(ctx context.Context, voters []raft.Server) (bool, error) {
	timeout := max(m.n.cfg.ElectionTimeout, 200*time.Millisecond)
	answered := 0
	others := 0
	for _, v := range voters {
		if string(v.ID) == m.n.cfg.ID {
			continue
		}
		others++
		cc, err := m.n.mux.Conn(v.Address)
		if err != nil {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, timeout)
		st, err := partitionpb.NewGroupMembershipClient(cc).GroupStatus(cctx, &partitionpb.GroupStatusRequest{GroupId: MetaGroup})
		cancel()
		if err != nil {
			continue
		}
		if metaFormed(st) {
			return true, nil
		}
		answered++
	}
	if answered < others {
		return false, fmt.Errorf("%w (%d of %d)", ErrUndecided, answered, others)
	}
	return false, nil
}

// metaFormed tells from a first voter's status whether the meta group
// formed: its log holds an entry past the bootstrap entry, which only a
// leader writes. A log compacted after a snapshot may be empty; its term
// then tells: a leader's term is 2 at least (bootstrapping sets term 1,
// and the first election raises it), and a first voter that has not
// bootstrapped withholds its vote, so its term stays 0. Term 1 with an
// empty log is a voter halfway through bootstrapping (hashicorp/raft
// writes the term before the bootstrap entry): counted formed, two first
// voters that asked it then each gave up bootstrapping, withheld their
// votes from the third, and the group never elected a leader.
func metaFormed(st *partitionpb.GroupStatusResponse) bool {
	return st.LastIndex > 1 || (st.LastIndex == 0 && st.Term > 1)
}

// status is what GroupStatus answers for MetaGroup: the member's current
// term and last log index, read from its stores. Only the parts a peer's
// Exists reads are filled in.
func (m *MetaGuard) status() (*partitionpb.GroupStatusResponse, error) {
	m.mu.Lock()
	logs, stable := m.logs, m.stable
	m.mu.Unlock()
	if logs == nil {
		return nil, status.Errorf(codes.NotFound, "node: the meta group's member has not started here")
	}
	last, err := logs.LastIndex()
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "node: meta group: %v", err)
	}
	// hashicorp/raft keeps the current term under this key.
	term, err := stable.GetUint64([]byte("CurrentTerm"))
	if err != nil {
		term = 0 // none yet
	}
	return &partitionpb.GroupStatusResponse{Term: term, LastIndex: last}, nil
}
