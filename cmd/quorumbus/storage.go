package main

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"path/filepath"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/quorumbus/quorumbus/node"
	"github.com/quorumbus/quorumbus/placement"
	"github.com/quorumbus/quorumbus/placement/membership"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// storageOptions describes one storage process: a node, and a member of
// the placement meta group on the same gRPC port.
type storageOptions struct {
	id        string
	dataDir   string
	listener  net.Listener
	bootstrap []raft.Server // the meta group's initial voters; empty joins
	members   placement.Members
	groups    int
	replicas  int
	cacheMB   int64 // block cache of each group's store
	logger    *slog.Logger
}

// storage is a running storage process.
type storage struct {
	node      *node.Node
	placement *placement.Service
	cancel    context.CancelFunc
	done      chan struct{}
}

func startStorage(ctx context.Context, o storageOptions) (*storage, error) {
	n, err := node.New(node.Config{ID: o.id, DataDir: filepath.Join(o.dataDir, "node"), Listener: o.listener, CacheBytes: o.cacheMB << 20, Logger: o.logger})
	if err != nil {
		return nil, err
	}
	p, err := placement.New(placement.Config{
		NodeID:            o.id,
		DataDir:           filepath.Join(o.dataDir, "meta"),
		Transport:         n.RaftTransport(node.MetaGroup),
		Bootstrap:         o.bootstrap,
		Members:           o.members,
		Groups:            o.groups,
		ReplicationFactor: o.replicas,
		Logger:            o.logger,
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
	s := &storage{node: n, placement: p, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		reconcile(rctx, n, o.logger)
	}()
	return s, nil
}

func (s *storage) Close() error {
	s.cancel()
	<-s.done
	return errors.Join(s.placement.Close(), s.node.Close())
}

// reconcile keeps the node's groups in line with the routing table: it
// opens every group the table places on this node, and reports which
// groups it leads so that the table's leader hints stay fresh.
func reconcile(ctx context.Context, n *node.Node, log *slog.Logger) {
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
				applyRoutes(n, t, log)
			}
		}
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

func applyRoutes(n *node.Node, t *placementpb.RoutingTable, log *slog.Logger) {
	addrs := make(map[string]string, len(t.Nodes))
	for _, nd := range t.Nodes {
		addrs[nd.Id] = nd.GrpcAddr
	}
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
		if err := n.EnsureGroup(g.Id, peers); err != nil {
			log.Error("open group", "group", g.Id, "err", err)
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

// staticMembers is the member list of a dev cluster, whose processes are
// all known up front.
func staticMembers(ms []membership.Member) placement.Members {
	return placement.MembersFunc(func() []membership.Member { return ms })
}

func fmtServers(ids, addrs []string) []raft.Server {
	out := make([]raft.Server, len(ids))
	for i := range ids {
		out[i] = raft.Server{ID: raft.ServerID(ids[i]), Address: raft.ServerAddress(addrs[i]), Suffrage: raft.Voter}
	}
	return out
}
