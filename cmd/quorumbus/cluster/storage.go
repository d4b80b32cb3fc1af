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

	"github.com/quorumbus/quorumbus/frontend/routing"
	"github.com/quorumbus/quorumbus/node"
	"github.com/quorumbus/quorumbus/node/agent"
	"github.com/quorumbus/quorumbus/placement"
	"github.com/quorumbus/quorumbus/placement/membership"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
	"github.com/quorumbus/quorumbus/proto/rpcnet"
)

// DefaultMaxReplicasPerNode is -max-replicas-per-node's default on `node`
// and `dev`: with three nodes, a queue of 16 partitions gets 8 groups, two
// partitions each; with six, one each. `dev` runs its nodes in one
// process, so the cap counts three times in its memory limit, and its
// groups share one disk.
const DefaultMaxReplicasPerNode = 8

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
	// MaxReplicasPerNode is placement.Config.MaxReplicasPerNode: room
	// for groups beyond Groups, one per partition of the widest entity.
	// 0: Groups only.
	MaxReplicasPerNode int
	// GoneAfter is how long a node may be dead before its replicas are
	// re-created on others (placement.Config.GoneAfter); 0: its default.
	GoneAfter time.Duration
	CacheMB   int64 // block cache of each group's store
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
	// MaxQueuedSendMB is node.Config.MaxQueuedSendBytes in MiB: the
	// requests a partition leader holds for its proposer before it
	// refuses sends as busy. 0 takes the node's default, negative turns
	// the bound off.
	MaxQueuedSendMB int64
	Logger          *slog.Logger
}

// nodeConfig is the node's part of o.
func (o StorageOptions) nodeConfig() node.Config {
	return node.Config{ID: o.ID, DataDir: filepath.Join(o.DataDir, "node"), Listener: o.Listener, AdvertiseAddr: o.AdvertiseAddr, CacheBytes: o.CacheMB << 20,
		LeaderSyncFirst: o.LeaderSyncFirst, WALSegmentBytes: o.WALSegmentMB << 20, DiskReserveBytes: o.DiskReserveMB << 20,
		MaxQueuedSendBytes: o.MaxQueuedSendMB << 20, Creds: o.Creds, Logger: o.Logger}
}

// shutdownTimeout bounds Storage.Close: a process asked to stop stops,
// even if a group's storage hangs.
const shutdownTimeout = 30 * time.Second

// storage is a running storage process.
type Storage struct {
	Node      *node.Node
	Placement *placement.Service
	forward   *routing.Router // where the node's forwarders send
	agent     *agent.Agent    // keeps the node's groups in line with the routing table
	failures  openFailures    // groups that failed to open (readiness.go)
	cancel    context.CancelFunc
	closeOnce sync.Once
	closeErr  error
}

func StartStorage(ctx context.Context, o StorageOptions) (*Storage, error) {
	cfg := o.nodeConfig()
	chaosStarted, err := armChaos(&cfg, o.Logger) // nothing unless built with -tags chaostest (chaos.go)
	if err != nil {
		return nil, err
	}
	n, err := node.New(cfg)
	if err != nil {
		return nil, err
	}
	// The guard keeps a meta member on an empty disk out of elections
	// until it has caught up, and a first voter on one from bootstrapping
	// a second catalog (node/metaguard.go).
	metaTrans := n.RaftTransport(node.MetaGroup)
	guard, err := n.MetaGuard(metaTrans)
	if err != nil {
		n.Close()
		return nil, err
	}
	p, err := placement.New(placement.Config{
		Creds:              o.Creds,
		NodeID:             o.ID,
		DataDir:            filepath.Join(o.DataDir, "meta"),
		Transport:          metaTrans,
		Guard:              guard,
		Bootstrap:          o.Bootstrap,
		Members:            o.Members,
		Groups:             o.Groups,
		MaxReplicasPerNode: o.MaxReplicasPerNode,
		ReplicationFactor:  o.Replicas,
		GoneAfter:          o.GoneAfter,
		Logger:             o.Logger,
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
	ag, err := agent.New(agent.Config{Node: n, Others: storageAddrs(o.Members), Creds: o.Creds, Logger: o.Logger})
	if err != nil {
		n.Close()
		return nil, err
	}
	rctx, cancel := context.WithCancel(ctx)
	// The node's own record of open failures: it retries them with
	// backoff, so one that opens later must stop being reported whether
	// or not a routing table arrived since.
	s := &Storage{Node: n, Placement: p, forward: fwd, agent: ag, failures: n, cancel: cancel}
	chaosStarted(n)
	fwd.Start(rctx)
	ag.Start(rctx)
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
			closed <- errors.Join(s.agent.Close(), s.forward.Close(), s.Placement.Close(), s.Node.Close())
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

// storageAddrs returns the gRPC addresses of the storage members, whose
// placement members may serve the routing table (agent.Config.Others).
func storageAddrs(members placement.Members) func() []string {
	if members == nil {
		return nil
	}
	return func() []string {
		var addrs []string
		for _, m := range members.Members() {
			if m.Role == membership.RoleStorage {
				addrs = append(addrs, m.GRPCAddr)
			}
		}
		return addrs
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
