// Package catalog is the state machine of the meta Raft group: the entities
// of the namespace, the partition groups and their replicas, the storage
// nodes, and the work the meta leader still owes the partition groups.
//
// State is pure: applying a command reads nothing but the command and the
// state (the time comes in the command, stamped by the leader), so every
// member that applies the same log holds the same catalog. FSM wraps it for
// hashicorp/raft and adds locking, change notification and fail-stop.
package catalog

import (
	"cmp"
	"fmt"
	"maps"
	"slices"

	"google.golang.org/protobuf/proto"

	pb "github.com/quorumbus/quorumbus/proto/placementpb"
)

type taskKey struct {
	entity    uint64
	partition uint32
}

func keyOf(t *pb.PartitionTask) taskKey { return taskKey{t.EntityId, t.Partition} }

// State is the catalog in memory. It is small and bounded (at most
// MaxEntities entities), persisted by Raft through the log and snapshots.
// It is not safe for concurrent use; FSM guards it.
type State struct {
	applied  uint64 // index of the last command applied
	modified uint64 // index of the last command that changed anything
	routes   uint64 // index of the last command that changed the routing table
	// born is the now_ms of the first command applied (or of the first
	// after a snapshot that had none): the catalog's identity beside its
	// indexes, which a catalog started over counts from 1 again.
	born         uint64
	nextEntityID uint64
	nextGroupID  uint64
	entities     map[uint64]*pb.Entity
	names        map[string]uint64 // Key(name) -> entity id
	index        *nameIndex        // derived from entities: each kind by name, and ids in order (index.go)
	groups       map[uint64]*pb.Group
	loads        map[uint64]int // group id -> entity partitions it holds; derived from entities
	nodes        map[string]*pb.Node
	tasks        map[taskKey]*pb.PartitionTask
	partitioned  int            // entities with more than one partition
	widths       map[uint32]int // partition count -> partitioned entities with it; derived from entities
	rules        map[ruleKey]*pb.AuthorizationRule
	changes      changeLog // the latest changes of the routing table (changes.go)
}

// New returns an empty catalog.
func New() *State {
	return &State{
		nextEntityID: 1,
		nextGroupID:  1,
		entities:     map[uint64]*pb.Entity{},
		names:        map[string]uint64{},
		index:        newNameIndex(),
		groups:       map[uint64]*pb.Group{},
		loads:        map[uint64]int{},
		nodes:        map[string]*pb.Node{},
		tasks:        map[taskKey]*pb.PartitionTask{},
		widths:       map[uint32]int{},
		rules:        map[ruleKey]*pb.AuthorizationRule{},
	}
}

// Result is the outcome of one command.
type Result struct {
	Index  uint64                // the command's log index
	Entity *pb.Entity            // create and update: the entity as stored (a copy)
	Rule   *pb.AuthorizationRule // put rule: the rule as stored (a copy)
	Groups []uint64              // create groups: the ids assigned
	Err    error                 // a rejection; the catalog is unchanged
}

