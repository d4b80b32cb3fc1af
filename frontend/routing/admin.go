package routing

import (
	"context"

	"google.golang.org/protobuf/proto"

	"github.com/quorumbus/quorumbus/proto/partitionpb"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// Purge proposes one bounded Purge on an entity partition's leader (the
// gateway's and the CLI's purge loops, issue 23). A retry after an
// ambiguous failure is safe without a request id: what the first attempt
// deleted is gone, and the retry deletes the next ones.
func (r *Router) Purge(ctx context.Context, e *placementpb.Entity, p *partitionpb.Purge) (*partitionpb.Result, error) {
	return callResult(r, ctx, e, p.Partition, 0, func(ctx context.Context, c partitionpb.PartitionServiceClient, group uint64) (resultOf, error) {
		rq := proto.Clone(p).(*partitionpb.Purge)
		rq.EntityId = e.Id
		return c.Purge(ctx, &partitionpb.PurgeRequest{GroupId: group, Purge: rq})
	})
}

// Redrive proposes one bounded Redrive on an entity partition's leader.
// A retry is safe: a message the first attempt moved is no longer in the
// dead-letter queue, and the retry skips it.
func (r *Router) Redrive(ctx context.Context, e *placementpb.Entity, rd *partitionpb.Redrive) (*partitionpb.Result, error) {
	return callResult(r, ctx, e, rd.Partition, 0, func(ctx context.Context, c partitionpb.PartitionServiceClient, group uint64) (resultOf, error) {
		rq := proto.Clone(rd).(*partitionpb.Redrive)
		rq.EntityId = e.Id
		return c.Redrive(ctx, &partitionpb.RedriveRequest{GroupId: group, Redrive: rq})
	})
}

// Table is the routing table as the router holds it (nil before the
// first), built anew at each call: the gateway's console shows its nodes
// and groups.
func (r *Router) Table() *placementpb.RoutingTable {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.table == nil {
		return nil
	}
	return r.table.whole()
}
