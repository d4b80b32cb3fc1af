// Package nodetest starts real storage nodes on 127.0.0.1 for tests: a
// cluster of n nodes replicating the same groups, with helpers to find a
// group's leader, kill and restart nodes, and a PartitionService client
// that follows leader hints.
package nodetest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/quorumbus/quorumbus/node"
	"github.com/quorumbus/quorumbus/proto/groupcall"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// Timeout bounds every wait of the helpers.
const Timeout = 30 * time.Second

// Options configure a test cluster.
type Options struct {
	Nodes  int      // default 3
	Groups []uint64 // each replicated on every node
	// Configure adjusts each node's configuration before it starts (on
	// restarts too).
	Configure func(i int, cfg *node.Config)
	// Cuttable routes the nodes' connections to each other through the
	// cluster's Net, so that a test can partition them (Cluster.Cut).
	Cuttable bool
	// InMemory carries every connection in memory instead of over
	// loopback TCP, so that the cluster can run inside a
	// testing/synctest bubble: its timers (elections, the leader's
	// clock, lock expiry) then run on virtual time. Not with Cuttable.
	InMemory bool
}

// Cluster is a set of nodes that replicate the same groups.
type Cluster struct {
	t      testing.TB
	opts   Options
	log    *slog.Logger
	ids    []string
	addrs  []string
	dirs   []string
	peers  []node.Peer
	groups []uint64
	net    *Net    // nil unless Options.Cuttable
	mem    *memNet // nil unless Options.InMemory

	mu    sync.Mutex
	nodes []*node.Node // nil while killed
	conns map[string]*grpc.ClientConn
}

// StartCluster starts n nodes on 127.0.0.1:0 in t.TempDir(), each
// replicating every group, and waits until every group has a leader. The
// cluster is closed when the test ends.
func StartCluster(t testing.TB, n int, groups ...uint64) *Cluster {
	t.Helper()
	return Start(t, Options{Nodes: n, Groups: groups})
}

// Start is StartCluster with options.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	if opts.Nodes == 0 {
		opts.Nodes = 3
	}
	c := &Cluster{
		t:      t,
		opts:   opts,
		log:    Logger(t),
		groups: opts.Groups,
		nodes:  make([]*node.Node, opts.Nodes),
		conns:  map[string]*grpc.ClientConn{},
	}
	if opts.Cuttable && opts.InMemory {
		t.Fatal("nodetest: Cuttable and InMemory together")
	}
	if opts.Cuttable {
		c.net = newNet()
	}
	if opts.InMemory {
		c.mem = newMemNet()
	}
	base := t.TempDir()
	lis := make([]net.Listener, opts.Nodes)
	for i := range opts.Nodes {
		var addr string
		if c.mem != nil {
			lis[i], addr = c.mem.listen(i)
		} else {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatalf("nodetest: %v", err)
			}
			lis[i], addr = l, l.Addr().String()
		}
		c.ids = append(c.ids, fmt.Sprintf("n%d", i))
		c.addrs = append(c.addrs, addr)
		c.dirs = append(c.dirs, filepath.Join(base, c.ids[i]))
		c.peers = append(c.peers, node.Peer{ID: c.ids[i], Addr: c.addrs[i]})
	}
	t.Cleanup(c.close)
	for i := range opts.Nodes {
		c.start(i, lis[i])
	}
	for _, g := range c.groups {
		c.Leader(g)
	}
	return c
}

func (c *Cluster) start(i int, lis net.Listener) {
	c.t.Helper()
	cfg := node.Config{
		ID:       c.ids[i],
		DataDir:  c.dirs[i],
		Listener: lis,
		Logger:   c.log.With("node", c.ids[i]),
		// Small caches: tests run many stores at once.
		CacheBytes: 8 << 20,
	}
	if c.net != nil {
		cfg.PeerDialOptions = append(cfg.PeerDialOptions, grpc.WithContextDialer(c.net.dialer(c.addrs[i])))
	}
	if c.mem != nil {
		cfg.PeerDialOptions = append(cfg.PeerDialOptions, grpc.WithContextDialer(c.mem.dial))
	}
	if c.opts.Configure != nil {
		c.opts.Configure(i, &cfg)
	}
	n, err := node.New(cfg)
	if err != nil {
		lis.Close()
		c.t.Fatalf("nodetest: node %d: %v", i, err)
	}
	if err := n.Start(context.Background()); err != nil {
		n.Close()
		c.t.Fatalf("nodetest: node %d: %v", i, err)
	}
	for _, g := range c.groups {
		if err := n.EnsureGroup(g, c.peers); err != nil {
			n.Close()
			c.t.Fatalf("nodetest: node %d: group %d: %v", i, g, err)
		}
	}
	c.mu.Lock()
	c.nodes[i] = n
	c.mu.Unlock()
}

