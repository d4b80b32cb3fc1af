package catalog

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/quorumbus/quorumbus/placement/sas"
	pb "github.com/quorumbus/quorumbus/proto/placementpb"
)

// follow applies a change to a whole table as a watcher does, and returns
// the whole table it makes: entities by id, every group and node from the
// change, the rules only when they changed.
func follow(t *testing.T, table, change *pb.RoutingTable) *pb.RoutingTable {
	t.Helper()
	if change.ChangesFrom != table.Version {
		t.Fatalf("a change from %d applied to the table of %d", change.ChangesFrom, table.Version)
	}
	byID := map[uint64]*pb.Entity{}
	for _, e := range table.Entities {
		byID[e.Id] = e
	}
	for _, id := range change.RemovedEntities {
		delete(byID, id)
	}
	for _, e := range change.Entities {
		byID[e.Id] = e
	}
	out := &pb.RoutingTable{Version: change.Version, CatalogBornMs: change.CatalogBornMs, Groups: change.Groups, Nodes: change.Nodes, AuthorizationRules: table.AuthorizationRules}
	if change.AuthorizationRulesChanged {
		out.AuthorizationRules = change.AuthorizationRules
	}
	for _, id := range slices.Sorted(func(yield func(uint64) bool) {
		for id := range byID {
			if !yield(id) {
				return
			}
		}
	}) {
		out.Entities = append(out.Entities, byID[id])
	}
	return out
}

// TestChangesSinceRandomOps applies a random mix of every command that
// changes the routing table (rejections included) and checks, after each,
// that the change since each of several earlier versions turns that
// version's table into the current one. A command that changes an entity
// without recording it, or records one it did not change in a way that
// loses it, shows here.
func TestChangesSinceRandomOps(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	a := newApplier(t, 3)
	a.must(wrap(&pb.ReportGroupsRequest{Groups: []*pb.GroupReport{{GroupId: 1, HasQuorum: true}, {GroupId: 2, HasQuorum: true}, {GroupId: 3, HasQuorum: true}}}))
	tables := map[uint64]*pb.RoutingTable{a.s.RoutesVersion(): a.s.Table()}
	var versions []uint64
	versions = append(versions, a.s.RoutesVersion())
	for i := range 3000 {
		name := fmt.Sprintf("e%02d", rng.IntN(60))
		topic := fmt.Sprintf("e%02d", rng.IntN(60))
		sub := SubscriptionName(topic, fmt.Sprint(rng.IntN(3)))
		var cmd *pb.CatalogCommand
		switch rng.IntN(11) {
		case 0:
			cmd = wrap(&pb.DeleteEntityCommand{Name: name})
		case 1:
			cmd = wrap(&pb.CreateEntityCommand{Name: name, Kind: pb.EntityKind_ENTITY_KIND_TOPIC,
				Properties: &pb.QueueProperties{PartitionCount: 2}, PartitionGroups: []uint64{2, 3}})
		case 2:
			cmd = wrap(&pb.CreateEntityCommand{Name: sub, Kind: pb.EntityKind_ENTITY_KIND_SUBSCRIPTION,
				Properties: &pb.QueueProperties{PartitionCount: 2}, PartitionGroups: []uint64{2, 3}})
		case 3:
			cmd = wrap(&pb.AddRuleCommand{Subscription: sub, Rule: &pb.Rule{Name: fmt.Sprint("r", rng.IntN(3)), Filter: &pb.Rule_TrueFilter{TrueFilter: true}}})
		case 4:
			cmd = wrap(&pb.RemoveRuleCommand{Subscription: sub, RuleName: fmt.Sprint("r", rng.IntN(3))})
		case 5:
			cmd = wrap(&pb.UpdateEntityCommand{Name: name, Properties: &pb.QueueProperties{UserMetadata: fmt.Sprint(i)}})
		case 6:
			cmd = wrap(&pb.ReportGroupsRequest{Groups: []*pb.GroupReport{{GroupId: uint64(1 + rng.IntN(3)), LeaderId: fmt.Sprint("n", 1+rng.IntN(3)), HasQuorum: rng.IntN(3) > 0}}})
		case 7:
			cmd = putRule(fmt.Sprint("k", rng.IntN(3)), []string{"", name}[rng.IntN(2)], sas.Listen, false)
		case 8:
			cmd = deleteRule(fmt.Sprint("k", rng.IntN(3)), []string{"", name}[rng.IntN(2)])
		case 9:
			cmd = wrap(&pb.CompleteTasks{Tasks: a.s.Tasks()}) // changes no route
		default:
			cmd = create(name, uint32(1+rng.IntN(2)))
		}
		a.apply(cmd) // rejections (taken, missing) are part of the mix
		v := a.s.RoutesVersion()
		if tables[v] != nil {
			continue
		}
		now := a.s.Table()
		tables[v] = now
		for _, from := range []uint64{versions[len(versions)-1], versions[rng.IntN(len(versions))], versions[0]} {
			change, ok := a.s.ChangesSince(from)
			if !ok {
				t.Fatalf("op %d (%v): no change from %d to %d", i, cmd, from, v)
			}
			if got := follow(t, tables[from], change); !proto.Equal(got, now) {
				t.Fatalf("op %d (%v): the change from %d to %d makes\n%v\nnot\n%v", i, cmd, from, v, got, now)
			}
		}
		versions = append(versions, v)
		if i%100 == 0 {
			checkLoads(t, a.s)
		}
	}
	checkLoads(t, a.s)
	restored, err := FromSnapshot(a.s.Snapshot())
	if err != nil {
		t.Fatal(err)
	}
	checkLoads(t, restored)
	if change, ok := a.s.ChangesSince(a.s.RoutesVersion()); !ok || len(change.Entities)+len(change.RemovedEntities) != 0 || change.AuthorizationRulesChanged {
		t.Fatalf("the change since the current version: %v, %v; want an empty one", change, ok)
	}
	if _, ok := a.s.ChangesSince(a.s.RoutesVersion() + 1); ok {
		t.Fatal("a change from a version the catalog has not reached")
	}
}

