package catalog

import (
	"slices"
	"sort"

	pb "github.com/quorumbus/quorumbus/proto/placementpb"
)

// MaxRouteChanges is how many changes of the routing table a catalog
// remembers at least (and at most twice as many), so that WatchRoutes can
// send a watcher what changed since its table rather than the whole table
// again. A watcher further behind gets the whole table.
const MaxRouteChanges = 4096

// routeChange is what one command changed in the routing table, beyond
// its groups and nodes (which every change carries whole).
type routeChange struct {
	index    uint64   // the command's log index: the table's version after it
	entities []uint64 // ids of the entities created, changed (Degraded included) or removed
	rules    bool     // the authorization rules changed
}

// changeLog remembers the latest route changes. It is derived state: it is
// not in snapshots, and after a restore it starts empty at the snapshot's
// routes version, so a member that restored a snapshot sends whole tables
// to watchers older than it. Every member records the same change at the
// same index, since it applies the same log, so a change computed by one
// member applies to a table another member sent.
//
// Invariant: base <= changes[0].index < changes[1].index < ..., and the
// table of version base followed by every change is the current table.
type changeLog struct {
	base    uint64 // the routes version before the first change kept
	changes []routeChange

	// What the command being applied changed so far; recorded by
	// endCommand when the command changed the routing table.
	entities []uint64
	rules    bool
}

// touchEntity notes that the record (or the Degraded) of entity id
// changed, or that it was created or removed.
func (s *State) touchEntity(id uint64) { s.changes.entities = append(s.changes.entities, id) }

// touchRules notes that the authorization rules changed.
func (s *State) touchRules() { s.changes.rules = true }

// touchGroupEntities notes every entity with a partition in group id: the
// group's quorum changed, and with it whether they read Degraded. It
// scans the catalog, which only a change of a group's health costs.
func (s *State) touchGroupEntities(id uint64) {
	for _, e := range s.entities {
		if slices.Contains(e.PartitionGroups, id) {
			s.touchEntity(e.Id)
		}
	}
}

// endCommand records what the command at index changed, if it changed the
// routing table. Past 2*MaxRouteChanges changes it forgets all but the
// latest MaxRouteChanges at once: a copy of the log every MaxRouteChanges
// commands, where trimming one at each command copied it at each (a
// visible share of the CPU while creating many entities).
func (l *changeLog) endCommand(index uint64, routes bool) {
	entities, rules := l.entities, l.rules
	l.entities, l.rules = nil, false
	if !routes {
		return
	}
	slices.Sort(entities)
	l.changes = append(l.changes, routeChange{index: index, entities: slices.Compact(entities), rules: rules})
	if over := len(l.changes) - MaxRouteChanges; over > MaxRouteChanges {
		l.base = l.changes[over-1].index
		// Copy rather than reslice, so that the forgotten changes are
		// freed rather than kept by the array.
		l.changes = slices.Clone(l.changes[over:])
	}
}

// reset forgets every change: the catalog is at routes version base.
func (l *changeLog) reset(base uint64) { *l = changeLog{base: base} }

// since returns what changed after version from, and false when from is
// not a version this log can start from: older than what it remembers, or
// not a routes version it recorded (a table of another catalog).
func (l *changeLog) since(from uint64) (entities []uint64, rules bool, ok bool) {
	i := sort.Search(len(l.changes), func(i int) bool { return l.changes[i].index > from })
	switch {
	case from < l.base:
		return nil, false, false
	case from != l.base && (i == 0 || l.changes[i-1].index != from):
		return nil, false, false
	}
	for _, c := range l.changes[i:] {
		entities = append(entities, c.entities...)
		rules = rules || c.rules
	}
	slices.Sort(entities)
	return slices.Compact(entities), rules, true
}

// ChangesSince returns what changed in the routing table after version
// from, as a RoutingTable with ChangesFrom set: the entities created or
// changed since (the catalog's own records where they read as stored, as
// in Table, so it must not be changed), the ids of those removed, every
// group and node, and the authorization rules if they changed. ok is
// false when the catalog cannot tell (from is older than the changes it
// remembers, or no version of its table); the watcher then needs the
// whole table. from equal to RoutesVersion gives an empty change.
func (s *State) ChangesSince(from uint64) (t *pb.RoutingTable, ok bool) {
	if from == 0 || from > s.routes {
		return nil, false // a change from 0 would read as a whole table
	}
	ids, rules, ok := s.changes.since(from)
	if !ok {
		return nil, false
	}
	t = &pb.RoutingTable{Version: s.routes, CatalogBornMs: s.born, ChangesFrom: from, Groups: s.Groups(), Nodes: s.Nodes()}
	for _, id := range ids {
		e := s.entities[id]
		switch {
		case e == nil:
			t.RemovedEntities = append(t.RemovedEntities, id)
		case s.degraded(e):
			t.Entities = append(t.Entities, s.outward(e))
		default:
			t.Entities = append(t.Entities, e)
		}
	}
	if rules {
		t.AuthorizationRules = s.AuthorizationRules("", true)
		t.AuthorizationRulesChanged = true
	}
	return t, true
}