func (c *Cluster) close() {
	c.mu.Lock()
	nodes := c.nodes
	c.nodes = make([]*node.Node, len(nodes))
	conns := c.conns
	c.conns = map[string]*grpc.ClientConn{}
	c.mu.Unlock()
	var wg sync.WaitGroup
	for i, n := range nodes {
		if n == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := n.Close(); err != nil {
				c.t.Errorf("nodetest: closing node %d: %v", i, err)
			}
		}()
	}
	wg.Wait()
	for _, cc := range conns {
		cc.Close()
	}
}

// Len returns the number of nodes, running or not.
func (c *Cluster) Len() int { return len(c.ids) }

// Node returns node i, or nil while it is killed.
func (c *Cluster) Node(i int) *node.Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[i]
}

// Addr returns the gRPC address of node i (the same across restarts).
func (c *Cluster) Addr(i int) string { return c.addrs[i] }

// Peers returns the replicas of every group.
func (c *Cluster) Peers() []node.Peer { return c.peers }

// Dir returns node i's data directory.
func (c *Cluster) Dir(i int) string { return c.dirs[i] }

// Leader waits until a running node leads groupID and serves it, and
// returns its index.
func (c *Cluster) Leader(groupID uint64) int {
	c.t.Helper()
	return c.leader(groupID, false)
}

// Cut cuts node i off from the other nodes (Net); it keeps running and
// its clients still reach it. The cluster must be Options.Cuttable.
func (c *Cluster) Cut(i int) {
	c.t.Helper()
	if c.net == nil {
		c.t.Fatal("nodetest: Cut on a cluster started without Options.Cuttable")
	}
	c.net.Cut(c.addrs[i])
}

// Deafen holds every connection another node opens to node i, while its
// own connections to them work (Net.Deafen). The cluster must be
// Options.Cuttable.
func (c *Cluster) Deafen(i int) {
	c.t.Helper()
	if c.net == nil {
		c.t.Fatal("nodetest: Deafen on a cluster started without Options.Cuttable")
	}
	c.net.Deafen(c.addrs[i])
}

// Heal ends every cut and deafness.
func (c *Cluster) Heal() {
	if c.net != nil {
		c.net.Heal()
	}
}

// LeaderBeyondCuts is Leader among the nodes that are not cut off: the
// leader the rest of the cluster elected while the old one, cut off, may
// still believe it leads until its lease runs out.
func (c *Cluster) LeaderBeyondCuts(groupID uint64) int {
	c.t.Helper()
	return c.leader(groupID, true)
}

func (c *Cluster) leader(groupID uint64, beyondCuts bool) int {
	c.t.Helper()
	what := fmt.Sprintf("a serving leader of group %d", groupID)
	if beyondCuts {
		what += " beyond the cuts"
	}
	leader := -1
	c.WaitFor(what, func() bool {
		for i := range c.ids {
			n := c.Node(i)
			if n == nil || (beyondCuts && c.net != nil && c.net.IsCut(c.addrs[i])) {
				continue
			}
			if st, err := n.Group(groupID); err == nil && st.Serving {
				leader = i
				return true
			}
		}
		return false
	})
	return leader
}

// WaitFor polls cond until it holds, failing the test after Timeout.
func (c *Cluster) WaitFor(what string, cond func() bool) {
	c.t.Helper()
	WaitFor(c.t, what, cond)
}

// WaitFor polls cond every few milliseconds until it holds, failing the
// test after Timeout.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(Timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("nodetest: timed out after %v waiting for %s", Timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Kill closes node i without handing its groups over: to the other
// replicas it is a crash. (Its own stores are closed cleanly; a torn write
// on disk is not simulated.)
func (c *Cluster) Kill(i int) {
	c.t.Helper()
	c.KillWith(i, (*node.Node).Close)
}

// KillWith is Kill, stopping the node with stop.
func (c *Cluster) KillWith(i int, stop func(*node.Node) error) {
	c.t.Helper()
	c.mu.Lock()
	n := c.nodes[i]
	c.nodes[i] = nil
	c.mu.Unlock()
	if n == nil {
		c.t.Fatalf("nodetest: node %d is not running", i)
	}
	if err := stop(n); err != nil {
		c.t.Errorf("nodetest: killing node %d: %v", i, err)
	}
}

