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
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/quorumbus/quorumbus/node"
	"github.com/quorumbus/quorumbus/placement"
	"github.com/quorumbus/quorumbus/placement/membership"
	"github.com/quorumbus/quorumbus/proto/placementpb"
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
	watch     *groupWatch  // what the agent learnt of this node's groups
	failures  openFailures // groups that failed to open (readiness.go)
	cancel    context.CancelFunc
	done      chan struct{}
	closeOnce sync.Once
	closeErr  error
}

func StartStorage(ctx context.Context, o StorageOptions) (*Storage, error) {
	n, err := node.New(node.Config{ID: o.ID, DataDir: filepath.Join(o.DataDir, "node"), Listener: o.Listener, AdvertiseAddr: o.AdvertiseAddr, CacheBytes: o.CacheMB << 20,
		LeaderSyncFirst: o.LeaderSyncFirst, WALSegmentBytes: o.WALSegmentMB << 20, DiskReserveBytes: o.DiskReserveMB << 20,
		Logger: o.Logger})
	if err != nil {
		return nil, err
	}
	p, err := placement.New(placement.Config{
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
	s := &Storage{Node: n, Placement: p, watch: w, failures: n, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		reconcile(rctx, n, w, o.Logger)
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
			closed <- errors.Join(s.Placement.Close(), s.Node.Close())
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
func reconcile(ctx context.Context, n *node.Node, w *groupWatch, log *slog.Logger) {
	cc, err := grpc.NewClient(n.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Error("reconcile: dial own placement", "err", err)
		return
	}
	defer cc.Close()
	client := placementpb.NewPlacementServiceClient(cc)
	go reportGroups(ctx, n, client, log)
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		stream, err := client.WatchRoutes(ctx, &placementpb.WatchRoutesRequest{})
		if err == nil {
			for {
				t, err := stream.Recv()
				if err != nil {
					break
				}
				backoff = 100 * time.Millisecond
				applyRoutes(n, w, t, log)
			}
		}
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

func applyRoutes(n *node.Node, w *groupWatch, t *placementpb.RoutingTable, log *slog.Logger) {
	addrs := make(map[string]string, len(t.Nodes))
	for _, nd := range t.Nodes {
		addrs[nd.Id] = nd.GrpcAddr
	}
	var placed []uint64
	defer func() { w.placed(t, placed) }()
	for _, g := range t.Groups {
		var peers []node.Peer
		mine := false
		for _, r := range g.Replicas {
			peers = append(peers, node.Peer{ID: r.NodeId, Addr: addrs[r.NodeId]})
			mine = mine || r.NodeId == n.ID()
		}
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
}

// reportGroups tells placement, every second, which groups this node
// leads.
func reportGroups(ctx context.Context, n *node.Node, client placementpb.PlacementServiceClient, log *slog.Logger) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
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
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		if _, err := client.ReportGroups(cctx, req); err != nil && ctx.Err() == nil {
			log.Debug("report groups", "err", err)
		}
		cancel()
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
