package cluster

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/quorumbus/quorumbus/cmd/quorumbus/adminhttp"
	"github.com/quorumbus/quorumbus/frontend"
	"github.com/quorumbus/quorumbus/frontend/routing"
	"github.com/quorumbus/quorumbus/node"
	"github.com/quorumbus/quorumbus/placement/membership"
)

func testLogger() *slog.Logger {
	if os.Getenv("QUORUMBUS_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// eventually polls cond until it holds, failing the test after a generous
// deadline; no test asserts how long anything takes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// readiness runs checks as /readyz does.
func readiness(checks ...adminhttp.Check) (string, bool) {
	s := adminhttp.New(adminhttp.Config{Logger: testLogger()})
	s.AddChecks(checks...)
	lines, ok := s.Ready()
	return strings.Join(lines, "\n"), ok
}

// TestDeadListenerIsUnready: a front-end whose AMQP listener died is
// unready and says so, and Dead tells the process to exit; a listener shut
// down on purpose is unready too but not dead.
func TestDeadListenerIsUnready(t *testing.T) {
	r, err := routing.New(routing.Config{Placement: []string{"127.0.0.1:1"}, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	srv, err := frontend.New(frontend.Config{Backend: r, Rules: r, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := ServeAMQP(srv, ln, testLogger())
	if err := l.Check(); err != nil {
		t.Fatalf("a serving listener: %v", err)
	}
	ln.Close() // the accept loop fails for good, as on a dead socket
	select {
	case <-l.Dead():
	case <-time.After(time.Minute):
		t.Fatal("the listener's death was not noticed")
	}
	body, ok := readiness(FrontendChecks(r, l)...)
	if ok || !strings.Contains(body, "FAIL amqp listener: ") {
		t.Fatalf("readiness with a dead listener:\n%s", body)
	}

	ln2, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv2, _ := frontend.New(frontend.Config{Backend: r, Rules: r, Logger: testLogger()})
	l2 := ServeAMQP(srv2, ln2, testLogger())
	if err := srv2.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the shut-down listener to be unready", func() bool { return l2.Check() != nil })
	select {
	case <-l2.Dead():
		t.Fatal("a listener shut down on purpose counts as dead")
	default:
	}
}

type fakeGroups map[uint64]node.GroupStatus

func (f fakeGroups) Group(id uint64) (node.GroupStatus, error) {
	st, ok := f[id]
	if !ok {
		return node.GroupStatus{}, node.ErrGroupNotFound
	}
	return st, nil
}

type fakeFailures map[uint64]error

func (f fakeFailures) OpenFailures() map[uint64]error { return f }

// TestCheckGroups: a storage node is ready only when every group the
// routing table places on it is open, running, and led.
func TestCheckGroups(t *testing.T) {
	led := node.GroupStatus{State: raft.Follower, Leader: node.Peer{ID: "n2"}}
	for _, tc := range []struct {
		name   string
		groups fakeGroups
		failed fakeFailures
		want   string // in the error; "" for ready
	}{
		{"all led", fakeGroups{1: led, 2: {State: raft.Leader, Leader: node.Peer{ID: "n1"}, Serving: true}}, nil, ""},
		{"failed to open", fakeGroups{1: led}, fakeFailures{2: errors.New("log store: no space left on device")}, "group 2 failed to open: log store: no space left on device"},
		{"not open", fakeGroups{1: led}, nil, "group 2 is not open"},
		{"stopped", fakeGroups{1: led, 2: {Leader: node.Peer{ID: "n2"}, Err: errors.New("disk")}}, nil, "group 2 stopped: disk"},
		{"no quorum", fakeGroups{1: led, 2: {State: raft.Candidate}}, nil, "group 2 has no leader"},
		{"leader not serving", fakeGroups{1: led, 2: {State: raft.Leader, Leader: node.Peer{ID: "n1"}}}, nil, "group 2: this node leads it but does not serve yet"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkGroups([]uint64{1, 2}, tc.groups, tc.failed)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("ready groups: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("got %v, want %q", err, tc.want)
			case tc.want != "" && strings.Contains(err.Error(), "group 1"):
				t.Fatalf("group 1 is fine, yet: %v", err)
			}
		})
	}
}

// storageCluster is three storage processes in this process, each
// restartable on its data directory and address.
type storageCluster struct {
	t     *testing.T
	dir   string
	addrs []string
	ids   []string
	nodes []*Storage
}

// startStorageCluster starts three storage processes; prepare, if given,
// runs on the data directory first.
func startStorageCluster(t *testing.T, prepare func(dir string)) *storageCluster {
	t.Helper()
	c := &storageCluster{t: t, dir: t.TempDir()}
	if prepare != nil {
		prepare(c.dir)
	}
	lns := make([]net.Listener, 3)
	for i := range 3 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns[i] = ln
		c.ids = append(c.ids, "n"+string(rune('1'+i)))
		c.addrs = append(c.addrs, ln.Addr().String())
	}
	c.nodes = make([]*Storage, 3)
	for i := range 3 {
		c.start(i, lns[i])
	}
	t.Cleanup(func() {
		for _, s := range c.nodes {
			if s != nil {
				s.Close()
			}
		}
	})
	return c
}

func (c *storageCluster) start(i int, ln net.Listener) {
	c.t.Helper()
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", c.addrs[i]); err != nil {
			c.t.Fatal(err)
		}
	}
	var members []membership.Member
	for j := range c.ids {
		members = append(members, membership.Member{NodeID: c.ids[j], Role: membership.RoleStorage, GRPCAddr: c.addrs[j]})
	}
	s, err := StartStorage(context.Background(), StorageOptions{
		ID: c.ids[i], DataDir: filepath.Join(c.dir, c.ids[i]), Listener: ln,
		Bootstrap: Servers(c.ids, c.addrs), Members: StaticMembers(members),
		Groups: 2, Replicas: 3, CacheMB: 8, Logger: testLogger().With("node", c.ids[i]),
	})
	if err != nil {
		c.t.Fatal(err)
	}
	c.nodes[i] = s
}

func (c *storageCluster) stop(i int) {
	if err := c.nodes[i].Close(); err != nil {
		c.t.Logf("closing %s: %v", c.ids[i], err)
	}
	c.nodes[i] = nil
}

// TestStorageReadinessFollowsQuorum: storage processes become ready once
// their groups are open and led; the one left when the two others stop
// turns unready, saying its groups have no leader; it is ready again once
// they are back.
func TestStorageReadinessFollowsQuorum(t *testing.T) {
	c := startStorageCluster(t, nil)
	ready := func(i int) (string, bool) { return readiness(c.nodes[i].ReadyChecks()...) }
	groupsPlaced := func(i int) bool {
		mine, err := c.nodes[i].agent.Placed()
		return err == nil && len(mine) == 2
	}
	for i := range 3 {
		eventually(t, c.ids[i]+" ready with its groups", func() bool {
			_, ok := ready(i)
			return ok && groupsPlaced(i)
		})
	}

	c.stop(1)
	c.stop(2)
	var body string
	eventually(t, "n1 unready without a quorum", func() bool {
		var ok bool
		body, ok = ready(0)
		return !ok && strings.Contains(body, "has no leader")
	})
	t.Logf("n1 without a quorum:\n%s", body)

	c.start(1, nil)
	c.start(2, nil)
	for i := range 3 {
		eventually(t, c.ids[i]+" ready again", func() bool {
			_, ok := ready(i)
			return ok
		})
	}
}

// TestGroupThatFailsToOpenIsUnready: a node on which a group cannot open
// (here a file stands where its directory goes) is unready and names the
// group; its peers, which hold a quorum of it, are ready.
func TestGroupThatFailsToOpenIsUnready(t *testing.T) {
	c := startStorageCluster(t, func(dir string) {
		groups := filepath.Join(dir, "n3", "node", "groups")
		if err := os.MkdirAll(groups, 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(groups, "1"), []byte("not a directory"), 0o640); err != nil {
			t.Fatal(err)
		}
	})
	var body string
	eventually(t, "n3 unready, naming group 1", func() bool {
		var ok bool
		body, ok = readiness(c.nodes[2].ReadyChecks()...)
		return !ok && strings.Contains(body, "FAIL node n3 groups: group 1 failed to open: ")
	})
	t.Logf("n3:\n%s", body)
	for i := range 2 {
		eventually(t, c.ids[i]+" ready", func() bool {
			_, ok := readiness(c.nodes[i].ReadyChecks()...)
			return ok
		})
	}
}