// Restart starts node i again on the same directory and address.
func (c *Cluster) Restart(i int) {
	c.t.Helper()
	if c.Node(i) != nil {
		c.t.Fatalf("nodetest: node %d is running", i)
	}
	if c.mem != nil {
		c.start(i, c.mem.relisten(c.addrs[i]))
		return
	}
	var lis net.Listener
	c.WaitFor(fmt.Sprintf("listening again on %s", c.addrs[i]), func() bool {
		var err error
		lis, err = net.Listen("tcp", c.addrs[i])
		return err == nil
	})
	c.start(i, lis)
}

// conn returns the cluster's shared connection to addr.
func (c *Cluster) conn(addr string) (*grpc.ClientConn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cc, ok := c.conns[addr]; ok {
		return cc, nil
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if c.mem != nil {
		opts = append(opts, grpc.WithContextDialer(c.mem.dial))
	}
	cc, err := grpc.NewClient(addr, append(opts,
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 20 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 500 * time.Millisecond},
			MinConnectTimeout: time.Second,
		}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)),
	)...)
	if err != nil {
		return nil, err
	}
	c.conns[addr] = cc
	return cc, nil
}

// Client returns a PartitionService client for groupID that sends each
// call to the node it believes leads the group and, until the call's
// context ends, retries elsewhere when told to (proto/groupcall): on a
// leader hint it goes to the leader; on Unavailable, or NotFound for the
// group, it tries the next node after a short backoff. A retried Send
// whose first attempt failed with an unknown outcome
// (raft.ErrLeadershipLost, a broken connection) may therefore be applied
// twice, like any at-least-once send.
func (c *Cluster) Client(groupID uint64) partitionpb.PartitionServiceClient {
	cl := &Client{group: groupID}
	replicas := &placementpb.Group{Id: groupID}
	for _, id := range c.ids {
		replicas.Replicas = append(replicas.Replicas, &placementpb.Replica{NodeId: id})
	}
	cl.calls = groupcall.New(groupcall.Config[partitionpb.PartitionServiceClient]{
		Group: func(uint64) *placementpb.Group { return replicas },
		Addr: func(id string) string {
			if i := slices.Index(c.ids, id); i >= 0 {
				return c.addrs[i]
			}
			return ""
		},
		Dial: func(_, addr string) (partitionpb.PartitionServiceClient, error) {
			cc, err := c.conn(addr)
			if err != nil {
				return nil, err
			}
			return partitionpb.NewPartitionServiceClient(cc), nil
		},
		// Tests wait on nodes that restart within a second: ask often.
		Backoff:    5 * time.Millisecond,
		MaxBackoff: 200 * time.Millisecond,
		OnRetry:    func(uint64, error) { cl.Retries.Add(1) },
	})
	return cl
}

// DirectClient returns a PartitionService client that sends every call to
// node i and nowhere else, and does not retry.
func (c *Cluster) DirectClient(i int) partitionpb.PartitionServiceClient {
	c.t.Helper()
	cc, err := c.conn(c.addrs[i])
	if err != nil {
		c.t.Fatalf("nodetest: %v", err)
	}
	return partitionpb.NewPartitionServiceClient(cc)
}

// Client is the leader-following client Cluster.Client returns.
type Client struct {
	group uint64
	calls *groupcall.Caller[partitionpb.PartitionServiceClient]
	// Retries counts attempts after the first, over all calls.
	Retries atomic.Int64
}

var _ partitionpb.PartitionServiceClient = (*Client)(nil)

// do runs call against the believed leader until it succeeds, fails for
// good, or ctx ends; then it returns the last attempt's error as it came.
// A NotFound without a partitionpb.Result is the node's (it does not host
// the group yet) and is retried; with one it is the entity's, and final.
func do[T any](ctx context.Context, cl *Client, call func(partitionpb.PartitionServiceClient) (T, error)) (T, error) {
	var out T
	err := cl.calls.Call(ctx, cl.group, groupcall.CallOptions{
		RetryNotFound: func(st *status.Status) bool { return !groupcall.HasResult(st) },
	}, func(_ context.Context, c partitionpb.PartitionServiceClient) error {
		var err error
		out, err = call(c)
		return err
	})
	var gaveUp *groupcall.GaveUp
	if errors.As(err, &gaveUp) {
		err = gaveUp.Last
	}
	return out, err
}