// Apply applies the command at log index. A rule the command breaks is a
// rejection in Result.Err. An error return means the command cannot be
// applied by this version at all (an op it does not know); the state is
// then unchanged and the caller must stop applying (fail-stop).
func (s *State) Apply(index uint64, cmd *pb.CatalogCommand) (Result, error) {
	var r Result
	var changed, routes bool
	switch op := cmd.Op.(type) {
	case *pb.CatalogCommand_RegisterNodes:
		r.Err, changed = s.registerNodes(cmd.NowMs, op.RegisterNodes)
		routes = changed
	case *pb.CatalogCommand_StartMove:
		r.Err = s.startMove(op.StartMove)
		changed, routes = r.Err == nil, r.Err == nil
	case *pb.CatalogCommand_FinishMove:
		r.Err = s.finishMove(op.FinishMove)
		changed, routes = r.Err == nil, r.Err == nil
	case *pb.CatalogCommand_DrainNode:
		r.Err, changed = s.drainNode(op.DrainNode)
		routes = changed
	case *pb.CatalogCommand_CreateGroups:
		r.Groups, r.Err = s.createGroups(op.CreateGroups)
		changed = len(r.Groups) > 0
		routes = changed
	case *pb.CatalogCommand_CreateEntity:
		r.Entity, r.Err = s.createEntity(index, cmd.NowMs, op.CreateEntity)
		changed, routes = r.Err == nil, r.Err == nil
	case *pb.CatalogCommand_UpdateEntity:
		r.Entity, r.Err = s.updateEntity(index, cmd.NowMs, op.UpdateEntity)
		changed, routes = r.Err == nil, r.Err == nil
	case *pb.CatalogCommand_DeleteEntity:
		r.Err = s.deleteEntity(index, op.DeleteEntity)
		changed, routes = r.Err == nil, r.Err == nil
	case *pb.CatalogCommand_ReportGroups:
		changed = s.reportGroups(op.ReportGroups)
		routes = changed
	case *pb.CatalogCommand_CompleteTasks:
		changed = s.completeTasks(op.CompleteTasks)
	case *pb.CatalogCommand_AddRule:
		r.Entity, r.Err = s.addRule(index, cmd.NowMs, op.AddRule)
		changed, routes = r.Err == nil, r.Err == nil
	case *pb.CatalogCommand_ReplaceRule:
		r.Entity, r.Err = s.replaceRule(index, cmd.NowMs, op.ReplaceRule)
		changed, routes = r.Err == nil, r.Err == nil
	case *pb.CatalogCommand_RemoveRule:
		r.Entity, r.Err = s.removeRule(index, cmd.NowMs, op.RemoveRule)
		changed, routes = r.Err == nil, r.Err == nil
	case *pb.CatalogCommand_PutAuthorizationRule:
		r.Rule, r.Err = s.putRule(cmd.NowMs, op.PutAuthorizationRule)
		changed, routes = r.Err == nil, r.Err == nil
	case *pb.CatalogCommand_DeleteAuthorizationRule:
		r.Err = s.deleteRule(op.DeleteAuthorizationRule)
		changed, routes = r.Err == nil, r.Err == nil
	default:
		return Result{}, fmt.Errorf("%w at index %d", ErrUnknownCommand, index)
	}
	if r.Entity != nil {
		// The ops return the catalog's record; outward copies it, once.
		r.Entity = s.outward(r.Entity) // as reads show it
	}
	r.Index = index
	s.applied = index
	if s.born == 0 && cmd.NowMs > 0 {
		s.born = uint64(cmd.NowMs)
	}
	if changed {
		s.modified = index
	}
	if routes {
		s.routes = index
	}
	s.changes.endCommand(index, routes)
	return r, nil
}

// registerNodes records what membership says of storage nodes: address,
// zone and whether they are alive. Draining is the operator's, kept as it
// is; dead_since_ms is set when a node is first recorded dead (at the
// command's now_ms) and cleared when it is alive.
func (s *State) registerNodes(now int64, c *pb.RegisterNodes) (err error, changed bool) {
	for _, n := range c.Nodes {
		if n.GetId() == "" {
			return fmt.Errorf("%w: a node without an id", ErrInvalidCommand), false
		}
	}
	for _, n := range c.Nodes {
		next := &pb.Node{Id: n.Id, GrpcAddr: n.GrpcAddr, Zone: n.Zone, Alive: n.Alive}
		cur, ok := s.nodes[n.Id]
		if ok {
			next.Draining = cur.Draining
		}
		if !n.Alive {
			next.DeadSinceMs = now
			if ok && !cur.Alive && cur.DeadSinceMs != 0 {
				next.DeadSinceMs = cur.DeadSinceMs
			}
		}
		if ok && proto.Equal(cur, next) {
			continue
		}
		s.nodes[n.Id] = next
		changed = true
	}
	return nil, changed
}

// startMove lists the move's target as a joined replica of the group and
// records the move.
func (s *State) startMove(c *pb.StartMove) error {
	g, ok := s.groups[c.GroupId]
	switch {
	case !ok:
		return fmt.Errorf("%w: no group %d", ErrInvalidCommand, c.GroupId)
	case g.MovingFrom != "" || g.MovingTo != "":
		return fmt.Errorf("%w: group %d is moving from %s to %s", ErrConflict, g.Id, g.MovingFrom, g.MovingTo)
	case !hasReplica(g, c.From):
		return fmt.Errorf("%w: %s is no replica of group %d", ErrInvalidCommand, c.From, g.Id)
	case hasReplica(g, c.To):
		return fmt.Errorf("%w: %s is a replica of group %d already", ErrInvalidCommand, c.To, g.Id)
	}
	if _, ok := s.nodes[c.To]; !ok {
		return fmt.Errorf("%w: %q", ErrUnknownNode, c.To)
	}
	g.Replicas = append(g.Replicas, &pb.Replica{NodeId: c.To, Joined: true})
	g.MovingFrom, g.MovingTo = c.From, c.To
	return nil
}

