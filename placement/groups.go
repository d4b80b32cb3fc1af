package placement

import (
	"context"

	"github.com/quorumbus/quorumbus/placement/catalog"
	"github.com/quorumbus/quorumbus/placement/planner"
	pb "github.com/quorumbus/quorumbus/proto/placementpb"
)

// growGroups creates the partition groups the cluster lacks, once
// ReplicationFactor storage nodes are usable (alive, not draining): up to
// Config.Groups whatever the entities, then, with MaxReplicasPerNode, one
// per partition of the widest entity, or of one about to be created with
// partitions partitions, while the usable nodes have room for them
// (planner.WantGroups). Groups beyond Config.Groups keep every node within
// MaxReplicasPerNode replicas and spread over as many zones as any group
// can (planner.PlaceGroupsWithin), so fewer may be created than wanted.
// It returns the ids of the groups it created.
//
// Groups are never removed, and entities keep the groups they were
// created on: a group created later serves the entities created after it.
func (s *Service) growGroups(ctx context.Context, partitions int) ([]uint64, error) {
	s.groupsMu.Lock()
	defer s.groupsMu.Unlock()
	var groups []*pb.Group
	var nodes []*pb.Node
	s.fsm.Read(func(st *catalog.State) {
		groups, nodes = st.Groups(), st.Nodes()
		partitions = max(partitions, st.WidestEntity())
	})
	replicas := map[string]int{}
	for _, g := range groups {
		for _, r := range g.Replicas {
			replicas[r.NodeId]++
		}
	}
	usable := func() []planner.Node {
		var out []planner.Node
		for _, n := range nodes {
			if n.Alive && !n.Draining {
				out = append(out, planner.Node{ID: n.Id, Zone: n.Zone, Replicas: replicas[n.Id]})
			}
		}
		return out
	}
	rf := s.cfg.ReplicationFactor
	want := planner.WantGroups(len(usable()), rf, s.cfg.MaxReplicasPerNode, s.cfg.Groups, partitions)
	if len(groups) >= want {
		return nil, nil // the next change of the member list or the entities brings us back
	}
	var plan [][]string
	if n := s.cfg.Groups - len(groups); n > 0 {
		p, err := planner.PlaceGroups(usable(), rf, n)
		if err != nil {
			return nil, err
		}
		plan = p
		for _, ids := range p {
			for _, id := range ids {
				replicas[id]++
			}
		}
	}
	if n := want - len(groups) - len(plan); n > 0 {
		p, err := planner.PlaceGroupsWithin(usable(), rf, n, s.cfg.MaxReplicasPerNode)
		if err != nil {
			return nil, err
		}
		plan = append(plan, p...)
	}
	if len(plan) == 0 {
		return nil, nil // no node has room: only nodes joining make some
	}
	cg := &pb.CreateGroups{ExpectedGroups: uint64(len(groups))}
	for _, ids := range plan {
		g := &pb.NewGroup{}
		for _, id := range ids {
			g.Replicas = append(g.Replicas, &pb.Replica{NodeId: id})
		}
		cg.Groups = append(cg.Groups, g)
	}
	res, err := s.propose(ctx, &pb.CatalogCommand{Op: &pb.CatalogCommand_CreateGroups{CreateGroups: cg}})
	if err != nil {
		return nil, err
	}
	s.log.Info("created partition groups", "ids", res.Groups, "replicas", plan, "groups", len(groups)+len(plan), "wanted", want, "widest_entity", partitions)
	return res.Groups, nil
}