func (cl *Client) UpsertEntity(ctx context.Context, in *partitionpb.UpsertEntityRequest, opts ...grpc.CallOption) (*partitionpb.UpsertEntityResponse, error) {
	in.GroupId = cl.group
	return do(ctx, cl, func(c partitionpb.PartitionServiceClient) (*partitionpb.UpsertEntityResponse, error) {
		return c.UpsertEntity(ctx, in, opts...)
	})
}

func (cl *Client) DeleteEntity(ctx context.Context, in *partitionpb.DeleteEntityRequest, opts ...grpc.CallOption) (*partitionpb.DeleteEntityResponse, error) {
	in.GroupId = cl.group
	return do(ctx, cl, func(c partitionpb.PartitionServiceClient) (*partitionpb.DeleteEntityResponse, error) {
		return c.DeleteEntity(ctx, in, opts...)
	})
}

func (cl *Client) Send(ctx context.Context, in *partitionpb.SendRequest, opts ...grpc.CallOption) (*partitionpb.SendResponse, error) {
	in.GroupId = cl.group
	return do(ctx, cl, func(c partitionpb.PartitionServiceClient) (*partitionpb.SendResponse, error) {
		return c.Send(ctx, in, opts...)
	})
}

func (cl *Client) Receive(ctx context.Context, in *partitionpb.ReceiveRequest, opts ...grpc.CallOption) (*partitionpb.ReceiveResponse, error) {
	in.GroupId = cl.group
	return do(ctx, cl, func(c partitionpb.PartitionServiceClient) (*partitionpb.ReceiveResponse, error) {
		return c.Receive(ctx, in, opts...)
	})
}

func (cl *Client) Settle(ctx context.Context, in *partitionpb.SettleRequest, opts ...grpc.CallOption) (*partitionpb.SettleResponse, error) {
	in.GroupId = cl.group
	return do(ctx, cl, func(c partitionpb.PartitionServiceClient) (*partitionpb.SettleResponse, error) {
		return c.Settle(ctx, in, opts...)
	})
}

func (cl *Client) RenewLocks(ctx context.Context, in *partitionpb.RenewLocksRequest, opts ...grpc.CallOption) (*partitionpb.RenewLocksResponse, error) {
	in.GroupId = cl.group
	return do(ctx, cl, func(c partitionpb.PartitionServiceClient) (*partitionpb.RenewLocksResponse, error) {
		return c.RenewLocks(ctx, in, opts...)
	})
}

func (cl *Client) Stats(ctx context.Context, in *partitionpb.StatsRequest, opts ...grpc.CallOption) (*partitionpb.StatsResponse, error) {
	in.GroupId = cl.group
	return do(ctx, cl, func(c partitionpb.PartitionServiceClient) (*partitionpb.StatsResponse, error) {
		return c.Stats(ctx, in, opts...)
	})
}

func (cl *Client) GroupStats(ctx context.Context, in *partitionpb.GroupStatsRequest, opts ...grpc.CallOption) (*partitionpb.GroupStatsResponse, error) {
	in.GroupId = cl.group
	return do(ctx, cl, func(c partitionpb.PartitionServiceClient) (*partitionpb.GroupStatsResponse, error) {
		return c.GroupStats(ctx, in, opts...)
	})
}

func (cl *Client) Peek(ctx context.Context, in *partitionpb.PeekRequest, opts ...grpc.CallOption) (*partitionpb.PeekResponse, error) {
	in.GroupId = cl.group
	return do(ctx, cl, func(c partitionpb.PartitionServiceClient) (*partitionpb.PeekResponse, error) {
		return c.Peek(ctx, in, opts...)
	})
}

func (cl *Client) CancelScheduled(ctx context.Context, in *partitionpb.CancelScheduledRequest, opts ...grpc.CallOption) (*partitionpb.CancelScheduledResponse, error) {
	in.GroupId = cl.group
	return do(ctx, cl, func(c partitionpb.PartitionServiceClient) (*partitionpb.CancelScheduledResponse, error) {
		return c.CancelScheduled(ctx, in, opts...)
	})
}

func (cl *Client) ReceiveDeferred(ctx context.Context, in *partitionpb.ReceiveDeferredRequest, opts ...grpc.CallOption) (*partitionpb.ReceiveDeferredResponse, error) {
	in.GroupId = cl.group
	return do(ctx, cl, func(c partitionpb.PartitionServiceClient) (*partitionpb.ReceiveDeferredResponse, error) {
		return c.ReceiveDeferred(ctx, in, opts...)
	})
}

