package placement

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/hashicorp/raft"

	"github.com/quorumbus/quorumbus/placement/catalog"
	pb "github.com/quorumbus/quorumbus/proto/placementpb"
)

// The meta group's voters follow the storage nodes.
//
// The group starts with the bootstrap list's voters. A voter whose node is
// drained, or has been dead for GoneAfter, would otherwise stay a voter
// forever: a cluster scaled down through its bootstrap nodes would run its
// catalog on fewer and fewer live voters until it lost its quorum. Each
// control round the meta leader makes at most one change:
//
//   - with MetaVoters voters on usable nodes (alive, not draining) and a
//     voter on a drained or gone node, it removes that voter;
//   - with fewer than MetaVoters voters on usable nodes, it adds a usable
//     storage node that is not in the group, preferring a zone the usable
//     voters lack (every storage node runs the meta group's Raft and
//     catches up once it is listed).
//
// A voter removed while it is cut off (or while it is drained and
// stopped) never receives the configuration entry that removes it: the
// leader stops replicating to it at once. When its node comes back it
// still counts itself a member and knows no leader. After orphanAfter it
// counts as orphaned (orphan.go) and stops serving its frozen routing
// table, so its storage node reads the live group's table from another
// member, closes the replicas that moved away, and is ready again; the
// leader may add it back as a voter later, which brings its log up to
// date. (The chaos suite found the frozen table when this tending was
// first turned on; TestRemovedVoterStopsServingItsFrozenTable.)

// Adding comes before removing, so the usable voters never drop below what
// they were. A voter is never removed only because the cluster has more
// usable voters than MetaVoters (a bootstrap list of five keeps five). A
// node missing from the catalog (not yet registered) counts as usable.

// tendMetaVoters makes the round's one change, if any.
func (s *Service) tendMetaVoters(ctx context.Context) {
	r := s.raft.Load()
	if r == nil || r.State() != raft.Leader || s.cfg.MetaVoters < 0 {
		return
	}
	f := r.GetConfiguration()
	if f.Error() != nil {
		return
	}
	var nodes []*pb.Node
	s.fsm.Read(func(st *catalog.State) { nodes = st.Nodes() })
	byID := map[string]*pb.Node{}
	for _, n := range nodes {
		byID[n.Id] = n
	}
	now := time.Now()
	usable := func(n *pb.Node) bool { return n.Alive && !n.Draining }
	leaving := func(n *pb.Node) bool {
		return n.Draining || !n.Alive && n.DeadSinceMs != 0 && now.Sub(time.UnixMilli(n.DeadSinceMs)) >= s.cfg.GoneAfter
	}
	inGroup := map[string]bool{}
	var good, bad []raft.Server
	zones := map[string]bool{}
	for _, srv := range f.Configuration().Servers {
		inGroup[string(srv.ID)] = true
		if srv.Suffrage != raft.Voter {
			continue
		}
		n := byID[string(srv.ID)]
		switch {
		case n != nil && leaving(n):
			bad = append(bad, srv)
		default:
			good = append(good, srv)
			if n != nil && usable(n) {
				zones[n.Zone] = true
			}
		}
	}
	switch {
	case len(bad) > 0 && len(good) >= s.cfg.MetaVoters:
		old := bad[0]
		if string(old.ID) == s.cfg.NodeID {
			// A leader that removes itself loses the answer with its
			// leadership; it hands over instead, and the next leader
			// removes it.
			if err := s.await(ctx, r.LeadershipTransfer()); err != nil {
				s.log.Warn("handing the meta group over before leaving it", "err", err)
			}
			return
		}
		if err := s.await(ctx, r.RemoveServer(old.ID, 0, rpcTimeout)); err != nil {
			s.log.Warn("removing a meta-group voter", "voter", old.ID, "err", err)
			return
		}
		s.log.Info("removed a meta-group voter whose node is drained or gone", "voter", old.ID, "voters", len(good))
	case len(good) < s.cfg.MetaVoters:
		var candidates []*pb.Node
		for _, n := range nodes {
			if usable(n) && !inGroup[n.Id] && n.GrpcAddr != "" {
				candidates = append(candidates, n)
			}
		}
		if len(candidates) == 0 {
			if len(bad) > 0 {
				s.log.Warn("a meta-group voter's node is drained or gone, and no other storage node can replace it", "voter", bad[0].ID, "usable_voters", len(good))
			}
			return
		}
		// A zone the voters lack first, then by id, so that every leader
		// would choose the same node.
		slices.SortFunc(candidates, func(a, b *pb.Node) int {
			if za, zb := zones[a.Zone], zones[b.Zone]; za != zb {
				if za {
					return 1
				}
				return -1
			}
			return cmp.Compare(a.Id, b.Id)
		})
		n := candidates[0]
		addr := s.cfg.MetaAddr(n)
		if err := s.await(ctx, r.AddVoter(raft.ServerID(n.Id), addr, 0, rpcTimeout)); err != nil {
			s.log.Warn("adding a meta-group voter", "node", n.Id, "err", err)
			return
		}
		s.log.Info("added a meta-group voter", "node", n.Id, "addr", addr, "zone", n.Zone, "usable_voters", len(good)+1)
	}
}
