// Package placementtest starts placement meta groups in-process for tests:
// members on InmemTransport for Raft, each with a real gRPC server on
// 127.0.0.1:0 that serves PlacementService and a fake PartitionService.
package placementtest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"

	"github.com/quorumbus/quorumbus/placement"
	"github.com/quorumbus/quorumbus/placement/membership"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
	pb "github.com/quorumbus/quorumbus/proto/placementpb"
	"github.com/quorumbus/quorumbus/proto/rpcnet"
)

// Options shape a test cluster; the zero value is three members.
type Options struct {
	Members            int           // meta members, default 3; each is also a storage node
	Groups             int           // passed to placement.Config
	MaxReplicasPerNode int           // passed to placement.Config
	ReplicationFactor  int           // passed to placement.Config
	ElectionTimeout    time.Duration // default 500ms
	ControlInterval    time.Duration // default 200ms
	CreateWait         time.Duration // passed to placement.Config
	GroupSilence       time.Duration // passed to placement.Config
	MetaVoters         int           // passed to placement.Config
	// Moves serves a GroupMembership on every member that completes
	// every replica move at once (Partitions.Membership); without it
	// moves never finish.
	Moves bool
	// Logger defaults to discarding; QUORUMBUS_TEST_LOG=1 logs to stderr.
	Logger *slog.Logger
}

// Cluster is a running meta group.
type Cluster struct {
	// Partitions is the PartitionService of every member's gRPC server.
	Partitions *Partitions

	t         testing.TB
	opts      Options
	bootstrap []raft.Server

	mu      sync.Mutex
	members []*Member
}

// Member is one member of the meta group, which is also a storage node.
type Member struct {
	ID     string
	Zone   string
	Addr   string // gRPC address, changes on Restart
	Client pb.PlacementServiceClient

	Service *placement.Service

	dataDir   string
	transport *raft.InmemTransport
	server    *grpc.Server
	conn      *grpc.ClientConn
	up        bool
}

// Start starts a meta group and closes it when the test ends.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	if opts.Members == 0 {
		opts.Members = 3
	}
	if opts.ElectionTimeout == 0 {
		opts.ElectionTimeout = 500 * time.Millisecond
	}
	if opts.ControlInterval == 0 {
		opts.ControlInterval = 200 * time.Millisecond
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
		if os.Getenv("QUORUMBUS_TEST_LOG") != "" {
			opts.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
		}
	}
	c := &Cluster{Partitions: NewPartitions(), t: t, opts: opts}
	dir := t.TempDir()
	for i := range opts.Members {
		m := &Member{ID: fmt.Sprintf("m%d", i+1), Zone: fmt.Sprintf("zone-%d", i+1)}
		m.dataDir = filepath.Join(dir, m.ID)
		c.members = append(c.members, m)
		c.bootstrap = append(c.bootstrap, raft.Server{ID: raft.ServerID(m.ID), Address: raft.ServerAddress(m.ID)})
	}
	for _, m := range c.members {
		_, m.transport = raft.NewInmemTransport(raft.ServerAddress(m.ID))
	}
	for _, m := range c.members {
		for _, o := range c.members {
			if o != m {
				m.transport.Connect(o.transport.LocalAddr(), o.transport)
			}
		}
	}
	for _, m := range c.members {
		c.start(m, c.bootstrap)
	}
	t.Cleanup(c.Close)
	return c
}

// reconnect gives m a fresh transport linked both ways with every member
// that is up.
func (c *Cluster) reconnect(m *Member) {
	_, m.transport = raft.NewInmemTransport(raft.ServerAddress(m.ID))
	for _, o := range c.Up() {
		if o != m {
			m.transport.Connect(o.transport.LocalAddr(), o.transport)
			o.transport.Connect(m.transport.LocalAddr(), m.transport)
		}
	}
}

