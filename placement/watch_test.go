package placement_test

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/quorumbus/quorumbus/placement/placementtest"
	pb "github.com/quorumbus/quorumbus/proto/placementpb"
)

// follower follows a WatchRoutes stream that carries changes, as a
// front-end does: it keeps a whole table and applies each change to it,
// recording a change that does not follow its table as a broken promise.
type follower struct {
	mu      sync.Mutex
	table   *pb.RoutingTable // entities by id
	whole   int              // whole tables received
	changes int              // changes received
	carried int              // entity records the changes carried
	bad     string
	err     error
}

// followRoutes opens a stream on m asking for changes after version after
// (0: a whole table first), continuing from table when it is not nil.
func followRoutes(t *testing.T, m *placementtest.Member, after uint64, table *pb.RoutingTable) *follower {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	stream, err := m.Client.WatchRoutes(ctx, &pb.WatchRoutesRequest{AfterVersion: after, Changes: true})
	if err != nil {
		t.Fatal(err)
	}
	f := &follower{table: table}
	go func() {
		for {
			msg, err := stream.Recv()
			f.mu.Lock()
			if err != nil {
				f.err = err
				f.mu.Unlock()
				return
			}
			f.take(msg)
			f.mu.Unlock()
		}
	}()
	return f
}

func (f *follower) take(msg *pb.RoutingTable) {
	if msg.ChangesFrom == 0 {
		if f.table != nil && msg.Version <= f.table.Version {
			f.bad = fmt.Sprintf("a whole table of version %d after version %d", msg.Version, f.table.Version)
		}
		f.whole++
		f.table = msg
		slices.SortFunc(f.table.Entities, func(a, b *pb.Entity) int { return cmp.Compare(a.Id, b.Id) })
		return
	}
	f.changes++
	f.carried += len(msg.Entities)
	if f.table == nil || msg.ChangesFrom != f.table.Version {
		if f.bad == "" {
			f.bad = fmt.Sprintf("a change from version %d to %d, the table has %v", msg.ChangesFrom, msg.Version, f.version())
		}
		return
	}
	byID := map[uint64]*pb.Entity{}
	for _, e := range f.table.Entities {
		byID[e.Id] = e
	}
	for _, id := range msg.RemovedEntities {
		delete(byID, id)
	}
	for _, e := range msg.Entities {
		byID[e.Id] = e
	}
	next := &pb.RoutingTable{Version: msg.Version, CatalogBornMs: msg.CatalogBornMs, Groups: msg.Groups, Nodes: msg.Nodes, AuthorizationRules: f.table.AuthorizationRules}
	if msg.AuthorizationRulesChanged {
		next.AuthorizationRules = msg.AuthorizationRules
	}
	for _, e := range byID {
		next.Entities = append(next.Entities, e)
	}
	slices.SortFunc(next.Entities, func(a, b *pb.Entity) int { return cmp.Compare(a.Id, b.Id) })
	f.table = next
}

func (f *follower) version() any {
	if f.table == nil {
		return "none"
	}
	return f.table.Version
}

// matches reports whether the follower's table is m's current one.
func (f *follower) matches(m *placementtest.Member) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	want := m.Service.Table()
	return f.table != nil && f.table.Version == want.Version && proto.Equal(f.table, want)
}

// snapshot returns the follower's table and what it received.
func (f *follower) snapshot() (table *pb.RoutingTable, whole, changes, carried int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.table, f.whole, f.changes, f.carried
}

func (f *follower) check(t *testing.T, what string) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.bad != "" {
		t.Errorf("%s: %s", what, f.bad)
	}
}

func (f *follower) state() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return fmt.Sprintf("table version %v, %d whole tables, %d changes, stream error %v", f.version(), f.whole, f.changes, f.err)
}