// checkLoads compares the group loads the catalog keeps with a count of
// its entities' partitions.
func checkLoads(t *testing.T, s *State) {
	t.Helper()
	want := map[uint64]int{}
	for id := range s.groups {
		want[id] = 0
	}
	for _, e := range s.entities {
		for _, g := range e.PartitionGroups {
			want[g]++
		}
	}
	if got := s.GroupLoads(); !maps.Equal(got, want) {
		t.Fatalf("group loads %v, counted %v", got, want)
	}
}

// TestChangesSinceForgets: the catalog remembers MaxRouteChanges changes
// at least and twice as many at most, answers ok false for versions older
// than it remembers, for an index that changed
// no route (no table has it) and for 0 (a whole table), and after a
// restore only from the snapshot's routes version on.
func TestChangesSinceForgets(t *testing.T) {
	a := newApplier(t, 3)
	first := a.s.RoutesVersion()
	a.must(create("q0", 1))
	a.must(wrap(&pb.CompleteTasks{Tasks: a.s.Tasks()}))
	noRoutes := a.s.Applied()
	if _, ok := a.s.ChangesSince(first); !ok {
		t.Fatalf("no change from %d", first)
	}
	for _, from := range []uint64{0, noRoutes} {
		if _, ok := a.s.ChangesSince(from); ok {
			t.Fatalf("a change from %d, which is no version of the table", from)
		}
	}
	update := func(i int) {
		a.must(wrap(&pb.UpdateEntityCommand{Name: "q0", Properties: &pb.QueueProperties{UserMetadata: fmt.Sprint(i)}}))
	}
	n := 0
	for {
		update(n)
		n++
		if _, ok := a.s.ChangesSince(first); !ok {
			break
		}
		if n > 2*MaxRouteChanges {
			t.Fatalf("a change from %d, %d changes ago", first, n+1)
		}
	}
	if n+1 <= MaxRouteChanges { // the create and n updates
		t.Fatalf("version %d forgotten %d changes later", first, n+1)
	}
	// It forgot all but the latest MaxRouteChanges, all updates with
	// consecutive indexes: the oldest version it starts from is
	// MaxRouteChanges updates back.
	oldest := a.s.RoutesVersion() - MaxRouteChanges
	if change, ok := a.s.ChangesSince(oldest); !ok || len(change.Entities) != 1 || change.Entities[0].Properties.UserMetadata != fmt.Sprint(n-1) {
		t.Fatalf("the change from %d, %d changes ago: %v, %v", oldest, MaxRouteChanges, change, ok)
	}
	if _, ok := a.s.ChangesSince(oldest - 1); ok {
		t.Fatalf("a change from %d, %d changes ago", oldest-1, MaxRouteChanges+1)
	}

	restored, err := FromSnapshot(a.s.Snapshot())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := restored.ChangesSince(a.s.RoutesVersion() - 1); ok {
		t.Fatal("a restored catalog made a change from before its snapshot")
	}
	change, ok := restored.ChangesSince(a.s.RoutesVersion())
	if !ok || len(change.Entities) != 0 {
		t.Fatalf("the restored catalog's change from its own version: %v, %v", change, ok)
	}
	if _, err := restored.Apply(a.index+1, create("q1", 1)); err != nil {
		t.Fatal(err)
	}
	change, ok = restored.ChangesSince(a.s.RoutesVersion())
	if !ok || len(change.Entities) != 1 || change.Entities[0].Name != "q1" {
		t.Fatalf("the restored catalog's change after a create: %v, %v", change, ok)
	}
}

