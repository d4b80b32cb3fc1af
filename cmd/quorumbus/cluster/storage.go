// Package cluster wires quorumbus's components into running processes: a
// storage process (a node plus a placement member on one gRPC port), and the
// whole replicated cluster in one process that `quorumbus dev` runs and the
// conformance tests start. It only wires; the components live in their own
// packages.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"

	"github.com/quorumbus/quorumbus/frontend/routing"
	"github.com/quorumbus/quorumbus/node"
	"github.com/quorumbus/quorumbus/placement"
	"github.com/quorumbus/quorumbus/placement/membership"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
	"github.com/quorumbus/quorumbus/proto/placementpb"
	"github.com/quorumbus/quorumbus/proto/rpcnet"
)

// StorageOptions describes one storage process: a node, and a member of
// the placement meta group on the same gRPC port.
type StorageOptions struct {
	ID       string
	DataDir  string
	Listener net.Listener
	// AdvertiseAddr is the address peers dial (node.Config.AdvertiseAddr);
	// empty: the listener's.
	AdvertiseAddr string
	Bootstrap     []raft.Server // the meta group's initial voters; empty joins
	Members       placement.Members
	Groups        int
	Replicas      int
	CacheMB       int64 // block cache of each group's store
	// LeaderSyncFirst: leaders fsync before they replicate
	// (node.Config.LeaderSyncFirst).
	LeaderSyncFirst bool
	// Creds is the cluster's mutual TLS of the node's gRPC listener and of
	// every dial it and its placement member make; nil: plain text.
	Creds *rpcnet.Creds
	// WALSegmentMB and DiskReserveMB are node.Config's WALSegmentBytes
	// and DiskReserveBytes in MiB; 0 takes the node's defaults.
	WALSegmentMB  int
	DiskReserveMB int64
	Logger        *slog.Logger
}

// shutdownTimeout bounds Storage.Close: a process asked to stop stops,
// even if a group's storage hangs.
const shutdownTimeout = 30 * time.Second

// storage is a running storage process.
type Storage struct {
	Node      *node.Node
	Placement *placement.Service
	forward   *routing.Router // where the node's forwarders send
	watch     *groupWatch     // what the agent learnt of this node's groups
	failures  openFailures    // groups that failed to open (readiness.go)
	cancel    context.CancelFunc
	done      chan struct{}
	closeOnce sync.Once
	closeErr  error
}

func StartStorage(ctx context.Context, o StorageOptions) (*Storage, error) {
	cfg := node.Config{ID: o.ID, DataDir: filepath.Join(o.DataDir, "node"), Listener: o.Listener, AdvertiseAddr: o.AdvertiseAddr, CacheBytes: o.CacheMB << 20,
		LeaderSyncFirst: o.LeaderSyncFirst, WALSegmentBytes: o.WALSegmentMB << 20, DiskReserveBytes: o.DiskReserveMB << 20,
		Creds: o.Creds, Logger: o.Logger}
	chaosStarted, err := armChaos(&cfg, o.Logger) // nothing unless built with -tags chaostest (chaos.go)
	if err != nil {
		return nil, err
	}
	n, err := node.New(cfg)
	if err != nil {
		return nil, err
	}
	p, err := placement.New(placement.Config{
		Creds:             o.Creds,
		NodeID:            o.ID,
		DataDir:           filepath.Join(o.DataDir, "meta"),
		Transport:         n.RaftTransport(node.MetaGroup),
		Bootstrap:         o.Bootstrap,
		Members:           o.Members,
		Groups:            o.Groups,
		ReplicationFactor: o.Replicas,
		Logger:            o.Logger,
	})
	if err != nil {
		n.Close()
		return nil, err
	}
	if err := n.Register(p.Register); err != nil {
		n.Close()
		return nil, err
	}
	// Auto-forwarding sends through the cluster's routing, as a
	// front-end does; this node's own groups are called directly.
	fwd, err := routing.New(routing.Config{
		Placement: []string{n.Addr()},
		Local:     map[string]partitionpb.PartitionServiceServer{o.ID: n.PartitionService()},
		Creds:     o.Creds,
		Logger:    o.Logger.With("part", "forwarding"),
	})
	if err != nil {
		n.Close()
		return nil, err
	}
	n.SetForwardTarget(forwardTarget{fwd})
	if err := n.Start(ctx); err != nil {
		n.Close()
		return nil, err
	}
	if err := p.Start(ctx); err != nil {
		n.Close()
		return nil, err
	}
	rctx, cancel := context.WithCancel(ctx)
	w := &groupWatch{}
	// The node's own record of open failures: it retries them with
	// backoff, so one that opens later must stop being reported whether
	// or not a routing table arrived since.
	s := &Storage{Node: n, Placement: p, forward: fwd, watch: w, failures: n, cancel: cancel, done: make(chan struct{})}
	chaosStarted(n)
	fwd.Start(rctx)
	go func() {
		defer close(s.done)
		reconcile(rctx, n, o.Members, o.Creds, w, o.Logger)
	}()
	return s, nil
}