// TestWatchRoutesChanges: a watcher that asks for changes gets one whole
// table, then changes that carry only what changed, and its table stays
// equal to the member's through creations, updates and deletions; one
// that reconnects to another member with the version it holds gets the
// change since that version there, not a whole table; and one that names
// a version the member cannot start from (no version of its table) gets a
// whole table.
func TestWatchRoutesChanges(t *testing.T) {
	c := placementtest.Start(t, placementtest.Options{})
	leader := c.Leader(t)
	waitGroups(t, leader, 3)
	members := c.Members()
	f := followRoutes(t, members[0], 0, nil)

	const creates = 20
	for i := range creates {
		createRetrying(t, leader, &pb.CreateEntityRequest{Name: fmt.Sprintf("q%02d", i), Properties: &pb.QueueProperties{PartitionCount: uint32(i % 3)}})
	}
	if _, err := leader.Client.UpdateEntity(context.Background(), &pb.UpdateEntityRequest{Name: "q03", Properties: &pb.QueueProperties{UserMetadata: "changed"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := leader.Client.DeleteEntity(context.Background(), &pb.DeleteEntityRequest{Name: "q04"}); err != nil {
		t.Fatal(err)
	}
	placementtest.Eventually(t, wait, "the follower to hold "+members[0].ID+"'s table", func() bool { return f.matches(members[0]) })
	f.check(t, members[0].ID)
	table, whole, changes, carried := f.snapshot()
	t.Logf("%s: %d whole table, %d changes carrying %d entity records", members[0].ID, whole, changes, carried)
	if whole != 1 || changes == 0 {
		t.Fatalf("%d whole tables and %d changes; want 1 whole table, then changes", whole, changes)
	}
	// Whole tables at each change would have carried 1+2+...+20 records.
	// Changes carry each creation's entity once, plus what group health
	// changes touch (every entity of a group whose quorum changed).
	if limit := 2 * (creates + 2); carried > limit {
		t.Fatalf("the changes carried %d entity records for %d changes of entities; want at most %d", carried, creates+2, limit)
	}

	// Another member continues from the version the follower holds.
	g := followRoutes(t, members[1], table.Version, proto.Clone(table).(*pb.RoutingTable))
	createRetrying(t, leader, &pb.CreateEntityRequest{Name: "after-reconnect", Properties: &pb.QueueProperties{}})
	placementtest.Eventually(t, wait, "the reconnected follower to hold "+members[1].ID+"'s table", func() bool { return g.matches(members[1]) })
	g.check(t, members[1].ID)
	if _, whole, changes, _ := g.snapshot(); whole != 0 || changes == 0 {
		t.Fatalf("reconnected with version %d: %d whole tables and %d changes; want changes only", table.Version, whole, changes)
	}

	// A version that is no version of the table (the meta log's first
	// entry, the group's configuration) gets a whole table.
	h := followRoutes(t, members[2], 1, nil)
	placementtest.Eventually(t, wait, "a whole table for version 1", func() bool { return h.matches(members[2]) })
	h.check(t, members[2].ID)
	if _, whole, _, _ := h.snapshot(); whole != 1 {
		t.Fatalf("asked from version 1: %s; want one whole table", h.state())
	}
}

// TestWatchRoutesChangesAcrossLeaderChange: followers on every member
// keep their tables equal to their member's while the meta leader is
// killed and entities are created through the next one, and a follower
// whose member was the killed leader continues on another member from the
// version it held.
func TestWatchRoutesChangesAcrossLeaderChange(t *testing.T) {
	c := placementtest.Start(t, placementtest.Options{})
	leader := c.Leader(t)
	waitGroups(t, leader, 3)
	followers := map[*placementtest.Member]*follower{}
	for _, m := range c.Members() {
		followers[m] = followRoutes(t, m, 0, nil)
	}
	for i := range 5 {
		createRetrying(t, leader, &pb.CreateEntityRequest{Name: fmt.Sprintf("before-%d", i), Properties: &pb.QueueProperties{}})
	}
	placementtest.Eventually(t, wait, "the leader's follower to catch up", func() bool { return followers[leader].matches(leader) })
	orphan, _, _, _ := followers[leader].snapshot()

	c.Kill(leader)
	next := c.Leader(t)
	for i := range 5 {
		createRetrying(t, next, &pb.CreateEntityRequest{Name: fmt.Sprintf("after-%d", i), Properties: &pb.QueueProperties{PartitionCount: 2}})
	}
	for _, m := range c.Up() {
		f := followers[m]
		placementtest.Eventually(t, wait, m.ID+"'s follower to hold its table", func() bool { return f.matches(m) })
		f.check(t, m.ID)
		if _, whole, _, _ := f.snapshot(); whole != 1 {
			t.Fatalf("%s: %s; want one whole table, then changes", m.ID, f.state())
		}
	}
	// The killed leader's watcher reconnects to the new leader.
	g := followRoutes(t, next, orphan.Version, proto.Clone(orphan).(*pb.RoutingTable))
	placementtest.Eventually(t, wait, "the killed leader's follower to continue on "+next.ID, func() bool { return g.matches(next) })
	g.check(t, next.ID)
	if _, whole, _, _ := g.snapshot(); whole != 0 {
		t.Fatalf("continued from version %d: %s; want changes only", orphan.Version, g.state())
	}
}

// TestWatchRoutesFromAnotherCatalog: a watcher whose version counts in
// another catalog (the cluster's data was wiped and started over, so its
// versions are numbered from the start again) gets the member's whole
// table at once, although it names a version far ahead of it: it neither
// waits for that version nor gets a change from it. Named with this
// catalog's birth, the same version is waited for.
func TestWatchRoutesFromAnotherCatalog(t *testing.T) {
	c := placementtest.Start(t, placementtest.Options{})
	leader := c.Leader(t)
	waitGroups(t, leader, 3)
	m := c.Members()[0]
	// m may be a follower whose table has not applied the first
	// commands yet (the leader's groups are counted above).
	placementtest.Eventually(t, wait, "the catalog's birth in "+m.ID+"'s table", func() bool { return m.Service.Table().CatalogBornMs != 0 })
	born := m.Service.Table().CatalogBornMs
	ahead := m.Service.Table().Version + 1000
	first := func(bornMs uint64) (*pb.RoutingTable, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		stream, err := m.Client.WatchRoutes(ctx, &pb.WatchRoutesRequest{AfterVersion: ahead, CatalogBornMs: bornMs, Changes: true})
		if err != nil {
			return nil, err
		}
		return stream.Recv()
	}
	got, err := first(born + 1)
	if err != nil {
		t.Fatalf("another catalog's version: %v", err)
	}
	if got.ChangesFrom != 0 || got.CatalogBornMs != born || got.Version >= ahead {
		t.Fatalf("another catalog's version: a message of version %d, changes from %d, born %d; want the whole table of the catalog born %d", got.Version, got.ChangesFrom, got.CatalogBornMs, born)
	}
	if _, err := first(born); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("this catalog's version %d ahead of it: %v; want a wait until the deadline", ahead, err)
	}
}
