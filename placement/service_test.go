package placement_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/quorumbus/quorumbus/placement"
	"github.com/quorumbus/quorumbus/placement/placementtest"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
	pb "github.com/quorumbus/quorumbus/proto/placementpb"
)

const wait = 20 * time.Second

// catchUpWait bounds how long a member restarted from its disk may take to
// serve what it missed. The leader learns it is back only at its next
// attempt at it, and hashicorp/raft backs off up to 10.24 s between
// attempts at a follower that failed (more than one attempt may fail while
// the member restarts), so wait's 20 s was sometimes not enough.
const catchUpWait = 45 * time.Second

// watcher follows one member's WatchRoutes stream.
type watcher struct {
	mu      sync.Mutex
	latest  *pb.RoutingTable
	err     error  // how the stream ended
	retries int    // streams opened again after a retriable error
	lastErr error  // the latest retriable error
	bad     string // a broken promise of the stream, if any
}

// watch follows one stream of m's, until it ends.
func watch(t *testing.T, m *placementtest.Member) *watcher {
	t.Helper()
	return startWatch(t, m, false)
}

// watchRetrying follows m's routing table as a front-end does: when a
// stream ends or cannot open with a retriable error (UNAVAILABLE from a
// member still catching up with the meta log after a restart), it opens
// another, after the version it has.
func watchRetrying(t *testing.T, m *placementtest.Member) *watcher {
	t.Helper()
	return startWatch(t, m, true)
}

func startWatch(t *testing.T, m *placementtest.Member, retry bool) *watcher {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w := &watcher{}
	follow := func() error {
		var after uint64
		w.mu.Lock()
		if w.latest != nil {
			after = w.latest.Version
		}
		w.mu.Unlock()
		stream, err := m.Client.WatchRoutes(ctx, &pb.WatchRoutesRequest{AfterVersion: after})
		if err != nil {
			return err
		}
		for {
			table, err := stream.Recv()
			if err != nil {
				return err
			}
			w.mu.Lock()
			if w.latest != nil && table.Version <= w.latest.Version {
				w.bad = fmt.Sprintf("version went from %d to %d", w.latest.Version, table.Version)
			}
			w.latest = table
			w.mu.Unlock()
		}
	}
	go func() {
		for {
			err := follow()
			w.mu.Lock()
			if !retry || !transient(err) || ctx.Err() != nil {
				w.err = err
				w.mu.Unlock()
				return
			}
			w.retries++
			w.lastErr = err
			w.mu.Unlock()
			time.Sleep(50 * time.Millisecond)
		}
	}()
	return w
}

// has reports whether the latest table holds every named entity.
func (w *watcher) has(names map[string]uint64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.latest == nil {
		return false
	}
	got := map[string]uint64{}
	for _, e := range w.latest.Entities {
		got[e.Name] = e.Id
	}
	for name, id := range names {
		if got[name] != id {
			return false
		}
	}
	return true
}

// state describes what the watcher has seen, for a timeout's message.
func (w *watcher) state() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return fmt.Sprintf("the routes stream ended: %v", w.err)
	}
	if w.latest == nil {
		return fmt.Sprintf("no table yet after %d retries (the latest after %v)", w.retries, w.lastErr)
	}
	return fmt.Sprintf("table version %d with %d entities", w.latest.Version, len(w.latest.Entities))
}

func (w *watcher) check(t *testing.T) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.bad != "" {
		t.Error(w.bad)
	}
}

func waitGroups(t *testing.T, m *placementtest.Member, n int) {
	t.Helper()
	placementtest.Eventually(t, wait, fmt.Sprintf("%d partition groups", n), func() bool {
		return len(m.Service.Table().Groups) >= n
	})
}

// transient reports whether an error only says that the meta group is
// between leaders, so that the call may be tried again.
func transient(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.FailedPrecondition, codes.DeadlineExceeded:
		return true
	}
	return false
}

