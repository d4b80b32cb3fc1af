package placement_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quorumbus/quorumbus/placement/placementtest"
	pb "github.com/quorumbus/quorumbus/proto/placementpb"
)

// TestRestartedMembersNeverDenyExistingEntities restarts every member of
// the meta group, which then replays its catalog from the log, and asks
// each of them for existing entities from the moment it is back: GetEntity
// may answer that the member is not ready (a retriable code), never
// NotFound, and the first routing table a member streams already holds
// them. Clients take not-found as final.
func TestRestartedMembersNeverDenyExistingEntities(t *testing.T) {
	c := placementtest.Start(t, placementtest.Options{Groups: 1, CreateWait: -1})
	leader := c.Leader(t)
	waitGroups(t, leader, 1)
	names := map[string]uint64{}
	for i := range 5 {
		e := createRetrying(t, leader, &pb.CreateEntityRequest{Name: fmt.Sprintf("q%d", i)})
		names[e.Name] = e.Id
	}
	for _, m := range c.Members() {
		c.Kill(m)
	}

	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for _, m := range c.Members() {
		c.Restart(m)
		wg.Add(2)
		go func() {
			defer wg.Done()
			errs <- pollGetEntity(m, "q4", names["q4"])
		}()
		go func() {
			defer wg.Done()
			errs <- firstTable(m, names)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}

// pollGetEntity asks m for name until it answers, and fails on NotFound.
func pollGetEntity(m *placementtest.Member, name string, id uint64) error {
	deadline := time.Now().Add(wait)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		e, err := m.Client.GetEntity(ctx, &pb.GetEntityRequest{Name: name})
		cancel()
		switch {
		case err == nil && e.Id == id:
			return nil
		case err == nil:
			return fmt.Errorf("%s: GetEntity(%s) answered id %d, want %d", m.ID, name, e.Id, id)
		case status.Code(err) == codes.NotFound:
			return fmt.Errorf("%s: GetEntity(%s) of an existing entity after a restart: %v", m.ID, name, err)
		case !transient(err):
			return fmt.Errorf("%s: GetEntity(%s): %v", m.ID, name, err)
		case time.Now().After(deadline):
			return fmt.Errorf("%s: GetEntity(%s) still failing after %v: %v", m.ID, name, wait, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// firstTable opens WatchRoutes on m until a stream yields a table, and
// checks that this first table holds every named entity.
func firstTable(m *placementtest.Member, names map[string]uint64) error {
	deadline := time.Now().Add(wait)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		stream, err := m.Client.WatchRoutes(ctx, &pb.WatchRoutesRequest{})
		var t *pb.RoutingTable
		if err == nil {
			t, err = stream.Recv()
		}
		cancel()
		if err == nil {
			got := map[string]uint64{}
			for _, e := range t.Entities {
				got[e.Name] = e.Id
			}
			for name, id := range names {
				if got[name] != id {
					return fmt.Errorf("%s: the first routing table after a restart (version %d) lacks %s", m.ID, t.Version, name)
				}
			}
			return nil
		}
		if !transient(err) || time.Now().After(deadline) {
			return fmt.Errorf("%s: WatchRoutes: %v", m.ID, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