func (cl *Client) AcceptSession(ctx context.Context, in *partitionpb.AcceptSessionRequest, opts ...grpc.CallOption) (*partitionpb.AcceptSessionResponse, error) {
	in.GroupId = cl.group
	return do(ctx, cl, func(c partitionpb.PartitionServiceClient) (*partitionpb.AcceptSessionResponse, error) {
		return c.AcceptSession(ctx, in, opts...)
	})
}

func (cl *Client) RenewSessionLock(ctx context.Context, in *partitionpb.RenewSessionLockRequest, opts ...grpc.CallOption) (*partitionpb.RenewSessionLockResponse, error) {
	in.GroupId = cl.group
	return do(ctx, cl, func(c partitionpb.PartitionServiceClient) (*partitionpb.RenewSessionLockResponse, error) {
		return c.RenewSessionLock(ctx, in, opts...)
	})
}

func (cl *Client) SetSessionState(ctx context.Context, in *partitionpb.SetSessionStateRequest, opts ...grpc.CallOption) (*partitionpb.SetSessionStateResponse, error) {
	in.GroupId = cl.group
	return do(ctx, cl, func(c partitionpb.PartitionServiceClient) (*partitionpb.SetSessionStateResponse, error) {
		return c.SetSessionState(ctx, in, opts...)
	})
}

func (cl *Client) GetSessionState(ctx context.Context, in *partitionpb.GetSessionStateRequest, opts ...grpc.CallOption) (*partitionpb.GetSessionStateResponse, error) {
	in.GroupId = cl.group
	return do(ctx, cl, func(c partitionpb.PartitionServiceClient) (*partitionpb.GetSessionStateResponse, error) {
		return c.GetSessionState(ctx, in, opts...)
	})
}

func (cl *Client) ReleaseSession(ctx context.Context, in *partitionpb.ReleaseSessionRequest, opts ...grpc.CallOption) (*partitionpb.ReleaseSessionResponse, error) {
	in.GroupId = cl.group
	return do(ctx, cl, func(c partitionpb.PartitionServiceClient) (*partitionpb.ReleaseSessionResponse, error) {
		return c.ReleaseSession(ctx, in, opts...)
	})
}

func (cl *Client) ListSessions(ctx context.Context, in *partitionpb.ListSessionsRequest, opts ...grpc.CallOption) (*partitionpb.ListSessionsResponse, error) {
	in.GroupId = cl.group
	return do(ctx, cl, func(c partitionpb.PartitionServiceClient) (*partitionpb.ListSessionsResponse, error) {
		return c.ListSessions(ctx, in, opts...)
	})
}

// Digest asks the replica the client tries first; any replica answers.
func (cl *Client) Digest(ctx context.Context, in *partitionpb.DigestRequest, opts ...grpc.CallOption) (*partitionpb.DigestResponse, error) {
	in.GroupId = cl.group
	return do(ctx, cl, func(c partitionpb.PartitionServiceClient) (*partitionpb.DigestResponse, error) {
		return c.Digest(ctx, in, opts...)
	})
}

func (cl *Client) Purge(ctx context.Context, in *partitionpb.PurgeRequest, opts ...grpc.CallOption) (*partitionpb.PurgeResponse, error) {
	in.GroupId = cl.group
	return do(ctx, cl, func(c partitionpb.PartitionServiceClient) (*partitionpb.PurgeResponse, error) {
		return c.Purge(ctx, in, opts...)
	})
}

func (cl *Client) Redrive(ctx context.Context, in *partitionpb.RedriveRequest, opts ...grpc.CallOption) (*partitionpb.RedriveResponse, error) {
	in.GroupId = cl.group
	return do(ctx, cl, func(c partitionpb.PartitionServiceClient) (*partitionpb.RedriveResponse, error) {
		return c.Redrive(ctx, in, opts...)
	})
}

// Logger returns a logger that writes to t's log at Warn and above, or at
// the level QUORUMBUS_TEST_LOG names (debug, info, warn, error). It goes
// quiet once the test has finished.
func Logger(t testing.TB) *slog.Logger {
	var level slog.Level = slog.LevelWarn
	if s := os.Getenv("QUORUMBUS_TEST_LOG"); s != "" {
		if err := level.UnmarshalText([]byte(s)); err != nil {
			t.Fatalf("nodetest: QUORUMBUS_TEST_LOG=%q: %v", s, err)
		}
	}
	w := &testWriter{t: t}
	t.Cleanup(func() { w.done.Store(true) }) // registered first, so it runs last
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
}

type testWriter struct {
	t    testing.TB
	done atomic.Bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	if !w.done.Load() {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}