// retry calls f until it returns nil or an error that is not transient,
// for at most wait. It reports whether f was tried more than once.
func retry(t *testing.T, f func(ctx context.Context) error) (retried bool, err error) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for attempt := 0; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = f(ctx)
		cancel()
		if !transient(err) || time.Now().After(deadline) {
			return attempt > 0, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// createRetrying creates an entity through m, retrying while the meta
// group is between leaders. It returns the entity once acknowledged.
func createRetrying(t *testing.T, m *placementtest.Member, req *pb.CreateEntityRequest) *pb.Entity {
	t.Helper()
	var e *pb.Entity
	retried, err := retry(t, func(ctx context.Context) (err error) {
		e, err = m.Client.CreateEntity(ctx, req)
		return err
	})
	if status.Code(err) == codes.AlreadyExists && retried {
		// An earlier attempt whose outcome was unknown made it.
		_, err = retry(t, func(ctx context.Context) (err error) {
			e, err = m.Client.GetEntity(ctx, &pb.GetEntityRequest{Name: req.Name})
			return err
		})
	}
	if err != nil {
		t.Fatalf("creating %s: %v", req.Name, err)
	}
	return e
}

// TestMetaGroupFailover creates entities, kills the meta leader, creates
// more through the new leader and through a follower, and checks that every
// member's WatchRoutes stream shows every acknowledged entity, including a
// member restarted from its disk.
func TestMetaGroupFailover(t *testing.T) {
	c := placementtest.Start(t, placementtest.Options{})
	leader := c.Leader(t)
	waitGroups(t, leader, 3)

	watchers := map[*placementtest.Member]*watcher{}
	for _, m := range c.Members() {
		watchers[m] = watch(t, m)
	}
	acked := map[string]uint64{}
	create := func(m *placementtest.Member, name string, partitions uint32) {
		e := createRetrying(t, m, &pb.CreateEntityRequest{Name: name, Properties: &pb.QueueProperties{PartitionCount: partitions}})
		for other, id := range acked {
			if id == e.Id {
				t.Fatalf("%s got id %d, which %s has", name, e.Id, other)
			}
		}
		acked[name] = e.Id
	}
	for i := range 8 {
		create(leader, fmt.Sprintf("before-%d", i), uint32(i%3))
	}
	for m, w := range watchers {
		placementtest.Eventually(t, wait, m.ID+" to see the first entities", func() bool { return w.has(acked) })
	}
	if err := leader.Service.TakeSnapshot(); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	create(leader, "after-snapshot", 0)

	c.Kill(leader)
	next := c.Leader(t)
	if next == leader {
		t.Fatal("the killed member still leads")
	}
	var follower *placementtest.Member
	for _, m := range c.Up() {
		if m != next {
			follower = m
		}
	}
	for i := range 4 {
		create(next, fmt.Sprintf("leader-%d", i), 0)
		create(follower, fmt.Sprintf("forwarded-%d", i), 2) // the follower forwards to the leader
	}
	for _, m := range c.Up() {
		w := watchers[m]
		placementtest.Eventually(t, wait, m.ID+" to see every acknowledged entity", func() bool { return w.has(acked) })
		w.check(t)
	}

	// The killed member comes back from its disk (snapshot, then log) and
	// catches up on what it missed. Until it has, it answers UNAVAILABLE
	// (catchup.go), which clients retry; and that may take longer than
	// the member waits before answering: it learns the commit index from
	// the leader's first AppendEntries with entries, and hashicorp/raft's
	// leader backs off up to 10.24 s between attempts at a follower that
	// failed (heartbeats, capped at half the heartbeat timeout, carry no
	// commit index). So the watcher retries, as front-ends do.
	c.Restart(leader)
	w := watchRetrying(t, leader)
	start := time.Now()
	for !w.has(acked) {
		if time.Since(start) > catchUpWait {
			t.Fatalf("the restarted member did not catch up in %v: %s; its raft: %v", catchUpWait, w.state(), leader.Service.RaftStats())
		}
		time.Sleep(10 * time.Millisecond)
	}
	w.check(t)
	t.Logf("the restarted member served its table after %v, %d retries", time.Since(start).Round(time.Millisecond), w.retries)

	// Reads through any member agree.
	for _, m := range c.Up() {
		list, err := m.Client.ListEntities(context.Background(), &pb.ListEntitiesRequest{})
		if err != nil {
			t.Fatalf("list through %s: %v", m.ID, err)
		}
		if len(list.Entities) != len(acked) {
			t.Fatalf("list through %s: %d entities, want %d", m.ID, len(list.Entities), len(acked))
		}
		for _, e := range list.Entities {
			if acked[e.Name] != e.Id {
				t.Fatalf("list through %s: unexpected %s (id %d)", m.ID, e.Name, e.Id)
			}
		}
	}
}

// TestControlLoopConfiguresPartitions checks that the meta leader upserts
// each partition's EntityConfig on the group's leader (following leader
// hints), pushes updates, and deletes the partitions of a deleted entity.
func TestControlLoopConfiguresPartitions(t *testing.T) {
	c := placementtest.Start(t, placementtest.Options{})
	members := c.Members()
	for g := range uint64(3) { // groups 1..3 are led by m2, m3, m1: most first calls need a hint
		c.Partitions.SetLeader(g+1, members[(g+1)%3].ID)
	}
	leader := c.Leader(t)
	waitGroups(t, leader, 3)

	e := createRetrying(t, leader, &pb.CreateEntityRequest{
		Name: "Orders",
		Properties: &pb.QueueProperties{
			PartitionCount: 4, RequiresSession: true, DefaultMessageTtlMs: 3_600_000,
			DeadLetteringOnMessageExpiration: true, MaxSizeInMegabytes: 2048,
		},
		Status: pb.EntityStatus_ENTITY_STATUS_RECEIVE_DISABLED,
	})
	if len(e.PartitionGroups) != 4 {
		t.Fatalf("partition groups %v", e.PartitionGroups)
	}
	if distinct := slices.Compact(slices.Sorted(slices.Values(e.PartitionGroups))); len(distinct) != 3 {
		t.Fatalf("4 partitions on groups %v, want all 3 groups used", e.PartitionGroups)
	}
	want := func(p uint32, lock int64) *partitionpb.EntityConfig {
		return &partitionpb.EntityConfig{
			EntityId: e.Id, Partition: p, Name: "Orders",
			LockDurationMs: lock, MaxDeliveryCount: 10, DefaultTtlMs: 3_600_000,
			DeadLetteringOnExpiration: true, DuplicateDetectionWindowMs: 600_000,
			RequiresSession: true, MaxSizeBytes: 2048 << 20,
			Status: uint32(partitionpb.EntityStatus_ENTITY_STATUS_RECEIVE_DISABLED),
		}
	}
	// Each configuration carries the catalog index of its change, later
	// for a later change, so that a group can ignore one arriving late.
	versions := map[uint32]uint64{}
	configured := func(lock int64) func() bool {
		return func() bool {
			seen := map[uint32]uint64{}
			for p, g := range e.PartitionGroups {
				got, ok := c.Partitions.Config(g, e.Id, uint32(p))
				if !ok || got.Version <= versions[uint32(p)] {
					return false
				}
				seen[uint32(p)] = got.Version
				got.Version = 0
				if !proto.Equal(got, want(uint32(p), lock)) {
					return false
				}
			}
			maps.Copy(versions, seen)
			return true
		}
	}
	// CreateEntity waits for the partitions (CreateWait), so they are there
	// now unless the meta leader changed meanwhile.
	placementtest.Eventually(t, wait, "every partition configured", configured(60_000))
	for _, call := range c.Partitions.Calls() {
		if want := members[call.Group%3].ID; call.Node != want {
			t.Errorf("group %d was configured through %s, its leader is %s", call.Group, call.Node, want)
		}
	}
	// The replicas are m1, m2, m3 in that order. Following the hint of the
	// first replica that refuses reaches the leader at the second try; going
	// down the list would take three for group 2 (led by m3).
	for call, n := range c.Partitions.Refused() {
		if n > 1 {
			t.Errorf("%+v was refused %d times: the leader hint was not followed", call, n)
		}
	}

	update := &pb.UpdateEntityRequest{
		Name: "ORDERS", Status: pb.EntityStatus_ENTITY_STATUS_RECEIVE_DISABLED,
		Properties: &pb.QueueProperties{LockDurationMs: 30_000, DefaultMessageTtlMs: 3_600_000,
			DeadLetteringOnMessageExpiration: true, MaxSizeInMegabytes: 2048},
	}
	if _, err := retry(t, func(ctx context.Context) error {
		_, err := leader.Client.UpdateEntity(ctx, update)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	placementtest.Eventually(t, wait, "the update on every partition", configured(30_000))

	if retried, err := retry(t, func(ctx context.Context) error {
		_, err := leader.Client.DeleteEntity(ctx, &pb.DeleteEntityRequest{Name: "orders"})
		return err
	}); err != nil && !(retried && status.Code(err) == codes.NotFound) {
		t.Fatal(err)
	}
	placementtest.Eventually(t, wait, "the partitions deleted", func() bool { return c.Partitions.Len() == 0 })
	placementtest.Eventually(t, wait, "no pending work", func() bool { return leader.Service.PendingTasks() == 0 })
	// Deletes are versioned too, later than every configuration, so that
	// the group's tombstone outranks an upsert arriving late.
	deletes := 0
	for _, call := range c.Partitions.Calls() {
		if call.Op == "delete" {
			deletes++
			if call.Version <= versions[call.Partition] {
				t.Errorf("delete of partition %d has version %d, its last configuration %d", call.Partition, call.Version, versions[call.Partition])
			}
		}
	}
	if deletes < len(e.PartitionGroups) {
		t.Errorf("%d deletes for %d partitions", deletes, len(e.PartitionGroups))
	}
}

// TestNewLeaderResumesPendingWork: the partition groups are unreachable
// while an entity is created, the meta leader dies, and the next leader
// configures the partitions from the tasks recorded in the catalog.
func TestNewLeaderResumesPendingWork(t *testing.T) {
	c := placementtest.Start(t, placementtest.Options{CreateWait: -1})
	leader := c.Leader(t)
	waitGroups(t, leader, 3)
	c.Partitions.SetAvailable(false)
	e := createRetrying(t, leader, &pb.CreateEntityRequest{
		Name: "pending", Properties: &pb.QueueProperties{EnablePartitioning: true},
	})
	if n := len(e.PartitionGroups); n != 16 {
		t.Fatalf("%d partitions, want the default 16", n)
	}
	for _, m := range c.Up() {
		placementtest.Eventually(t, wait, m.ID+" to record the pending work", func() bool { return m.Service.PendingTasks() == 16 })
	}
	c.Kill(leader)
	next := c.Leader(t)
	c.Partitions.SetAvailable(true)
	placementtest.Eventually(t, wait, "all 16 partitions configured", func() bool { return c.Partitions.Len() == 16 })
	for _, m := range c.Up() {
		placementtest.Eventually(t, wait, m.ID+" to record the work done", func() bool { return m.Service.PendingTasks() == 0 })
	}
	if next.Service.PendingTasks() != 0 {
		t.Fatal("the new leader still has pending work")
	}
}

// TestErrorsAndForwarding checks the gRPC codes clients see, and the
// answer of a member that is not the leader to an already forwarded call.
func TestErrorsAndForwarding(t *testing.T) {
	c := placementtest.Start(t, placementtest.Options{})
	leader := c.Leader(t)
	waitGroups(t, leader, 3)
	var follower *placementtest.Member
	for _, m := range c.Up() {
		if m != leader {
			follower = m
		}
	}
	createRetrying(t, follower, &pb.CreateEntityRequest{Name: "q"})
	for _, tt := range []struct {
		name string
		call func(context.Context, pb.PlacementServiceClient) error
		code codes.Code
	}{
		{"name taken, any case", func(ctx context.Context, c pb.PlacementServiceClient) error {
			_, err := c.CreateEntity(ctx, &pb.CreateEntityRequest{Name: "Q"})
			return err
		}, codes.AlreadyExists},
		{"bad name", func(ctx context.Context, c pb.PlacementServiceClient) error {
			_, err := c.CreateEntity(ctx, &pb.CreateEntityRequest{Name: "a b"})
			return err
		}, codes.InvalidArgument},
		{"lock over 5 minutes", func(ctx context.Context, c pb.PlacementServiceClient) error {
			_, err := c.CreateEntity(ctx, &pb.CreateEntityRequest{Name: "long", Properties: &pb.QueueProperties{LockDurationMs: 300_001}})
			return err
		}, codes.InvalidArgument},
		{"get missing", func(ctx context.Context, c pb.PlacementServiceClient) error {
			_, err := c.GetEntity(ctx, &pb.GetEntityRequest{Name: "nope"})
			return err
		}, codes.NotFound},
		{"update missing", func(ctx context.Context, c pb.PlacementServiceClient) error {
			_, err := c.UpdateEntity(ctx, &pb.UpdateEntityRequest{Name: "nope"})
			return err
		}, codes.NotFound},
		{"delete missing", func(ctx context.Context, c pb.PlacementServiceClient) error {
			_, err := c.DeleteEntity(ctx, &pb.DeleteEntityRequest{Name: "nope"})
			return err
		}, codes.NotFound},
		{"change sessions", func(ctx context.Context, c pb.PlacementServiceClient) error {
			_, err := c.UpdateEntity(ctx, &pb.UpdateEntityRequest{Name: "q", Properties: &pb.QueueProperties{RequiresSession: true}})
			return err
		}, codes.InvalidArgument},
	} {
		for _, m := range []*placementtest.Member{leader, follower} {
			_, err := retry(t, func(ctx context.Context) error { return tt.call(ctx, m.Client) })
			if status.Code(err) != tt.code {
				t.Errorf("%s through %s: %v, want %v", tt.name, m.ID, err, tt.code)
			}
		}
	}
	var got *pb.Entity
	if _, err := retry(t, func(ctx context.Context) (err error) {
		got, err = follower.Client.GetEntity(ctx, &pb.GetEntityRequest{Name: "Q"})
		return err
	}); err != nil || got.Name != "q" {
		t.Fatalf("get through the follower: %v, %v", got, err)
	}

	// A request forwarded once is not forwarded again: the answer names the
	// leader. (Asked again should the leader change in between.)
	placementtest.Eventually(t, wait, "a hint naming the leader", func() bool {
		leader := c.Leader(t)
		for _, m := range c.Up() {
			if m == leader {
				continue
			}
			fwd := metadata.AppendToOutgoingContext(context.Background(), "x-quorumbus-placement-forwarded", "test")
			_, err := m.Client.GetEntity(fwd, &pb.GetEntityRequest{Name: "q"})
			st := status.Convert(err)
			var hint *pb.MetaLeaderHint
			for _, d := range st.Details() {
				if h, ok := d.(*pb.MetaLeaderHint); ok {
					hint = h
				}
			}
			if st.Code() != codes.FailedPrecondition || hint == nil || hint.LeaderId != leader.ID || hint.LeaderAddr != leader.Addr {
				t.Logf("forwarded to follower %s: %v, hint %v; leader %s at %s", m.ID, err, hint, leader.ID, leader.Addr)
				return false
			}
		}
		return true
	})
}

// TestNoGroupsYet: with fewer storage nodes than the replication factor,
// no groups exist and creating an entity is unavailable, not an error of
// the request.
func TestNoGroupsYet(t *testing.T) {
	c := placementtest.Start(t, placementtest.Options{ReplicationFactor: 4})
	leader := c.Leader(t)
	placementtest.Eventually(t, wait, "nodes registered", func() bool { return len(leader.Service.Table().Nodes) == 3 })
	_, err := leader.Client.CreateEntity(context.Background(), &pb.CreateEntityRequest{Name: "q"})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("create without groups: %v, want Unavailable", err)
	}
	if n := len(leader.Service.Table().Groups); n != 0 {
		t.Fatalf("%d groups with 3 nodes for replication factor 4", n)
	}
}

func TestConfigValidate(t *testing.T) {
	_, tr := raftTransport()
	for _, tt := range []struct {
		name string
		cfg  placement.Config
		ok   bool
	}{
		{"minimal", placement.Config{NodeID: "n", DataDir: "d", Transport: tr}, true},
		{"no id", placement.Config{DataDir: "d", Transport: tr}, false},
		{"no dir", placement.Config{NodeID: "n", Transport: tr}, false},
		{"no transport", placement.Config{NodeID: "n", DataDir: "d"}, false},
		{"negative groups", placement.Config{NodeID: "n", DataDir: "d", Transport: tr, Groups: -1}, false},
		{"negative replicas per node", placement.Config{NodeID: "n", DataDir: "d", Transport: tr, MaxReplicasPerNode: -1}, false},
		{"negative replication", placement.Config{NodeID: "n", DataDir: "d", Transport: tr, ReplicationFactor: -1}, false},
		{"tiny election timeout", placement.Config{NodeID: "n", DataDir: "d", Transport: tr, ElectionTimeout: time.Millisecond}, false},
		{"bootstrap without self", placement.Config{NodeID: "n", DataDir: "d", Transport: tr, Bootstrap: bootstrapOf("x")}, false},
		{"bootstrap with self", placement.Config{NodeID: "n", DataDir: "d", Transport: tr, Bootstrap: bootstrapOf("n", "x")}, true},
	} {
		err := tt.cfg.Validate()
		if tt.ok != (err == nil) || err != nil && !errors.Is(err, placement.ErrInvalidConfig) {
			t.Errorf("%s: Validate = %v", tt.name, err)
		}
	}
	var _ io.Closer = (*placement.Service)(nil)
}

// TestJoinMetaGroup adds a member started without Bootstrap: it receives
// the catalog and serves WatchRoutes and forwarded writes.
func TestJoinMetaGroup(t *testing.T) {
	c := placementtest.Start(t, placementtest.Options{})
	leader := c.Leader(t)
	waitGroups(t, leader, 3)
	first := createRetrying(t, leader, &pb.CreateEntityRequest{Name: "first"})

	m := c.Join(t)
	w := watchRetrying(t, m) // it answers UNAVAILABLE until it has caught up
	placementtest.Eventually(t, wait, "the new member to get the catalog", func() bool {
		return w.has(map[string]uint64{"first": first.Id})
	})
	second := createRetrying(t, m, &pb.CreateEntityRequest{Name: "second"})
	placementtest.Eventually(t, wait, "the new member to see its own write", func() bool {
		return w.has(map[string]uint64{"first": first.Id, "second": second.Id})
	})
	w.check(t)
}

// TestMetaVotersFollowDrains: a storage node that joined later stays out
// of the meta group while it has its three voters; when a voter's node is
// drained, the leader adds the newcomer as a voter and then removes the
// drained one, so the catalog keeps three voters on usable nodes, and it
// keeps working with the drained member stopped.
func TestMetaVotersFollowDrains(t *testing.T) {
	c := placementtest.Start(t, placementtest.Options{MetaVoters: 3})
	leader := c.Leader(t)
	waitGroups(t, leader, 3)
	extra := c.AddNode(t)
	voters := func() []string {
		var out []string
		for _, srv := range c.Leader(t).Service.MetaConfiguration() {
			if srv.Suffrage == raft.Voter {
				out = append(out, string(srv.ID))
			}
		}
		slices.Sort(out)
		return out
	}
	// Three usable voters: the newcomer is not added.
	time.Sleep(time.Second)
	if got := voters(); !slices.Equal(got, []string{"m1", "m2", "m3"}) {
		t.Fatalf("voters %v before any drain, want m1 m2 m3", got)
	}

	// Drain the leader's own node: the hardest case (it removes itself).
	drained := c.Leader(t)
	if _, err := drained.Client.DrainNode(context.Background(), &pb.DrainNodeRequest{NodeId: drained.ID, Draining: true}); err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, id := range []string{"m1", "m2", "m3", extra.ID} {
		if id != drained.ID {
			want = append(want, id)
		}
	}
	placementtest.Eventually(t, wait, "the newcomer to replace the drained voter", func() bool {
		return slices.Equal(voters(), want)
	})

	// With the drained member gone, the other three keep a quorum.
	c.Kill(drained)
	next := c.Leader(t)
	e := createRetrying(t, next, &pb.CreateEntityRequest{Name: "after-drain"})
	w := watchRetrying(t, extra)
	placementtest.Eventually(t, wait, "the new voter to serve the catalog", func() bool {
		return w.has(map[string]uint64{"after-drain": e.Id})
	})
}
