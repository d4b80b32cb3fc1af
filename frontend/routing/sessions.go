package routing

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/quorumbus/quorumbus/frontend"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

var _ frontend.SessionBackend = (*Router)(nil)

// AcceptSession implements frontend.SessionBackend. An accept-next may
// wait req.WaitMs on the node, so each attempt may take that much longer.
// Every attempt carries the same token and request id, so that a retried
// accept finds the lock an earlier attempt took as its own: the session
// it named, or the one an accept-next locked. Later attempts say they
// repeat: the session an accept-next's lost attempt locked is available
// to nobody, so a node waiting for an available one would answer none,
// and the session would stay locked by nobody until its lock ran out.
func (r *Router) AcceptSession(ctx context.Context, e *placementpb.Entity, req *partitionpb.AcceptSessionRequest) (*partitionpb.Result, []byte, error) {
	var res *partitionpb.Result
	var token []byte
	id := newRequestID() // 16 random bytes, a lock token's size
	deadline := time.Now().Add(time.Duration(req.WaitMs) * time.Millisecond)
	attempts := 0
	err := r.call(ctx, e, req.Partition, time.Duration(req.WaitMs)*time.Millisecond, func(ctx context.Context, c partitionpb.PartitionServiceClient, group uint64) error {
		rq := proto.Clone(req).(*partitionpb.AcceptSessionRequest)
		rq.GroupId, rq.EntityId, rq.Token, rq.RequestId = group, e.Id, id, id
		rq.WaitMs = remainingWait(deadline, req.WaitMs)
		rq.Repeat = attempts > 0 && req.Next
		attempts++
		resp, err := c.AcceptSession(ctx, rq)
		if err != nil {
			return err
		}
		res, token = resp.GetResult(), resp.GetToken()
		if res.GetCode() == partitionpb.ResultCode_RESULT_ENTITY_NOT_FOUND && r.names(e) {
			// A queue created a moment ago whose partition is still
			// being configured, as callResult: nothing was locked, and
			// call tries again while the table names the entity.
			return status.Error(codes.NotFound, res.GetDescription())
		}
		return nil
	})
	return res, token, err
}

// SessionReady implements frontend.SessionBackend with a probe: the
// partition's leader waits up to wait for a session an accept-next would
// take and locks nothing. A node that does not know probes treats the
// request as an accept-next and may lock a session: that lock is given
// back at once and the answer is ready.
func (r *Router) SessionReady(ctx context.Context, e *placementpb.Entity, partition uint32, wait time.Duration) (bool, error) {
	var ready bool
	waitMs := max(wait.Milliseconds(), 0)
	deadline := time.Now().Add(wait)
	err := r.call(ctx, e, partition, wait, func(ctx context.Context, c partitionpb.PartitionServiceClient, group uint64) error {
		resp, err := c.AcceptSession(ctx, &partitionpb.AcceptSessionRequest{
			GroupId: group, EntityId: e.Id, Partition: partition, Next: true, Probe: true,
			WaitMs: remainingWait(deadline, waitMs),
		})
		if err != nil {
			return err
		}
		ready = resp.Ready
		if sid := resp.GetResult().GetSessionId(); sid != "" && len(resp.Token) > 0 {
			ready = true
			rs := &partitionpb.ReleaseSession{EntityId: e.Id, Partition: partition, SessionId: sid, Token: resp.Token}
			if _, err := c.ReleaseSession(ctx, &partitionpb.ReleaseSessionRequest{GroupId: group, Release: rs}); err != nil {
				r.log.Warn("give back the session a probe locked", "entity", e.Name, "session", sid, "err", err)
			}
		}
		return nil
	})
	return ready, err
}

// RenewSessionLock implements frontend.SessionBackend.
func (r *Router) RenewSessionLock(ctx context.Context, e *placementpb.Entity, rl *partitionpb.RenewSessionLock) (*partitionpb.Result, error) {
	rl.EntityId = e.Id
	id := newRequestID() // one for every attempt, as Settle's
	return callResult(r, ctx, e, rl.Partition, 0, func(ctx context.Context, c partitionpb.PartitionServiceClient, group uint64) (resultOf, error) {
		return c.RenewSessionLock(ctx, &partitionpb.RenewSessionLockRequest{GroupId: group, Renew: rl, RequestId: id})
	})
}

// SetSessionState implements frontend.SessionBackend.
func (r *Router) SetSessionState(ctx context.Context, e *placementpb.Entity, s *partitionpb.SetSessionState) (*partitionpb.Result, error) {
	s.EntityId = e.Id
	id := newRequestID()
	return callResult(r, ctx, e, s.Partition, 0, func(ctx context.Context, c partitionpb.PartitionServiceClient, group uint64) (resultOf, error) {
		return c.SetSessionState(ctx, &partitionpb.SetSessionStateRequest{GroupId: group, Set: s, RequestId: id})
	})
}

// GetSessionState implements frontend.SessionBackend.
func (r *Router) GetSessionState(ctx context.Context, e *placementpb.Entity, req *partitionpb.GetSessionStateRequest) (*partitionpb.Result, []byte, error) {
	var res *partitionpb.Result
	var state []byte
	err := r.call(ctx, e, req.Partition, 0, func(ctx context.Context, c partitionpb.PartitionServiceClient, group uint64) error {
		rq := proto.Clone(req).(*partitionpb.GetSessionStateRequest)
		rq.GroupId, rq.EntityId = group, e.Id
		resp, err := c.GetSessionState(ctx, rq)
		res, state = resp.GetResult(), resp.GetState()
		return err
	})
	return res, state, err
}

// ReleaseSession implements frontend.SessionBackend.
func (r *Router) ReleaseSession(ctx context.Context, e *placementpb.Entity, rs *partitionpb.ReleaseSession) (*partitionpb.Result, error) {
	rs.EntityId = e.Id
	id := newRequestID()
	return callResult(r, ctx, e, rs.Partition, 0, func(ctx context.Context, c partitionpb.PartitionServiceClient, group uint64) (resultOf, error) {
		return c.ReleaseSession(ctx, &partitionpb.ReleaseSessionRequest{GroupId: group, Release: rs, RequestId: id})
	})
}

// ListSessions implements frontend.SessionBackend.
func (r *Router) ListSessions(ctx context.Context, e *placementpb.Entity, req *partitionpb.ListSessionsRequest) ([]string, error) {
	var sids []string
	err := r.call(ctx, e, req.Partition, 0, func(ctx context.Context, c partitionpb.PartitionServiceClient, group uint64) error {
		rq := proto.Clone(req).(*partitionpb.ListSessionsRequest)
		rq.GroupId, rq.EntityId = group, e.Id
		resp, err := c.ListSessions(ctx, rq)
		sids = resp.GetSessionIds()
		return err
	})
	return sids, err
}