// Close stops the storage process; calling it again does nothing. It
// returns within shutdownTimeout, with an error if the stop did not
// finish by then (the process is about to exit anyway).
func (s *Storage) Close() error {
	s.closeOnce.Do(func() {
		s.cancel()
		closed := make(chan error, 1)
		go func() {
			<-s.done
			closed <- errors.Join(s.forward.Close(), s.Placement.Close(), s.Node.Close())
		}()
		t := time.NewTimer(shutdownTimeout)
		defer t.Stop()
		select {
		case s.closeErr = <-closed:
		case <-t.C:
			s.closeErr = fmt.Errorf("storage %s: shutdown did not finish within %v", s.Node.ID(), shutdownTimeout)
		}
	})
	return s.closeErr
}

// reconcile keeps the node's groups in line with the routing table: it
// opens every group the table places on this node, and reports which
// groups it leads so that the table's leader hints stay fresh. It records
// in w which groups the table places here.
//
// It reads the table from this node's own placement member, or, while
// that one cannot serve it (a node that joined later is no member of the
// meta group; a member that heard from no meta leader for long, as one
// removed from the group without knowing it: placement/orphan.go), from
// another storage member's.
func reconcile(ctx context.Context, n *node.Node, members placement.Members, creds *rpcnet.Creds, w *groupWatch, log *slog.Logger) {
	pc := &placementClients{own: n.Addr(), members: members, creds: creds, conns: map[string]*grpc.ClientConn{}}
	defer pc.close()
	go reportGroups(ctx, n, pc, log)
	backoff := 100 * time.Millisecond
	for attempt := 0; ctx.Err() == nil; attempt++ {
		client, own, err := pc.client(attempt)
		if err == nil {
			var stream grpc.ServerStreamingClient[placementpb.RoutingTable]
			stream, err = client.WatchRoutes(ctx, &placementpb.WatchRoutesRequest{})
			for err == nil {
				var t *placementpb.RoutingTable
				if t, err = stream.Recv(); err != nil {
					break
				}
				backoff, attempt = 100*time.Millisecond, 0
				w.servedByOther(!own)
				applyRoutes(n, w, t, log)
			}
			w.servedByOther(false)
		}
		if err != nil {
			log.Debug("routing table watch", "err", err)
		}
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// placementClients reaches a placement member: this node's own first,
// then the other storage members in turn.
type placementClients struct {
	own     string
	members placement.Members
	creds   *rpcnet.Creds
	mu      sync.Mutex
	conns   map[string]*grpc.ClientConn
}

// client returns the client of the attempt-th candidate, and whether it
// is this node's own member.
func (pc *placementClients) client(attempt int) (_ placementpb.PlacementServiceClient, own bool, _ error) {
	addrs := []string{pc.own}
	if pc.members != nil {
		for _, m := range pc.members.Members() {
			if m.Role == membership.RoleStorage && m.GRPCAddr != "" && m.GRPCAddr != pc.own {
				addrs = append(addrs, m.GRPCAddr)
			}
		}
	}
	addr := addrs[attempt%len(addrs)]
	own = addr == pc.own
	pc.mu.Lock()
	defer pc.mu.Unlock()
	cc := pc.conns[addr]
	if cc == nil {
		var err error
		if cc, err = rpcnet.Dial(addr, pc.creds); err != nil {
			return nil, own, err
		}
		pc.conns[addr] = cc
	}
	return placementpb.NewPlacementServiceClient(cc), own, nil
}

func (pc *placementClients) close() {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	for _, cc := range pc.conns {
		cc.Close()
	}
}

func applyRoutes(n *node.Node, w *groupWatch, t *placementpb.RoutingTable, log *slog.Logger) {
	addrs := make(map[string]string, len(t.Nodes))
	for _, nd := range t.Nodes {
		addrs[nd.Id] = nd.GrpcAddr
	}
	var placed []uint64
	defer func() { w.placed(t, placed) }()
	listed := map[uint64]bool{}
	for _, g := range t.Groups {
		var peers []node.Peer
		mine := false
		for _, r := range g.Replicas {
			peers = append(peers, node.Peer{ID: r.NodeId, Addr: addrs[r.NodeId], Joined: r.Joined})
			mine = mine || r.NodeId == n.ID()
		}
		listed[g.Id] = true
		if !mine {
			continue
		}
		placed = append(placed, g.Id)
		// The node records and logs a group that fails to open (when
		// the reason changes) and retries it with backoff; every
		// routing table would repeat it here.
		if err := n.EnsureGroup(g.Id, peers); err != nil {
			log.Debug("open group", "group", g.Id, "err", err)
		}
	}
	// A group the table lists without this node was moved off it (the
	// move is recorded done only once the group's configuration no longer
	// has this replica): its data goes. A group the table does not list
	// at all is left alone; the table may be one of a catalog that lost
	// it, which is not this node's to judge.
	for _, id := range n.Groups() {
		if listed[id] && !slices.Contains(placed, id) {
			log.Info("removing a group moved off this node", "group", id)
			if err := n.RemoveGroup(id); err != nil {
				log.Warn("remove group", "group", id, "err", err)
			}
		}
	}
}

// reportGroups tells placement, every second, which groups this node
// leads, through its own member or, when that fails, another.
func reportGroups(ctx context.Context, n *node.Node, pc *placementClients, log *slog.Logger) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	attempt := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		req := &placementpb.ReportGroupsRequest{NodeId: n.ID()}
		for _, id := range n.Groups() {
			st, err := n.Group(id)
			if err != nil || st.State != raft.Leader {
				continue
			}
			req.Groups = append(req.Groups, &placementpb.GroupReport{GroupId: id, LeaderId: n.ID(), HasQuorum: st.Serving})
		}
		client, _, err := pc.client(attempt)
		if err == nil {
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_, err = client.ReportGroups(cctx, req)
			cancel()
		}
		if err != nil && ctx.Err() == nil {
			log.Debug("report groups", "err", err)
			attempt++ // the next report tries the next member
		}
	}
}

// StaticMembers is the member list of a dev cluster, whose processes are
// all known up front.
func StaticMembers(ms []membership.Member) placement.Members {
	return placement.MembersFunc(func() []membership.Member { return ms })
}

func Servers(ids, addrs []string) []raft.Server {
	out := make([]raft.Server, len(ids))
	for i := range ids {
		out[i] = raft.Server{ID: raft.ServerID(ids[i]), Address: raft.ServerAddress(addrs[i]), Suffrage: raft.Voter}
	}
	return out
}