// finishMove ends the group's move: the replica that left (or, aborted,
// the one that was joining) is no longer listed.
func (s *State) finishMove(c *pb.FinishMove) error {
	g, ok := s.groups[c.GroupId]
	switch {
	case !ok:
		return fmt.Errorf("%w: no group %d", ErrInvalidCommand, c.GroupId)
	case g.MovingFrom != c.From || g.MovingTo != c.To || c.From == "":
		return fmt.Errorf("%w: group %d is not moving from %q to %q", ErrConflict, g.Id, c.From, c.To)
	}
	leaves := c.From
	if c.Abort {
		leaves = c.To
	}
	g.Replicas = slices.DeleteFunc(g.Replicas, func(r *pb.Replica) bool { return r.NodeId == leaves })
	g.MovingFrom, g.MovingTo = "", ""
	return nil
}

func (s *State) drainNode(c *pb.DrainNodeRequest) (err error, changed bool) {
	n, ok := s.nodes[c.NodeId]
	if !ok {
		return fmt.Errorf("%w: %q", ErrUnknownNode, c.NodeId), false
	}
	if n.Draining == c.Draining {
		return nil, false
	}
	n.Draining = c.Draining
	return nil, true
}

func hasReplica(g *pb.Group, node string) bool {
	return slices.ContainsFunc(g.Replicas, func(r *pb.Replica) bool { return r.NodeId == node })
}

func (s *State) createGroups(c *pb.CreateGroups) ([]uint64, error) {
	if c.ExpectedGroups != uint64(len(s.groups)) {
		return nil, fmt.Errorf("%w: expected %d groups, the catalog has %d", ErrConflict, c.ExpectedGroups, len(s.groups))
	}
	for _, g := range c.Groups {
		if len(g.GetReplicas()) == 0 {
			return nil, fmt.Errorf("%w: a group without replicas", ErrInvalidCommand)
		}
		seen := map[string]bool{}
		for _, r := range g.Replicas {
			if _, ok := s.nodes[r.GetNodeId()]; !ok {
				return nil, fmt.Errorf("%w: %q", ErrUnknownNode, r.GetNodeId())
			}
			if seen[r.NodeId] {
				return nil, fmt.Errorf("%w: node %q twice in one group", ErrInvalidCommand, r.NodeId)
			}
			seen[r.NodeId] = true
		}
	}
	ids := make([]uint64, 0, len(c.Groups))
	for _, g := range c.Groups {
		id := s.nextGroupID
		s.nextGroupID++
		grp := &pb.Group{Id: id}
		for _, r := range g.Replicas {
			grp.Replicas = append(grp.Replicas, &pb.Replica{NodeId: r.NodeId})
		}
		s.groups[id] = grp
		s.loads[id] = 0
		ids = append(ids, id)
	}
	return ids, nil
}

