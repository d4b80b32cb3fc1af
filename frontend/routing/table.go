package routing

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// errMissedChange: a change of the routing table does not start from the
// version of the router's table, so the router missed one and cannot
// apply it; it asks placement again.
var errMissedChange = errors.New("routing: a change of the routing table does not follow the table held")

// table is the routing table as the router reads it, kept up to date by
// whole tables and by changes (placementpb.RoutingTable.ChangesFrom).
// Entity records are shared with whoever received them and never
// changed; the maps are changed only under Router.mu.
type table struct {
	version uint64
	born    uint64                         // the catalog's birth: versions count within it
	byName  map[string]*placementpb.Entity // lowercase name
	byID    map[uint64]*placementpb.Entity
	groups  map[uint64]*placementpb.Group
	nodes   map[string]*placementpb.Node
	// groupList and nodeList are the groups and nodes as the latest
	// message listed them, for Table.
	groupList []*placementpb.Group
	nodeList  []*placementpb.Node
	// rules are the catalog's authorization rules as last sent.
	rules []*placementpb.AuthorizationRule
	// filters counts, per lowercase topic name, the rules of its
	// subscriptions (each is a filter a message sent to the topic is
	// evaluated against).
	filters map[string]int
}

// newTable builds the table of a whole routing table.
func newTable(t *placementpb.RoutingTable) *table {
	tb := &table{
		version: t.Version,
		born:    t.CatalogBornMs,
		byName:  make(map[string]*placementpb.Entity, len(t.Entities)),
		byID:    make(map[uint64]*placementpb.Entity, len(t.Entities)),
		filters: map[string]int{},
		rules:   t.AuthorizationRules,
	}
	for _, e := range t.Entities {
		tb.put(e)
	}
	tb.setTopology(t)
	return tb
}

// apply applies a change (ChangesFrom set) to the table. It fails, and
// changes nothing, when the change does not start from the table's
// version.
func (tb *table) apply(c *placementpb.RoutingTable) error {
	if c.ChangesFrom != tb.version || !sameCatalog(c.CatalogBornMs, tb.born) {
		return fmt.Errorf("%w: a change from version %d to %d of the catalog born at %d, the table has version %d of the one born at %d", errMissedChange, c.ChangesFrom, c.Version, c.CatalogBornMs, tb.version, tb.born)
	}
	for _, id := range c.RemovedEntities {
		tb.remove(id)
	}
	for _, e := range c.Entities {
		tb.put(e)
	}
	if c.AuthorizationRulesChanged {
		tb.rules = c.AuthorizationRules
	}
	tb.setTopology(c)
	tb.version = c.Version
	if tb.born == 0 {
		tb.born = c.CatalogBornMs // the first member that knows it
	}
	return nil
}

// sameCatalog reports whether two births name the same catalog: equal,
// or one unknown (0: a member older than the field), which is taken for
// the same rather than make every such message a resync.
func sameCatalog(a, b uint64) bool { return a == 0 || b == 0 || a == b }

// setTopology takes the groups and nodes of t, which every message holds
// whole.
func (tb *table) setTopology(t *placementpb.RoutingTable) {
	tb.groupList, tb.nodeList = t.Groups, t.Nodes
	tb.groups = make(map[uint64]*placementpb.Group, len(t.Groups))
	for _, g := range t.Groups {
		tb.groups[g.Id] = g
	}
	tb.nodes = make(map[string]*placementpb.Node, len(t.Nodes))
	for _, n := range t.Nodes {
		tb.nodes[n.Id] = n
	}
}

// put adds e, or replaces the record of its id.
func (tb *table) put(e *placementpb.Entity) {
	tb.remove(e.Id)
	if old := tb.byName[strings.ToLower(e.Name)]; old != nil {
		// Another id under the same name: one deleted and created again
		// since, whose removal this table has not seen yet.
		tb.remove(old.Id)
	}
	tb.byID[e.Id] = e
	tb.byName[strings.ToLower(e.Name)] = e
	tb.countFilters(e, 1)
}

// remove drops the entity of id, if the table has it.
func (tb *table) remove(id uint64) {
	e := tb.byID[id]
	if e == nil {
		return
	}
	delete(tb.byID, id)
	if key := strings.ToLower(e.Name); tb.byName[key] == e {
		delete(tb.byName, key)
	}
	tb.countFilters(e, -1)
}

// countFilters adds (sign 1) or takes away (-1) a subscription's rules in
// its topic's count.
func (tb *table) countFilters(e *placementpb.Entity, sign int) {
	if e.Kind != placementpb.EntityKind_ENTITY_KIND_SUBSCRIPTION || len(e.Rules) == 0 {
		return
	}
	key := strings.ToLower(e.Name)
	i := strings.LastIndex(key, "/subscriptions/")
	if i <= 0 {
		return
	}
	topic := key[:i]
	if tb.filters[topic] += sign * len(e.Rules); tb.filters[topic] == 0 {
		delete(tb.filters, topic)
	}
}

// whole returns the table as one RoutingTable, entities by id.
func (tb *table) whole() *placementpb.RoutingTable {
	entities := slices.SortedFunc(maps.Values(tb.byID), func(a, b *placementpb.Entity) int { return cmp.Compare(a.Id, b.Id) })
	return &placementpb.RoutingTable{
		Version:            tb.version,
		CatalogBornMs:      tb.born,
		Entities:           entities,
		Groups:             tb.groupList,
		Nodes:              tb.nodeList,
		AuthorizationRules: tb.rules,
	}
}
