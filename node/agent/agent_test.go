package agent_test

import (
	"context"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quorumbus/quorumbus/node"
	"github.com/quorumbus/quorumbus/node/agent"
	"github.com/quorumbus/quorumbus/node/nodetest"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// fakePlacement is a placement member as the agent sees it: it streams
// the routing tables a test hands it and records the group reports.
type fakePlacement struct {
	placementpb.UnimplementedPlacementServiceServer
	tables chan *placementpb.RoutingTable
	refuse bool // answer WatchRoutes with Unavailable (a member that cannot serve)

	mu       sync.Mutex
	reports  []*placementpb.ReportGroupsRequest
	requests []*placementpb.WatchRoutesRequest
}

func newFakePlacement() *fakePlacement {
	return &fakePlacement{tables: make(chan *placementpb.RoutingTable, 8)}
}

func (f *fakePlacement) WatchRoutes(req *placementpb.WatchRoutesRequest, stream grpc.ServerStreamingServer[placementpb.RoutingTable]) error {
	f.mu.Lock()
	f.requests = append(f.requests, req)
	f.mu.Unlock()
	if f.refuse {
		return status.Error(codes.Unavailable, "not caught up with the catalog")
	}
	for {
		select {
		case t := <-f.tables:
			if err := stream.Send(t); err != nil {
				return err
			}
		case <-stream.Context().Done():
			return stream.Context().Err()
		}
	}
}

func (f *fakePlacement) ReportGroups(_ context.Context, req *placementpb.ReportGroupsRequest) (*placementpb.ReportGroupsResponse, error) {
	f.mu.Lock()
	f.reports = append(f.reports, req)
	f.mu.Unlock()
	return &placementpb.ReportGroupsResponse{}, nil
}

// reported reports whether the latest report names group as led and
// serving by the node.
func (f *fakePlacement) reported(nodeID string, group uint64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.reports) == 0 {
		return false
	}
	last := f.reports[len(f.reports)-1]
	for _, g := range last.Groups {
		if last.NodeId == nodeID && g.GroupId == group && g.LeaderId == nodeID && g.HasQuorum {
			return true
		}
	}
	return false
}