func (s *State) createEntity(index uint64, now int64, c *pb.CreateEntityCommand) (*pb.Entity, error) {
	if err := CheckName(c.Name); err != nil {
		return nil, err
	}
	if err := checkKind(c.Kind, c.Status); err != nil {
		return nil, err
	}
	if err := CheckKindProperties(c.Kind, c.Properties); err != nil {
		return nil, err
	}
	props, err := Normalize(c.Properties)
	if err != nil {
		return nil, err
	}
	if err := checkForwarding(c.Name, props); err != nil {
		return nil, err
	}
	if err := s.checkForwardTargets(c.Name, props); err != nil {
		return nil, err
	}
	if _, ok := s.names[Key(c.Name)]; ok {
		return nil, fmt.Errorf("%w: %q", ErrNameTaken, c.Name)
	}
	if err := s.checkPlacement(c, props); err != nil {
		return nil, err
	}
	subscriptionDefaults(c.Kind, props)
	var rules []*pb.Rule
	if c.Kind == pb.EntityKind_ENTITY_KIND_SUBSCRIPTION {
		if rules, err = checkRules(c.Rules, now); err != nil {
			return nil, err
		}
	}
	if len(c.PartitionGroups) != int(props.PartitionCount) {
		return nil, fmt.Errorf("%w: %d partitions but %d partition groups", ErrInvalidCommand, props.PartitionCount, len(c.PartitionGroups))
	}
	for _, g := range c.PartitionGroups {
		if _, ok := s.groups[g]; !ok {
			return nil, fmt.Errorf("%w: %d", ErrUnknownGroup, g)
		}
	}
	if len(s.entities) >= MaxEntities {
		return nil, fmt.Errorf("%w: the namespace holds %d, the limit", ErrTooManyEntities, MaxEntities)
	}
	if countsAsPartitioned(c.Kind, props.PartitionCount) && s.partitioned >= MaxPartitionedEntities {
		// Service Bus's words, which the management API answers with 403.
		return nil, fmt.Errorf("%w: SubCode=40300. The maximum number of resources of type EnablePartitioning == true has been reached or exceeded. Actual: %d, Max allowed: %d", ErrTooManyPartitioned, s.partitioned, MaxPartitionedEntities)
	}

	e := &pb.Entity{
		Id:              s.nextEntityID,
		Name:            c.Name,
		Kind:            c.Kind,
		Status:          c.Status,
		Properties:      props,
		PartitionGroups: slices.Clone(c.PartitionGroups),
		CreatedAtMs:     now,
		UpdatedAtMs:     now,
		Rules:           rules,
	}
	s.nextEntityID++
	s.entities[e.Id] = e
	s.names[Key(e.Name)] = e.Id
	s.index.add(e)
	s.touchEntity(e.Id)
	for _, g := range e.PartitionGroups {
		s.loads[g]++
	}
	if countsAsPartitioned(e.Kind, props.PartitionCount) {
		s.partitioned++
		s.widths[props.PartitionCount]++
	}
	s.setTasks(e, pb.TaskKind_TASK_KIND_UPSERT, index)
	return e, nil // the record: Apply hands out a copy (outward)
}

func (s *State) updateEntity(index uint64, now int64, c *pb.UpdateEntityCommand) (*pb.Entity, error) {
	e := s.byName(c.Name)
	if e == nil {
		return nil, fmt.Errorf("%w: %q", ErrNotFound, c.Name)
	}
	if err := checkKind(e.Kind, c.Status); err != nil {
		return nil, err
	}
	if err := CheckKindProperties(e.Kind, c.Properties); err != nil {
		return nil, err
	}
	props := e.Properties
	if c.Properties != nil {
		var err error
		if props, err = mergeUpdate(e.Properties, c.Properties); err != nil {
			return nil, err
		}
		subscriptionDefaults(e.Kind, props)
		if err := checkForwarding(e.Name, props); err != nil {
			return nil, err
		}
		if err := s.checkForwardTargets(e.Name, props); err != nil {
			return nil, err
		}
	}
	e = s.mutable(e)
	e.Properties = props
	e.Status = c.Status
	e.UpdatedAtMs = now
	s.setTasks(e, pb.TaskKind_TASK_KIND_UPSERT, index)
	return e, nil // the record: Apply hands out a copy (outward)
}

func (s *State) deleteEntity(index uint64, c *pb.DeleteEntityCommand) error {
	e := s.byName(c.Name)
	if e == nil {
		return fmt.Errorf("%w: %q", ErrNotFound, c.Name)
	}
	if e.Kind == pb.EntityKind_ENTITY_KIND_TOPIC {
		subs := s.subscriptionsOf(e)
		// One move of the index for all of them; remove then finds
		// them gone from it.
		s.index.removePrefix(pb.EntityKind_ENTITY_KIND_SUBSCRIPTION, subscriptionPrefix(e.Name))
		for _, sub := range subs {
			s.remove(index, sub)
		}
	}
	s.remove(index, e)
	return nil
}

func (s *State) remove(index uint64, e *pb.Entity) {
	delete(s.entities, e.Id)
	delete(s.names, Key(e.Name))
	s.index.remove(e)
	s.touchEntity(e.Id)
	for _, g := range e.PartitionGroups {
		s.loads[g]--
	}
	if s.dropRules(e.Name) {
		s.touchRules()
	}
	if n := uint32(len(e.PartitionGroups)); countsAsPartitioned(e.Kind, n) {
		s.partitioned--
		if s.widths[n]--; s.widths[n] == 0 {
			delete(s.widths, n)
		}
	}
	s.setTasks(e, pb.TaskKind_TASK_KIND_DELETE, index)
}

// countsAsPartitioned: the namespace's limit of partitioned entities
// counts queues and topics; a subscription shares its topic's partitions.
func countsAsPartitioned(kind pb.EntityKind, partitions uint32) bool {
	return partitions > 1 && kind != pb.EntityKind_ENTITY_KIND_SUBSCRIPTION
}

