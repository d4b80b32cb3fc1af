package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// Membership: spare nodes joining, and placement's view of which node
// holds which replica, for the membership faults.

// AddNode starts the next spare node, which joins the cluster by gossip,
// and waits until it is ready. It returns the node's index, or -1 when
// every spare runs already.
func (c *Cluster) AddNode(ctx context.Context) (int, error) {
	c.mu.Lock()
	i := c.joined
	if i >= len(c.Nodes) {
		c.mu.Unlock()
		return -1, nil
	}
	c.joined++
	c.mu.Unlock()
	if err := c.startNode(i); err != nil {
		return i, err
	}
	return i, c.WaitReady(ctx, c.Member(i), c.HTTP[i])
}

// Replicas lists the nodes the routing table places group's replicas on.
func (c *Cluster) Replicas(ctx context.Context, group uint64) ([]int, error) {
	var errs []error
	for _, i := range c.Joined() {
		t, err := c.routes(ctx, i)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if len(t.Groups) == 0 {
			errs = append(errs, fmt.Errorf("%s: a routing table without groups", c.Nodes[i].Name))
			continue
		}
		var out []int
		for _, g := range t.Groups {
			if g.Id != group {
				continue
			}
			for _, r := range g.Replicas {
				if j := c.nodeIndex(r.NodeId); j >= 0 {
					out = append(out, j)
				}
			}
		}
		return out, nil
	}
	return nil, errors.Join(errs...)
}

func (c *Cluster) nodeIndex(id string) int {
	for i, p := range c.Nodes {
		if p.Name == id {
			return i
		}
	}
	return -1
}

// routes reads the routing table from node i's placement member.
func (c *Cluster) routes(ctx context.Context, i int) (*placementpb.RoutingTable, error) {
	cc, err := c.grpcConn(i)
	if err != nil {
		return nil, err
	}
	defer cc.Close()
	sctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	stream, err := placementpb.NewPlacementServiceClient(cc).WatchRoutes(sctx, &placementpb.WatchRoutesRequest{})
	if err != nil {
		return nil, err
	}
	return stream.Recv()
}

// Drain asks placement to move every replica off node i (draining set) or
// to stop doing so, as `quorumbus node drain|undrain` does, through the
// first joined node that answers.
func (c *Cluster) Drain(ctx context.Context, i int, draining bool) error {
	var errs []error
	for _, j := range c.Joined() {
		if !c.Nodes[j].Running() || c.Nodes[j].Paused() {
			continue
		}
		cc, err := c.grpcConn(j)
		if err != nil {
			return err
		}
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err = placementpb.NewPlacementServiceClient(cc).DrainNode(sctx, &placementpb.DrainNodeRequest{NodeId: c.Nodes[i].Name, Draining: draining})
		cancel()
		cc.Close()
		if err == nil {
			return nil
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Holds says how many replicas the routing table places on node i,
// counting a move away from it that has not finished. A table without
// groups (a placement member that has not caught up since its restart)
// is an error, not an answer.
func (c *Cluster) Holds(ctx context.Context, i int) (int, error) {
	var errs []error
	for _, j := range c.Joined() {
		if !c.Nodes[j].Running() || c.Nodes[j].Paused() {
			continue
		}
		t, err := c.routes(ctx, j)
		if err == nil && len(t.Groups) == 0 {
			err = fmt.Errorf("%s: a routing table without groups", c.Nodes[j].Name)
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		n := 0
		for _, g := range t.Groups {
			if g.MovingFrom == c.Nodes[i].Name {
				n++
				continue
			}
			for _, r := range g.Replicas {
				if r.NodeId == c.Nodes[i].Name {
					n++
				}
			}
		}
		return n, nil
	}
	return 0, errors.Join(errs...)
}
