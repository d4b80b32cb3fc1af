package placement_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quorumbus/quorumbus/placement/placementtest"
	pb "github.com/quorumbus/quorumbus/proto/placementpb"
)

// A voter removed from the meta group while cut off never receives the
// entry that removes it: back on the network, it still finds itself in
// its own configuration but hears from no leader. Once orphaned it must
// stop serving its frozen routing table, so that its storage node and the
// front-ends read the live group's instead.
func TestRemovedVoterStopsServingItsFrozenTable(t *testing.T) {
	const election = 200 * time.Millisecond // orphaned after 2 s
	c := placementtest.Start(t, placementtest.Options{MetaVoters: 3, ElectionTimeout: election})
	leader := c.Leader(t)
	waitGroups(t, leader, 3)
	extra := c.AddNode(t)

	var gone *placementtest.Member
	for _, m := range c.Members() {
		if m != leader && m != extra {
			gone = m
			break
		}
	}
	frozen := watch(t, gone)
	placementtest.Eventually(t, wait, "a first table from the member to be removed", func() bool {
		frozen.mu.Lock()
		defer frozen.mu.Unlock()
		return frozen.latest != nil
	})
	if gone.Service.Orphaned() {
		t.Fatal("a member in touch with its leader counts as orphaned")
	}

	// Drained and cut off, it is replaced by the newcomer and removed
	// without hearing of it.
	if _, err := leader.Client.DrainNode(context.Background(), &pb.DrainNodeRequest{NodeId: gone.ID, Draining: true}); err != nil {
		t.Fatal(err)
	}
	c.Isolate(gone)
	placementtest.Eventually(t, wait, "the drained voter to be removed", func() bool {
		for _, srv := range c.Leader(t).Service.MetaConfiguration() {
			if string(srv.ID) == gone.ID {
				return false
			}
		}
		return true
	})
	c.Heal(gone)
	if !gone.Service.Member() {
		t.Fatal("the removed member learnt of its removal; the test needs one that did not")
	}

	// Orphaned: the open stream ends, and a new one is refused.
	placementtest.Eventually(t, wait, "the removed member to count itself orphaned", gone.Service.Orphaned)
	placementtest.Eventually(t, wait, "its open routing stream to end", func() bool {
		frozen.mu.Lock()
		defer frozen.mu.Unlock()
		return frozen.err != nil
	})
	if code := status.Code(frozen.err); code != codes.Unavailable {
		t.Fatalf("the stream ended with %v, want Unavailable", frozen.err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stream, err := gone.Client.WatchRoutes(ctx, &pb.WatchRoutesRequest{})
	if err == nil {
		_, err = stream.Recv()
	}
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("WatchRoutes on the orphaned member: %v, want Unavailable", err)
	}

	// The live group's members are not orphaned and serve the table.
	for _, m := range c.Up() {
		if m == gone {
			continue
		}
		if m.Service.Orphaned() {
			t.Errorf("%s, in the live group, counts as orphaned", m.ID)
		}
	}
	live := watchRetrying(t, extra)
	e := createRetrying(t, c.Leader(t), &pb.CreateEntityRequest{Name: "after-removal"})
	placementtest.Eventually(t, wait, "a live member to serve the new entity", func() bool {
		return live.has(map[string]uint64{"after-removal": e.Id})
	})
}
