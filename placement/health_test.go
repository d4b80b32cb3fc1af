package placement_test

import (
	"context"
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/placement/placementtest"
	pb "github.com/quorumbus/quorumbus/proto/placementpb"
)

// A group whose leader stops reporting it serving makes the entities with
// a partition in it Degraded, in the entity reads and in the routing
// table, within GroupSilence and a control round; the entities of the
// other groups stay Active; the group's next serving report clears it.
func TestSilentGroupDegradesItsEntities(t *testing.T) {
	const silence = 600 * time.Millisecond
	c := placementtest.Start(t, placementtest.Options{Groups: 2, GroupSilence: silence})
	leader := c.Leader(t)
	waitGroups(t, leader, 2)
	a := createRetrying(t, leader, &pb.CreateEntityRequest{Name: "a"})
	b := createRetrying(t, leader, &pb.CreateEntityRequest{Name: "b"})
	ga, gb := a.PartitionGroups[0], b.PartitionGroups[0]
	if ga == gb {
		t.Fatalf("both entities on group %d; the test needs one per group", ga)
	}

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var reportB = make(chan bool, 1)
	reportB <- true
	go func() { // the storage nodes' reports, every 100 ms
		serveB := true
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case serveB = <-reportB:
			case <-tick.C:
			}
			req := &pb.ReportGroupsRequest{NodeId: "m1", Groups: []*pb.GroupReport{{GroupId: ga, LeaderId: "m1", HasQuorum: true}}}
			if serveB {
				req.Groups = append(req.Groups, &pb.GroupReport{GroupId: gb, LeaderId: "m1", HasQuorum: true})
			}
			rctx, rcancel := context.WithTimeout(ctx, time.Second)
			leader.Client.ReportGroups(rctx, req) // a failed report is a silent one
			rcancel()
		}
	}()

	degraded := func(name string) bool {
		e, err := leader.Client.GetEntity(ctx, &pb.GetEntityRequest{Name: name})
		if err != nil {
			t.Fatalf("get %s: %v", name, err)
		}
		return e.Degraded
	}
	placementtest.Eventually(t, 5*time.Second, "both entities active", func() bool { return !degraded("a") && !degraded("b") })

	reportB <- false
	start := time.Now()
	placementtest.Eventually(t, 5*time.Second, "b degraded", func() bool { return degraded("b") })
	if took := time.Since(start); took < silence {
		t.Errorf("b degraded after %v, before the group was silent for %v", took, silence)
	}
	if degraded("a") {
		t.Errorf("a degraded although its group reports serving")
	}
	table := routes(t, leader)
	for _, e := range table.Entities {
		if want := e.Name == "b"; e.Degraded != want {
			t.Errorf("routing table: %s degraded %v, want %v", e.Name, e.Degraded, want)
		}
	}

	reportB <- true
	placementtest.Eventually(t, 5*time.Second, "b active again", func() bool { return !degraded("b") })
}

func routes(t *testing.T, m *placementtest.Member) *pb.RoutingTable {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	stream, err := m.Client.WatchRoutes(ctx, &pb.WatchRoutesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	table, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	return table
}

// A replica's report that its group has known no leader for a while
// records the group without quorum at once, long before its silence would
// (GroupSilence is a minute here), unless the group was heard serving
// since that replica lost its leader: then the replica is the one cut
// off, and the report says nothing of the group. The next serving report
// records the group healthy again.
func TestLeaderlessReportDegradesAtOnce(t *testing.T) {
	c := placementtest.Start(t, placementtest.Options{Groups: 2, GroupSilence: time.Minute})
	leader := c.Leader(t)
	waitGroups(t, leader, 2)
	a := createRetrying(t, leader, &pb.CreateEntityRequest{Name: "a"})
	ga := a.PartitionGroups[0]
	ctx := t.Context()
	report := func(r *pb.GroupReport) {
		t.Helper()
		if _, err := leader.Client.ReportGroups(ctx, &pb.ReportGroupsRequest{NodeId: "m2", Groups: []*pb.GroupReport{r}}); err != nil {
			t.Fatalf("report %v: %v", r, err)
		}
	}
	degraded := func() bool {
		e, err := leader.Client.GetEntity(ctx, &pb.GetEntityRequest{Name: "a"})
		if err != nil {
			t.Fatalf("get a: %v", err)
		}
		return e.Degraded
	}
	report(&pb.GroupReport{GroupId: ga, LeaderId: "m1", HasQuorum: true})
	placementtest.Eventually(t, 5*time.Second, "a active", func() bool { return !degraded() })

	// Heard serving a moment ago, after the replica lost its leader a
	// second ago: a replica cut off from a serving leader.
	report(&pb.GroupReport{GroupId: ga, LeaderlessMs: 1000})
	if degraded() {
		t.Fatal("a degraded by a leaderless report although its group was heard serving since")
	}

	// Not heard serving since the replica lost its leader.
	time.Sleep(100 * time.Millisecond)
	report(&pb.GroupReport{GroupId: ga, LeaderlessMs: 50})
	placementtest.Eventually(t, 5*time.Second, "a degraded by the leaderless report", degraded)

	report(&pb.GroupReport{GroupId: ga, LeaderId: "m1", HasQuorum: true})
	placementtest.Eventually(t, 5*time.Second, "a active again", func() bool { return !degraded() })
}