// startNode starts a real storage node whose gRPC port serves own as its
// placement member, as a storage process's does.
func startNode(t *testing.T, own *fakePlacement) *node.Node {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n, err := node.New(node.Config{ID: "n1", DataDir: t.TempDir(), Listener: ln, CacheBytes: 8 << 20, Logger: nodetest.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	if err := n.Register(func(s *grpc.Server) { placementpb.RegisterPlacementServiceServer(s, own) }); err != nil {
		t.Fatal(err)
	}
	if err := n.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	return n
}

func startAgent(t *testing.T, cfg agent.Config) *agent.Agent {
	t.Helper()
	cfg.ReportInterval = 50 * time.Millisecond
	cfg.Logger = nodetest.Logger(t)
	a, err := agent.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	a.Start(context.Background())
	t.Cleanup(func() { a.Close() })
	return a
}

func table(version uint64, self *node.Node, groups ...*placementpb.Group) *placementpb.RoutingTable {
	return &placementpb.RoutingTable{
		Version: version,
		Groups:  groups,
		Nodes: []*placementpb.Node{
			{Id: self.ID(), GrpcAddr: self.Addr()},
			{Id: "n9", GrpcAddr: "127.0.0.1:1"},
		},
	}
}

func group(id uint64, replicas ...string) *placementpb.Group {
	g := &placementpb.Group{Id: id}
	for _, r := range replicas {
		g.Replicas = append(g.Replicas, &placementpb.Replica{NodeId: r})
	}
	return g
}

// TestAgentFollowsTheTable: the agent opens the groups the routing table
// places on its node, reports the ones the node leads as serving, and
// removes a group the table moved to another node, while it leaves alone a
// group the table does not list at all.
func TestAgentFollowsTheTable(t *testing.T) {
	own := newFakePlacement()
	n := startNode(t, own)
	a := startAgent(t, agent.Config{Node: n})

	if _, err := a.Placed(); err == nil || a.HasTable() {
		t.Fatalf("before any table: placed err %v, has table %v", err, a.HasTable())
	}
	own.tables <- table(1, n)
	nodetest.WaitFor(t, "the first table", a.HasTable)
	if _, err := a.Placed(); err == nil {
		t.Fatal("a table with no groups yet: Placed says nothing is missing")
	}

	own.tables <- table(2, n, group(1, "n1"), group(2, "n1"), group(3, "n9"))
	nodetest.WaitFor(t, "groups 1 and 2 placed and led here, reported serving", func() bool {
		mine, err := a.Placed()
		return err == nil && slices.Equal(mine, []uint64{1, 2}) && own.reported("n1", 1) && own.reported("n1", 2)
	})
	if got := n.Groups(); slices.Contains(got, 3) {
		t.Fatalf("the node opened group 3, which the table places elsewhere: %v", got)
	}
	if a.FromOther() {
		t.Fatal("the table came from the node's own member, yet FromOther")
	}

	// Group 1 moved to n9; group 2 is not in the table at all.
	own.tables <- table(3, n, group(1, "n9"))
	nodetest.WaitFor(t, "group 1 removed, nothing placed here", func() bool {
		mine, err := a.Placed()
		return err == nil && len(mine) == 0 && !slices.Contains(n.Groups(), 1)
	})
	if !slices.Contains(n.Groups(), 2) {
		t.Fatalf("group 2, which the table no longer lists, was removed: %v", n.Groups())
	}
}

// TestAgentAsksAnotherMember: while the node's own placement member cannot
// serve the table, the agent follows another storage member's, says so
// (FromOther, which readiness reads), and reports there.
func TestAgentAsksAnotherMember(t *testing.T) {
	own := newFakePlacement()
	own.refuse = true
	n := startNode(t, own)

	other := newFakePlacement()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	placementpb.RegisterPlacementServiceServer(srv, other)
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)

	a := startAgent(t, agent.Config{Node: n, Others: func() []string {
		// The member list holds this node too, and members without an
		// address yet.
		return []string{n.Addr(), "", ln.Addr().String()}
	}})
	other.tables <- table(1, n, group(4, "n1"))
	nodetest.WaitFor(t, "group 4 open from the other member's table", func() bool {
		mine, err := a.Placed()
		return err == nil && slices.Equal(mine, []uint64{4}) && a.FromOther()
	})
	// Reports go to the node's own member, which takes them even while it
	// cannot serve the table.
	nodetest.WaitFor(t, "group 4 reported", func() bool { return own.reported("n1", 4) })

	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if a.FromOther() {
		t.Fatal("a closed agent still says another member serves its table")
	}
}

// change is a change of the routing table from version from: it lists
// every group and node, as every change does, and no entity.
func change(from, version uint64, self *node.Node, groups ...*placementpb.Group) *placementpb.RoutingTable {
	t := table(version, self, groups...)
	t.ChangesFrom = from
	return t
}

// TestAgentTakesChanges: the agent asks for changes rather than whole
// tables, and takes the groups and nodes of each change as the latest,
// even of one that does not follow the version it saw last: a change
// lists every group and node, all the agent reads.
func TestAgentTakesChanges(t *testing.T) {
	own := newFakePlacement()
	n := startNode(t, own)
	a := startAgent(t, agent.Config{Node: n})

	own.tables <- table(1, n, group(1, "n1"))
	nodetest.WaitFor(t, "group 1 placed here", func() bool {
		mine, err := a.Placed()
		return err == nil && slices.Equal(mine, []uint64{1})
	})
	own.mu.Lock()
	req := own.requests[0]
	own.mu.Unlock()
	if !req.Changes || req.AfterVersion != 0 {
		t.Fatalf("the agent asked for %v; want changes after a whole table", req)
	}

	own.tables <- change(1, 2, n, group(1, "n1"), group(2, "n1"))
	nodetest.WaitFor(t, "group 2 placed here too", func() bool {
		mine, err := a.Placed()
		return err == nil && slices.Equal(mine, []uint64{1, 2})
	})
	// Versions 3 to 5 never came: group 1 moved to n9 meanwhile.
	own.tables <- change(5, 6, n, group(1, "n9"), group(2, "n1"))
	nodetest.WaitFor(t, "group 1 removed", func() bool {
		mine, err := a.Placed()
		return err == nil && slices.Equal(mine, []uint64{2}) && !slices.Contains(n.Groups(), 1)
	})
}

// TestAgentReportsLeaderlessGroups: a replica of a group that has no
// leader (here a group of two voters whose other voter never answers) is
// reported without one once it has known none for LeaderlessAfter, and
// never sooner, so that placement can mark the group without quorum
// without waiting for its silence; a group the node leads is reported as
// before.
func TestAgentReportsLeaderlessGroups(t *testing.T) {
	const after = 300 * time.Millisecond
	own := newFakePlacement()
	n := startNode(t, own)
	startAgent(t, agent.Config{Node: n, LeaderlessAfter: after})
	own.tables <- table(1, n, group(1, "n1"), group(2, "n1", "n9"))

	leaderless := func() *placementpb.GroupReport {
		own.mu.Lock()
		defer own.mu.Unlock()
		for _, req := range own.reports {
			for _, g := range req.Groups {
				if g.GroupId == 2 {
					return g
				}
			}
		}
		return nil
	}
	nodetest.WaitFor(t, "group 1 reported serving and group 2 without a leader", func() bool {
		return own.reported("n1", 1) && leaderless() != nil
	})
	g := leaderless()
	if g.LeaderId != "" || g.HasQuorum || time.Duration(g.LeaderlessMs)*time.Millisecond < after {
		t.Fatalf("group 2's first report %v: want no leader, no quorum, leaderless for %v at least", g, after)
	}
}

// TestAgentSkipsOlderTables: a table older than one applied, as a
// placement member behind the catalog serves after the stream moved to
// it, neither removes a group moved onto the node since nor opens one
// moved off; a table of a catalog born anew counts from its own start.
func TestAgentSkipsOlderTables(t *testing.T) {
	own := newFakePlacement()
	n := startNode(t, own)
	a := startAgent(t, agent.Config{Node: n})

	own.tables <- table(5, n, group(1, "n1"))
	nodetest.WaitFor(t, "group 1 placed here", func() bool {
		mine, err := a.Placed()
		return err == nil && slices.Equal(mine, []uint64{1})
	})
	// Version 4, before group 1 moved here, then 6: the agent applies
	// tables in order, so once 6 is in, 4 was seen and skipped.
	own.tables <- table(4, n, group(1, "n9"), group(2, "n1"))
	own.tables <- table(6, n, group(1, "n1"), group(3, "n1"))
	nodetest.WaitFor(t, "the table of version 6", func() bool {
		mine, err := a.Placed()
		return err == nil && slices.Equal(mine, []uint64{1, 3})
	})
	if got := n.Groups(); !slices.Contains(got, 1) || slices.Contains(got, 2) {
		t.Fatalf("groups after an older table: %v, want 1 kept and 2 never opened", got)
	}

	// A catalog started over numbers its versions from the start again.
	reborn := table(2, n, group(1, "n1"), group(4, "n1"))
	reborn.CatalogBornMs = 99
	own.tables <- reborn
	nodetest.WaitFor(t, "the reborn catalog's table", func() bool {
		mine, err := a.Placed()
		return err == nil && slices.Equal(mine, []uint64{1, 4})
	})
}
