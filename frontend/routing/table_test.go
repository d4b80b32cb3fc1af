package routing

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/quorumbus/quorumbus/placement/placementtest"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

const tableWait = 20 * time.Second

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	placementtest.Eventually(t, tableWait, what, cond)
}

func startRouter(t *testing.T, addrs ...string) *Router {
	t.Helper()
	r, err := New(Config{Placement: addrs})
	if err != nil {
		t.Fatal(err)
	}
	r.Start(context.Background())
	t.Cleanup(func() { r.Close() })
	return r
}

// entityNames lists the names of the router's table, sorted.
func entityNames(r *Router) []string {
	var names []string
	if t := r.Table(); t != nil {
		for _, e := range t.Entities {
			names = append(names, e.Name)
		}
	}
	slices.Sort(names)
	return names
}

// scriptedPlacement serves WatchRoutes from a script: the n-th stream
// sends streams[n] and then stays open. It records the requests.
type scriptedPlacement struct {
	placementpb.UnimplementedPlacementServiceServer
	streams [][]*placementpb.RoutingTable

	mu       sync.Mutex
	requests []*placementpb.WatchRoutesRequest
}

func (p *scriptedPlacement) WatchRoutes(req *placementpb.WatchRoutesRequest, stream grpc.ServerStreamingServer[placementpb.RoutingTable]) error {
	p.mu.Lock()
	n := len(p.requests)
	p.requests = append(p.requests, req)
	p.mu.Unlock()
	if n < len(p.streams) {
		for _, m := range p.streams[n] {
			if err := stream.Send(m); err != nil {
				return err
			}
		}
	}
	<-stream.Context().Done()
	return stream.Context().Err()
}

func (p *scriptedPlacement) request(i int) *placementpb.WatchRoutesRequest {
	p.mu.Lock()
	defer p.mu.Unlock()
	if i >= len(p.requests) {
		return nil
	}
	return p.requests[i]
}

func serveScript(t *testing.T, p *scriptedPlacement) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	placementpb.RegisterPlacementServiceServer(g, p)
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	return lis.Addr().String()
}

func queue(id uint64, name string) *placementpb.Entity {
	return &placementpb.Entity{Id: id, Name: name, PartitionGroups: []uint64{1}}
}

func subscription(id uint64, name string, rules int) *placementpb.Entity {
	e := &placementpb.Entity{Id: id, Name: name, Kind: placementpb.EntityKind_ENTITY_KIND_SUBSCRIPTION, PartitionGroups: []uint64{1}}
	for i := range rules {
		e.Rules = append(e.Rules, &placementpb.Rule{Name: fmt.Sprint("r", i)})
	}
	return e
}

// TestRouterMissedChange: a change that does not follow the router's
// table is not applied (the table keeps what it had); the router asks for
// a whole table again (after_version 0) and takes it. Changes that follow
// are applied: creations, replacements (a subscription's rules, counted
// by Filters), removals.
func TestRouterMissedChange(t *testing.T) {
	groups := []*placementpb.Group{{Id: 1, HasQuorum: true}}
	p := &scriptedPlacement{streams: [][]*placementpb.RoutingTable{{
		{Version: 10, Entities: []*placementpb.Entity{queue(1, "a"), subscription(2, "t/Subscriptions/s", 1)}, Groups: groups},
		{Version: 11, ChangesFrom: 10, Entities: []*placementpb.Entity{queue(3, "b"), subscription(2, "t/Subscriptions/s", 3)}, Groups: groups},
		// 11 -> 12 deleted a: missed.
		{Version: 13, ChangesFrom: 12, Entities: []*placementpb.Entity{queue(4, "c")}, Groups: groups},
	}, {
		{Version: 13, Entities: []*placementpb.Entity{subscription(2, "t/Subscriptions/s", 3), queue(3, "b"), queue(4, "c")}, Groups: groups},
		{Version: 14, ChangesFrom: 13, RemovedEntities: []uint64{2}, Groups: groups},
	}}}
	r := startRouter(t, serveScript(t, p))
	waitFor(t, "the router to ask again", func() bool { return p.request(1) != nil })
	if first := p.request(0); !first.Changes || first.AfterVersion != 0 {
		t.Fatalf("the first request: %v; want changes after a whole table", first)
	}
	if again := p.request(1); !again.Changes || again.AfterVersion != 0 {
		t.Fatalf("the request after a missed change: %v; want a whole table (after_version 0) and changes", again)
	}
	waitFor(t, "the whole table of version 14", func() bool {
		tb := r.Table()
		return tb != nil && tb.Version == 14
	})
	if got := entityNames(r); !slices.Equal(got, []string{"b", "c"}) {
		t.Fatalf("entities %v; want b and c", got)
	}
	if r.HasEntity("a") || !r.HasEntity("B") || r.HasEntity("t/subscriptions/s") {
		t.Fatal("HasEntity disagrees with the table")
	}
	if n := r.Filters("T"); n != 0 {
		t.Fatalf("Filters of t after its subscription went: %d", n)
	}
}