// setTasks makes one task of the given kind per partition of e, replacing
// whatever task the partition had.
func (s *State) setTasks(e *pb.Entity, kind pb.TaskKind, index uint64) {
	for i, g := range e.PartitionGroups {
		t := &pb.PartitionTask{EntityId: e.Id, Partition: uint32(i), GroupId: g, Kind: kind, Version: index}
		s.tasks[keyOf(t)] = t
	}
}

func (s *State) reportGroups(c *pb.ReportGroupsRequest) (changed bool) {
	for _, r := range c.Groups {
		g, ok := s.groups[r.GetGroupId()]
		if !ok {
			continue // a report may name a group this catalog never made; it says nothing
		}
		if g.HasQuorum != r.HasQuorum {
			s.touchGroupEntities(g.Id) // they read Degraded, or no longer
		}
		if g.LeaderId != r.LeaderId || g.HasQuorum != r.HasQuorum {
			g.LeaderId, g.HasQuorum = r.LeaderId, r.HasQuorum
			changed = true
		}
	}
	return changed
}

func (s *State) completeTasks(c *pb.CompleteTasks) (changed bool) {
	for _, t := range c.Tasks {
		k := keyOf(t)
		if cur, ok := s.tasks[k]; ok && cur.Version == t.Version && cur.Kind == t.Kind {
			delete(s.tasks, k)
			changed = true
		}
	}
	return changed
}

func checkKind(kind pb.EntityKind, status pb.EntityStatus) error {
	if _, ok := pb.EntityKind_name[int32(kind)]; !ok {
		return fmt.Errorf("%w: unknown entity kind %d", ErrInvalidProperties, kind)
	}
	if _, ok := pb.EntityStatus_name[int32(status)]; !ok {
		return fmt.Errorf("%w: unknown entity status %d", ErrInvalidProperties, status)
	}
	return nil
}

// mutable replaces the record of e with a copy and returns the copy to
// change. Entity records are never changed in place: Table shares them
// with readers outside the lock (the routing table being sent to its
// watchers), so a change stores a new record and leaves the old one to
// them.
func (s *State) mutable(e *pb.Entity) *pb.Entity {
	c := proto.Clone(e).(*pb.Entity)
	s.entities[c.Id] = c
	s.touchEntity(c.Id)
	return c
}

func (s *State) byName(name string) *pb.Entity {
	id, ok := s.names[Key(name)]
	if !ok {
		return nil
	}
	return s.entities[id]
}

// ---------------------------------------------------------------------------
// Reads. Every read returns copies that the caller may keep and change.

// Applied is the index of the last command applied.
func (s *State) Applied() uint64 { return s.applied }

// Modified is the index of the last command that changed the catalog.
func (s *State) Modified() uint64 { return s.modified }

// RoutesVersion is the index of the last command that changed what the
// routing table shows (entities, groups, nodes; not tasks).
func (s *State) RoutesVersion() uint64 { return s.routes }

// Entity looks an entity up by name, ignoring case; nil if there is none.
func (s *State) Entity(name string) *pb.Entity {
	return s.outward(s.byName(name))
}

// EntityByID looks an entity up by id; nil if there is none.
func (s *State) EntityByID(id uint64) *pb.Entity { return s.outward(s.entities[id]) }

// outward returns a copy of e as readers see it: degraded while a group of
// one of its partitions is recorded without quorum. Degraded is derived,
// never stored, so group reports change no entity record. nil stays nil.
func (s *State) outward(e *pb.Entity) *pb.Entity {
	if e == nil {
		return nil
	}
	c := proto.Clone(e).(*pb.Entity)
	c.Degraded = s.degraded(e)
	return c
}

// degraded: a group of one of e's partitions is recorded without quorum.
func (s *State) degraded(e *pb.Entity) bool {
	for _, id := range e.PartitionGroups {
		if g := s.groups[id]; g == nil || !g.HasQuorum {
			return true
		}
	}
	return false
}

func (s *State) outwardAll(list []*pb.Entity) []*pb.Entity {
	out := make([]*pb.Entity, len(list))
	for i, e := range list {
		out[i] = s.outward(e)
	}
	return out
}

// Entities lists the entities of one kind ordered by name (ignoring case),
// skipping the first skip; top 0 means no limit. It reads the page from
// the name index: the cost is the page's, not the namespace's.
func (s *State) Entities(kind pb.EntityKind, skip, top int) []*pb.Entity {
	return s.outwardAll(s.entitiesOf(s.index.page(kind, skip, top)))
}