func (c *Cluster) start(m *Member, bootstrap []raft.Server) {
	t := c.t
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m.Addr = lis.Addr().String()
	svc, err := placement.New(placement.Config{
		NodeID:             m.ID,
		DataDir:            m.dataDir,
		Transport:          m.transport,
		Bootstrap:          bootstrap,
		Groups:             c.opts.Groups,
		MaxReplicasPerNode: c.opts.MaxReplicasPerNode,
		ReplicationFactor:  c.opts.ReplicationFactor,
		Members:            placement.MembersFunc(c.liveMembers),
		// The in-memory transports are addressed by member id.
		MetaAddr:        func(n *pb.Node) raft.ServerAddress { return raft.ServerAddress(n.Id) },
		MetaVoters:      c.opts.MetaVoters,
		ElectionTimeout: c.opts.ElectionTimeout,
		ControlInterval: c.opts.ControlInterval,
		CreateWait:      c.opts.CreateWait,
		GroupSilence:    c.opts.GroupSilence,
		Logger:          c.opts.Logger.With("member", m.ID),
	})
	if err != nil {
		t.Fatal(err)
	}
	m.Service = svc
	m.server = grpc.NewServer(rpcnet.ServerOptions(nil)...)
	svc.Register(m.server)
	partitionpb.RegisterPartitionServiceServer(m.server, c.Partitions.Server(m.ID, m.Addr))
	if c.opts.Moves {
		partitionpb.RegisterGroupMembershipServer(m.server, c.Partitions.Membership(m.ID))
	}
	go m.server.Serve(lis)
	if err := svc.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	m.conn, err = rpcnet.Dial(m.Addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	m.Client = pb.NewPlacementServiceClient(m.conn)
	c.mu.Lock()
	m.up = true
	c.mu.Unlock()
}

// liveMembers is what membership would report: every member that is up,
// as a storage node.
func (c *Cluster) liveMembers() []membership.Member {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []membership.Member
	for _, m := range c.members {
		if m.up {
			out = append(out, membership.Member{NodeID: m.ID, Role: membership.RoleStorage, GRPCAddr: m.Addr, Zone: m.Zone})
		}
	}
	return out
}

// Members returns every member, up or not.
func (c *Cluster) Members() []*Member {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*Member(nil), c.members...)
}

// Up returns the members that are up.
func (c *Cluster) Up() []*Member {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*Member
	for _, m := range c.members {
		if m.up {
			out = append(out, m)
		}
	}
	return out
}

// Leader waits until exactly one member that is up leads, and returns it.
func (c *Cluster) Leader(t testing.TB) *Member {
	t.Helper()
	var leader *Member
	Eventually(t, 15*time.Second, "a meta leader", func() bool {
		leader = nil
		for _, m := range c.Up() {
			if m.Service.IsLeader() {
				if leader != nil {
					return false
				}
				leader = m
			}
		}
		return leader != nil
	})
	return leader
}

// Kill stops a member as a crash would: its gRPC server goes away, no
// Raft traffic reaches it, and its service stops. Its data stays.
func (c *Cluster) Kill(m *Member) {
	c.mu.Lock()
	m.up = false
	c.mu.Unlock()
	m.server.Stop()
	for _, o := range c.Members() {
		if o != m && o.transport != nil {
			o.transport.Disconnect(m.transport.LocalAddr())
		}
	}
	m.transport.DisconnectAll()
	m.conn.Close()
	if err := m.Service.Close(); err != nil {
		c.t.Logf("closing %s: %v", m.ID, err)
	}
}

// Isolate cuts m's Raft traffic both ways, as a network partition would;
// its gRPC server and service keep running. Heal undoes it.
func (c *Cluster) Isolate(m *Member) {
	for _, o := range c.Up() {
		if o != m {
			o.transport.Disconnect(m.transport.LocalAddr())
		}
	}
	m.transport.DisconnectAll()
}

// Heal links an isolated member's Raft traffic with every member up again.
func (c *Cluster) Heal(m *Member) {
	for _, o := range c.Up() {
		if o != m {
			m.transport.Connect(o.transport.LocalAddr(), o.transport)
			o.transport.Connect(m.transport.LocalAddr(), m.transport)
		}
	}
}

// Restart starts a killed member again on its data directory, with a new
// gRPC address.
func (c *Cluster) Restart(m *Member) {
	c.t.Helper()
	c.reconnect(m)
	c.start(m, c.bootstrap)
}

// AddNode starts a new member with an empty Bootstrap: a storage node that
// joined later, in no meta-group configuration until a leader adds it.
func (c *Cluster) AddNode(t testing.TB) *Member {
	t.Helper()
	c.mu.Lock()
	n := len(c.members) + 1
	m := &Member{ID: fmt.Sprintf("m%d", n), Zone: fmt.Sprintf("zone-%d", n)}
	m.dataDir = filepath.Join(filepath.Dir(c.members[0].dataDir), m.ID)
	c.members = append(c.members, m)
	c.mu.Unlock()
	c.reconnect(m)
	c.start(m, nil)
	return m
}

// Join starts a new member with an empty Bootstrap and has the leader add
// it to the meta group as a voter.
func (c *Cluster) Join(t testing.TB) *Member {
	t.Helper()
	leader := c.Leader(t)
	m := c.AddNode(t)
	deadline := time.Now().Add(15 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := leader.Service.AddVoter(ctx, m.ID, m.transport.LocalAddr())
		cancel()
		if err == nil {
			return m
		}
		if time.Now().After(deadline) {
			t.Fatalf("adding %s to the meta group: %v", m.ID, err)
		}
		leader = c.Leader(t) // leadership may have moved
	}
}

// Close stops every member.
func (c *Cluster) Close() {
	for _, m := range c.Up() {
		c.Kill(m)
	}
}

// Eventually polls cond every 10ms until it holds, failing the test after
// timeout.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