// TestRouterAppliesChangesInPlace: a change replaces records by id,
// keeps the rules when it does not carry them, and keeps Filters' counts
// right as subscriptions come, change and go.
func TestRouterAppliesChangesInPlace(t *testing.T) {
	rule := func(name string) *placementpb.AuthorizationRule {
		return &placementpb.AuthorizationRule{Name: name, Rights: 1, PrimaryKey: "cHJpbWFyeS1rZXktb2YtZW5vdWdoLWxlbmd0aA=="}
	}
	groups := []*placementpb.Group{{Id: 1, HasQuorum: true}}
	r, err := New(Config{Placement: []string{"127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	steps := []*placementpb.RoutingTable{
		{Version: 5, Entities: []*placementpb.Entity{subscription(1, "t/Subscriptions/a", 2)}, Groups: groups, AuthorizationRules: []*placementpb.AuthorizationRule{rule("k1")}},
		{Version: 6, ChangesFrom: 5, Entities: []*placementpb.Entity{subscription(2, "T/subscriptions/b", 1)}, Groups: groups},
		{Version: 7, ChangesFrom: 6, Entities: []*placementpb.Entity{subscription(1, "t/Subscriptions/a", 0)}, Groups: groups, AuthorizationRulesChanged: true,
			AuthorizationRules: []*placementpb.AuthorizationRule{rule("k1"), rule("k2")}},
		{Version: 8, ChangesFrom: 7, RemovedEntities: []uint64{2, 99}, Entities: []*placementpb.Entity{queue(3, "q")}, Groups: []*placementpb.Group{{Id: 1}}},
	}
	wantFilters := []int{2, 3, 1, 0}
	wantRules := []int{1, 1, 2, 2}
	for i, step := range steps {
		if err := r.install(step); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if got := r.Filters("t"); got != wantFilters[i] {
			t.Fatalf("step %d: Filters(t) = %d, want %d", i, got, wantFilters[i])
		}
		if got := len(r.Ruleset().Rules()); got != wantRules[i] {
			t.Fatalf("step %d: %d rules, want %d", i, got, wantRules[i])
		}
	}
	if got := entityNames(r); !slices.Equal(got, []string{"q", "t/Subscriptions/a"}) {
		t.Fatalf("entities %v", got)
	}
	if r.Serving(queue(3, "q"), 0) {
		t.Fatal("the change's group 1 has no quorum, yet Serving")
	}
	// A change from a version other than the table's changes nothing.
	if err := r.install(&placementpb.RoutingTable{Version: 10, ChangesFrom: 9, RemovedEntities: []uint64{3}}); err == nil || !r.HasEntity("q") {
		t.Fatalf("a change from 9 on the table of 8: %v, q still there %v", err, r.HasEntity("q"))
	}
	// Until a whole table arrives, which it takes even if older.
	if err := r.install(&placementpb.RoutingTable{Version: 7, Entities: []*placementpb.Entity{queue(4, "old")}}); err != nil {
		t.Fatal(err)
	}
	if got := entityNames(r); !slices.Equal(got, []string{"old"}) {
		t.Fatalf("after the whole table of a resync: %v", got)
	}
}

// TestRouterFollowsChangesAcrossMembers: a router on a real meta group
// keeps its table equal to the members' through creations and deletions,
// and when the member it follows (the meta leader) is killed, continues
// on another member from the version it held.
func TestRouterFollowsChangesAcrossMembers(t *testing.T) {
	c := placementtest.Start(t, placementtest.Options{})
	leader := c.Leader(t)
	placementtest.Eventually(t, tableWait, "3 groups", func() bool { return len(leader.Service.Table().Groups) >= 3 })
	// The router asks the leader first, then the others in turn.
	addrs := []string{leader.Addr}
	for _, m := range c.Members() {
		if m != leader {
			addrs = append(addrs, m.Addr)
		}
	}
	r := startRouter(t, addrs...)
	create := func(m *placementtest.Member, name string) {
		t.Helper()
		var err error
		for start := time.Now(); time.Since(start) < tableWait; time.Sleep(50 * time.Millisecond) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err = m.Client.CreateEntity(ctx, &placementpb.CreateEntityRequest{Name: name, Properties: &placementpb.QueueProperties{}})
			cancel()
			if err == nil {
				return
			}
		}
		t.Fatalf("creating %s: %v", name, err)
	}
	same := func(m *placementtest.Member) func() bool {
		return func() bool {
			got, want := r.Table(), m.Service.Table()
			return got != nil && proto.Equal(got, want)
		}
	}
	for i := range 5 {
		create(leader, fmt.Sprintf("q%d", i))
	}
	if _, err := leader.Client.DeleteEntity(context.Background(), &placementpb.DeleteEntityRequest{Name: "q1"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the router's table to be the leader's", same(leader))

	c.Kill(leader)
	next := c.Leader(t)
	for i := range 5 {
		create(next, fmt.Sprintf("after-%d", i))
	}
	waitFor(t, "the router's table to be the new leader's", same(next))
	if r.HasEntity("q1") || !r.HasEntity("after-4") {
		t.Fatal("HasEntity disagrees with the table")
	}
}

// TestRouterAcrossACatalogStartedOver: a cluster whose data was wiped
// and started over numbers its catalog's versions from 1 again, under a
// new birth. A change of the new catalog is not applied to the old
// table even when its version follows it, a whole table of the new
// catalog is taken although its version is lower, and a lower table of
// the same catalog (a lagging member) is still ignored.
func TestRouterAcrossACatalogStartedOver(t *testing.T) {
	groups := []*placementpb.Group{{Id: 1, HasQuorum: true}}
	r, err := New(Config{Placement: []string{"127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := r.install(&placementpb.RoutingTable{Version: 50, CatalogBornMs: 1000, Entities: []*placementpb.Entity{queue(1, "old")}, Groups: groups}); err != nil {
		t.Fatal(err)
	}
	if err := r.install(&placementpb.RoutingTable{Version: 40, CatalogBornMs: 1000, Entities: []*placementpb.Entity{queue(1, "lagging")}, Groups: groups}); err != nil {
		t.Fatal(err)
	}
	if !r.HasEntity("old") || r.HasEntity("lagging") {
		t.Fatal("a lower table of the same catalog replaced the table")
	}
	err = r.install(&placementpb.RoutingTable{Version: 51, ChangesFrom: 50, CatalogBornMs: 2000, Entities: []*placementpb.Entity{queue(7, "new")}, Groups: groups})
	if !errors.Is(err, errMissedChange) || r.HasEntity("new") {
		t.Fatalf("a change of another catalog: %v, applied: %v", err, r.HasEntity("new"))
	}
	if err := r.install(&placementpb.RoutingTable{Version: 3, CatalogBornMs: 2000, Entities: []*placementpb.Entity{queue(7, "new")}, Groups: groups}); err != nil {
		t.Fatal(err)
	}
	if r.HasEntity("old") || !r.HasEntity("new") {
		t.Fatalf("after the new catalog's whole table: %v", entityNames(r))
	}
	// Born 0 (a member older than the field) counts as the same catalog.
	if err := r.install(&placementpb.RoutingTable{Version: 4, ChangesFrom: 3, Entities: []*placementpb.Entity{queue(8, "newer")}, Groups: groups}); err != nil || !r.HasEntity("newer") {
		t.Fatalf("a change without a birth: %v", err)
	}
}