// Len is the number of entities.
func (s *State) Len() int { return len(s.entities) }

// Groups lists the partition groups by id.
func (s *State) Groups() []*pb.Group {
	return sortedClones(s.groups, func(g *pb.Group) uint64 { return g.Id })
}

// Group returns one group; nil if there is none.
func (s *State) Group(id uint64) *pb.Group { return cloneOrNil(s.groups[id]) }

// Nodes lists the storage nodes by id.
func (s *State) Nodes() []*pb.Node {
	return sortedClones(s.nodes, func(n *pb.Node) string { return n.Id })
}

// Node returns one node; nil if there is none.
func (s *State) Node(id string) *pb.Node { return cloneOrNil(s.nodes[id]) }

// Tasks lists the work owed to partition groups, by entity and partition.
func (s *State) Tasks() []*pb.PartitionTask {
	list := make([]*pb.PartitionTask, 0, len(s.tasks))
	for _, t := range s.tasks {
		list = append(list, t)
	}
	slices.SortFunc(list, compareTasks)
	return cloneAll(list)
}

// Task returns the task of one entity partition; nil if there is none.
func (s *State) Task(entityID uint64, partition uint32) *pb.PartitionTask {
	return cloneOrNil(s.tasks[taskKey{entityID, partition}])
}

// HasTasks reports whether any partition of the entity has work pending.
func (s *State) HasTasks(entityID uint64) bool {
	for k := range s.tasks {
		if k.entity == entityID {
			return true
		}
	}
	return false
}

// Born is the catalog's birth (the now_ms of its first command), its
// identity beside its indexes; 0 before any command.
func (s *State) Born() uint64 { return s.born }

// GroupLoads counts the entity partitions each group holds; every group is
// present, with 0 if it holds none. The counts are kept as entities come
// and go: the leader plans every creation with them, and counting them
// afresh each time cost a pass over the namespace per creation.
func (s *State) GroupLoads() map[uint64]int { return maps.Clone(s.loads) }

// WidestEntity is the partition count of the queue or topic with the
// most partitions, 1 when none is partitioned: as many groups as the
// meta leader aims for when nodes have room (planner.WantGroups).
func (s *State) WidestEntity() int {
	widest := uint32(1)
	for n := range s.widths {
		widest = max(widest, n)
	}
	return int(widest)
}

// Table is the routing table: everything but the tasks, as of
// RoutesVersion. Its entities are the catalog's own records where they
// read as stored (not degraded): records are never changed in place
// (mutable), so the table may be read after the lock is released, but
// must not be changed. A table is built at every change, and cloning
// every record made each one a copy of the namespace.
func (s *State) Table() *pb.RoutingTable {
	// While every group has quorum no entity is degraded (every group an
	// entity names exists: create and FromSnapshot check it), and none
	// need checking.
	groupDown := false
	for _, g := range s.groups {
		groupDown = groupDown || !g.HasQuorum
	}
	list := make([]*pb.Entity, 0, len(s.entities))
	for _, id := range s.index.ids {
		e := s.entities[id]
		if groupDown && s.degraded(e) {
			e = s.outward(e)
		}
		list = append(list, e)
	}
	return &pb.RoutingTable{
		Version:       s.routes,
		CatalogBornMs: s.born,
		Entities:      list,
		Groups:        s.Groups(),
		Nodes:         s.Nodes(),
		// The front-ends and gateways validate tokens with them.
		AuthorizationRules: s.AuthorizationRules("", true),
	}
}

func compareTasks(a, b *pb.PartitionTask) int {
	return cmp.Or(cmp.Compare(a.EntityId, b.EntityId), cmp.Compare(a.Partition, b.Partition))
}

func cloneOrNil[M proto.Message](m M) M {
	var zero M
	if any(m) == any(zero) {
		return zero
	}
	return proto.Clone(m).(M)
}

func cloneAll[M proto.Message](list []M) []M {
	out := make([]M, len(list))
	for i, m := range list {
		out[i] = proto.Clone(m).(M)
	}
	return out
}

func sortedClones[K cmp.Ordered, M proto.Message](m map[K]M, key func(M) K) []M {
	list := make([]M, 0, len(m))
	for _, v := range m {
		list = append(list, v)
	}
	slices.SortFunc(list, func(a, b M) int { return cmp.Compare(key(a), key(b)) })
	return cloneAll(list)
}
