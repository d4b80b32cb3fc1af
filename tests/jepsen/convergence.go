package jepsen

import (
	"context"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/quorumbus/quorumbus/proto/partitionpb"
	"github.com/quorumbus/quorumbus/proto/placementpb"
	"github.com/quorumbus/quorumbus/tests/jepsen/checker"
	"github.com/quorumbus/quorumbus/tests/jepsen/cluster"
	"github.com/quorumbus/quorumbus/tests/jepsen/report"
)

func nodeConn(c *cluster.Cluster, i int) (*grpc.ClientConn, error) {
	return grpc.NewClient("passthrough:///"+c.GRPC[i], grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return c.Net.DialContext(i)(ctx, "tcp", addr)
		}))
}

// digestOf asks node i for its digest of group g: a partition group's
// (PartitionService.Digest), or, for checker.MetaGroup, its catalog's
// (PlacementService.CatalogDigest).
func digestOf(ctx context.Context, c *cluster.Cluster, i int, g uint64) (uint64, []byte, error) {
	cc, err := nodeConn(c, i)
	if err != nil {
		return 0, nil, err
	}
	defer cc.Close()
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if g == checker.MetaGroup {
		d, err := placementpb.NewPlacementServiceClient(cc).CatalogDigest(dctx, &placementpb.CatalogDigestRequest{})
		if err != nil {
			return 0, nil, err
		}
		return d.AppliedIndex, d.Sha256, nil
	}
	d, err := partitionpb.NewPartitionServiceClient(cc).Digest(dctx, &partitionpb.DigestRequest{GroupId: g})
	if err != nil {
		return 0, nil, err
	}
	return d.AppliedIndex, d.Sha256, nil
}

// digests asks every running node for its digest of every group until,
// for each group, the nodes that hold it (a node without the group, e.g.
// one that drained, answers NotFound and is no replica) answer at one
// applied index, with at least a quorum of them answering, or ctx ends;
// it returns the last round (checker.Converged judges it).
func digests(ctx context.Context, c *cluster.Cluster, groups []uint64) []checker.DigestSample {
	var last []checker.DigestSample
	for {
		last = last[:0]
		settled := true
		for _, g := range groups {
			var applied uint64
			replicas := 0
			for i := range c.Nodes {
				if !c.Nodes[i].Running() {
					continue
				}
				s := checker.DigestSample{Node: c.Nodes[i].Name, Group: g}
				var err error
				s.Applied, s.Sum, err = digestOf(ctx, c, i, g)
				if status.Code(err) == codes.NotFound {
					continue // holds no replica of g
				}
				if err != nil {
					s.Err = err.Error()
					settled = false
				} else if replicas > 0 && s.Applied != applied {
					settled = false
				}
				applied = s.Applied
				replicas++
				last = append(last, s)
			}
			if replicas < cluster.Nodes/2+1 {
				settled = false
			}
		}
		if settled {
			return last
		}
		select {
		case <-ctx.Done():
			return last
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// watchReplicas samples every replica's GroupStatus of group every
// interval until stop, for the catch-up times after healed faults
// (report.CatchUps).
type watchReplicas struct {
	mu      sync.Mutex
	samples []report.ReplicaSample
	stop    chan struct{}
	done    chan struct{}
}

func startWatch(c *cluster.Cluster, group uint64, clock func() int64, interval time.Duration) *watchReplicas {
	w := &watchReplicas{stop: make(chan struct{}), done: make(chan struct{})}
	// Every node the cluster may start, spares too: placement moves the
	// group's replicas onto them.
	conns := make([]*grpc.ClientConn, len(c.Nodes))
	for i := range conns {
		conns[i], _ = nodeConn(c, i)
	}
	index := map[string]int{}
	for i, p := range c.Nodes {
		index[p.Name] = i
	}
	go func() {
		defer close(w.done)
		defer func() {
			for _, cc := range conns {
				if cc != nil {
					cc.Close()
				}
			}
		}()
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-w.stop:
				return
			case <-t.C:
			}
			for i, cc := range conns {
				if cc == nil || !c.Nodes[i].Running() || c.Nodes[i].Paused() {
					continue
				}
				ctx, cancel := context.WithTimeout(context.Background(), interval)
				st, err := partitionpb.NewGroupMembershipClient(cc).GroupStatus(ctx, &partitionpb.GroupStatusRequest{GroupId: group})
				cancel()
				if err != nil {
					continue
				}
				sample := report.ReplicaSample{Time: clock(), Node: i, Leader: st.State == "Leader",
					Applied: st.AppliedIndex, Commit: st.CommitIndex}
				if sample.Leader {
					for _, r := range st.Configuration {
						if j, ok := index[r.NodeId]; ok && r.Voter {
							sample.Voters = append(sample.Voters, j)
						}
					}
				}
				w.mu.Lock()
				w.samples = append(w.samples, sample)
				w.mu.Unlock()
			}
		}
	}()
	return w
}

func (w *watchReplicas) Stop() []report.ReplicaSample {
	close(w.stop)
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.samples
}