// BenchmarkCatalogAt10000 measures, with 10,000 queues in the catalog (the
// namespace's limit: 9,999 and the one each creation makes),
// what the meta group's members pay per creation (the apply, and the
// change each watcher is sent, encoded) against what a whole table and a
// snapshot cost.
func BenchmarkCatalogAt10000(b *testing.B) {
	a := newApplier(b, 3)
	for i := range MaxEntities - 1 {
		a.must(create(fmt.Sprintf("bench-%05d", i), 0))
	}
	b.Run("whole-table", func(b *testing.B) {
		for range b.N {
			data, err := proto.Marshal(a.s.Table())
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(data)))
		}
	})
	b.Run("snapshot", func(b *testing.B) {
		for range b.N {
			data, err := EncodeSnapshot(a.s.Snapshot())
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(data)))
		}
	})
	// Last: its deletions leave tasks, which a snapshot would hold.
	b.Run("create-and-change", func(b *testing.B) {
		a.t = b
		for i := range b.N {
			from := a.s.RoutesVersion()
			name := fmt.Sprintf("more-%d", i)
			a.must(create(name, 0))
			change, ok := a.s.ChangesSince(from)
			if !ok || len(change.Entities) != 1 {
				b.Fatalf("change %v, %v", change, ok)
			}
			if _, err := proto.Marshal(change); err != nil {
				b.Fatal(err)
			}
			a.must(wrap(&pb.DeleteEntityCommand{Name: name}))
		}
	})
}

// TestBornAtTheFirstCommand: the catalog's birth is the now_ms of the
// first command it applies, a rejected one too; later commands keep it,
// a snapshot carries it, and the routing table and its changes name it,
// so that a watcher can tell a catalog started over from the one whose
// versions it holds.
func TestBornAtTheFirstCommand(t *testing.T) {
	s := New()
	if s.Born() != 0 {
		t.Fatalf("born %d before any command", s.Born())
	}
	node := &pb.CatalogCommand{NowMs: 1234, Op: &pb.CatalogCommand_RegisterNodes{RegisterNodes: &pb.RegisterNodes{Nodes: []*pb.Node{{Id: "n1", GrpcAddr: "a:1", Alive: true}}}}}
	if _, err := s.Apply(1, node); err != nil {
		t.Fatal(err)
	}
	node.NowMs = 9999
	if _, err := s.Apply(2, node); err != nil {
		t.Fatal(err)
	}
	if s.Born() != 1234 || s.Table().CatalogBornMs != 1234 {
		t.Fatalf("born %d, table %d; want 1234", s.Born(), s.Table().CatalogBornMs)
	}
	if c, ok := s.ChangesSince(1); ok && c.CatalogBornMs != 1234 {
		t.Fatalf("a change names birth %d", c.CatalogBornMs)
	}
	back, err := FromSnapshot(s.Snapshot())
	if err != nil {
		t.Fatal(err)
	}
	if back.Born() != 1234 {
		t.Fatalf("born %d after a snapshot", back.Born())
	}
}
