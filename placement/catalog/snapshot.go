package catalog

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	pb "github.com/quorumbus/quorumbus/proto/placementpb"
)

// Snapshot returns the whole catalog as one message, every list ordered by
// id, so equal catalogs give equal snapshots. Its entities are the
// catalog's own records (as in Table): it must not be changed, and may be
// encoded after the catalog changed on.
func (s *State) Snapshot() *pb.CatalogSnapshot {
	t := s.Table()
	return &pb.CatalogSnapshot{
		AppliedIndex:       s.applied,
		ModifiedIndex:      s.modified,
		RoutesIndex:        s.routes,
		BornMs:             s.born,
		NextEntityId:       s.nextEntityID,
		NextGroupId:        s.nextGroupID,
		Entities:           t.Entities,
		Groups:             t.Groups,
		Nodes:              t.Nodes,
		Tasks:              s.Tasks(),
		AuthorizationRules: t.AuthorizationRules,
	}
}

// FromSnapshot rebuilds a catalog from a snapshot, checking that it holds
// together (unique ids and names, known groups, ids below the counters).
func FromSnapshot(snap *pb.CatalogSnapshot) (*State, error) {
	s := New()
	s.applied, s.modified, s.routes, s.born = snap.AppliedIndex, snap.ModifiedIndex, snap.RoutesIndex, snap.BornMs
	s.nextEntityID, s.nextGroupID = snap.NextEntityId, snap.NextGroupId
	bad := func(format string, args ...any) (*State, error) {
		return nil, fmt.Errorf("%w: snapshot: "+format, append([]any{ErrCorrupt}, args...)...)
	}
	for _, n := range snap.Nodes {
		if n.Id == "" || s.nodes[n.Id] != nil {
			return bad("node id %q missing or repeated", n.Id)
		}
		s.nodes[n.Id] = proto.Clone(n).(*pb.Node)
	}
	for _, g := range snap.Groups {
		if g.Id == 0 || g.Id >= s.nextGroupID || s.groups[g.Id] != nil {
			return bad("group id %d out of range or repeated", g.Id)
		}
		s.groups[g.Id] = proto.Clone(g).(*pb.Group)
		s.loads[g.Id] = 0
	}
	for _, e := range snap.Entities {
		if e.Id == 0 || e.Id >= s.nextEntityID || s.entities[e.Id] != nil {
			return bad("entity id %d out of range or repeated", e.Id)
		}
		if _, ok := s.names[Key(e.Name)]; ok {
			return bad("entity name %q repeated", e.Name)
		}
		for _, g := range e.PartitionGroups {
			if s.groups[g] == nil {
				return bad("entity %q on unknown group %d", e.Name, g)
			}
			s.loads[g]++
		}
		rec := proto.Clone(e).(*pb.Entity)
		rec.Degraded = false // derived when read (outward), never stored
		s.entities[e.Id] = rec
		s.names[Key(e.Name)] = e.Id
		if n := uint32(len(e.PartitionGroups)); countsAsPartitioned(e.Kind, n) {
			s.partitioned++
			s.widths[n]++
		}
	}
	for _, r := range snap.AuthorizationRules {
		if err := checkRule(r); err != nil {
			return bad("%v", err)
		}
		if r.Entity != "" && s.names[Key(r.Entity)] == 0 {
			return bad("authorization rule %q on unknown entity %q", r.Name, r.Entity)
		}
		if s.rules[ruleKeyOf(r)] != nil {
			return bad("authorization rule %q repeated on %q", r.Name, r.Entity)
		}
		s.rules[ruleKeyOf(r)] = proto.Clone(r).(*pb.AuthorizationRule)
	}
	for _, t := range snap.Tasks {
		if s.tasks[keyOf(t)] != nil {
			return bad("two tasks for entity %d partition %d", t.EntityId, t.Partition)
		}
		s.tasks[keyOf(t)] = proto.Clone(t).(*pb.PartitionTask)
	}
	s.rebuildIndex()
	s.changes.reset(s.routes)
	return s, nil
}
