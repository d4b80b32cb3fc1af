package node

import (
	"context"
	"crypto/rand"
	"fmt"
	"time"

	"github.com/quorumbus/quorumbus/partition"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// The session calls of PartitionService (partition/sessions.go has the
// rules).

// sessionReader is what the service reads of sessions from the leader's
// own state machine.
type sessionReader interface {
	SessionReady(entityID uint64, partition uint32) bool
	SessionAvailable(entityID uint64, partition uint32, sessionID string) bool
	SessionState(entityID uint64, partition uint32, sessionID string, token []byte, nowMs int64) ([]byte, error)
	ListSessions(entityID uint64, partition uint32, skip, top uint32, updatedSinceMs int64) ([]string, error)
	PeekSession(entityID uint64, partition uint32, from uint64, max uint32, nowMs int64, sessionID string) ([]*partitionpb.Message, error)
}

// AcceptSession locks a session for a receiver under a token the leader
// chooses. An accept-next with wait_ms waits, like Receive, for a session
// to become available, and answers an OK result without a session when
// the time runs out.
func (s *service) AcceptSession(ctx context.Context, req *partitionpb.AcceptSessionRequest) (*partitionpb.AcceptSessionResponse, error) {
	g, err := s.leader(req.GroupId)
	if err != nil {
		return nil, toStatus(err)
	}
	lead := g.leadership()
	if lead == nil {
		return nil, toStatus(g.checkLeader())
	}
	if req.Probe {
		return probeSession(ctx, g, lead, req)
	}
	token := req.Token
	if len(token) == 0 {
		token = make([]byte, partitionpb.LockTokenBytes)
		rand.Read(token) // never fails (crypto/rand)
	}
	cmd := &partitionpb.Command{Op: &partitionpb.Command_AcceptSession{AcceptSession: &partitionpb.AcceptSession{
		EntityId: req.EntityId, Partition: req.Partition, SessionId: req.SessionId, Next: req.Next, Token: token,
	}}, RequestId: req.RequestId}
	if !req.Next {
		res, err := g.propose1(ctx, cmd)
		if err != nil {
			return nil, toStatus(err)
		}
		return acceptResponse(res, token), nil
	}
	deadline := time.Now().Add(time.Duration(max(req.WaitMs, 0)) * time.Millisecond)
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	// A repeated request proposes at once, as a repeated Receive does: an
	// earlier attempt may have locked a session, which is then available
	// to nobody, and only the partition can say (under the request id).
	repeat := req.Repeat && len(req.RequestId) > 0
	for {
		changed := g.machine.Changed(req.EntityId, req.Partition, partitionpb.SubQueue_SUB_QUEUE_MAIN)
		last := !time.Now().Before(deadline)
		if repeat || !g.machine.HasEntity(req.EntityId, req.Partition) || g.machine.SessionReady(req.EntityId, req.Partition) {
			repeat = false
			res, err := g.propose1(ctx, cmd)
			if err != nil {
				return nil, toStatus(err)
			}
			if res.Code != partitionpb.ResultCode_RESULT_OK || res.SessionId != "" || last {
				return acceptResponse(res, token), nil
			}
			// Another receiver took it first; wait for another.
		} else if last {
			return &partitionpb.AcceptSessionResponse{Result: &partitionpb.Result{}}, nil
		}
		select {
		case <-changed:
		case <-timer.C:
		case <-lead.Done():
			return nil, toStatus(g.checkLeader())
		case <-ctx.Done():
			return nil, toStatus(ctx.Err())
		}
	}
}

// probeSession waits up to req.WaitMs for the entity partition to have a
// session that an accept-next would take, and locks nothing: the answer
// is only a hint (another receiver may take the session first), which the
// front-end follows with an accept-next that does not wait. An entity the
// machine does not know answers ready, so that the accept that follows
// gets the error.
func probeSession(ctx context.Context, g *group, lead context.Context, req *partitionpb.AcceptSessionRequest) (*partitionpb.AcceptSessionResponse, error) {
	deadline := time.Now().Add(time.Duration(max(req.WaitMs, 0)) * time.Millisecond)
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	for {
		changed := g.machine.Changed(req.EntityId, req.Partition, partitionpb.SubQueue_SUB_QUEUE_MAIN)
		if !g.machine.HasEntity(req.EntityId, req.Partition) || g.machine.SessionReady(req.EntityId, req.Partition) {
			return &partitionpb.AcceptSessionResponse{Result: &partitionpb.Result{}, Ready: true}, nil
		}
		if !time.Now().Before(deadline) {
			return &partitionpb.AcceptSessionResponse{Result: &partitionpb.Result{}}, nil
		}
		select {
		case <-changed:
		case <-timer.C:
		case <-lead.Done():
			return nil, toStatus(g.checkLeader())
		case <-ctx.Done():
			return nil, toStatus(ctx.Err())
		}
	}
}

func acceptResponse(res *partitionpb.Result, token []byte) *partitionpb.AcceptSessionResponse {
	if res.Code != partitionpb.ResultCode_RESULT_OK || res.SessionId == "" {
		token = nil
	}
	return &partitionpb.AcceptSessionResponse{Result: res, Token: token}
}

func (s *service) RenewSessionLock(ctx context.Context, req *partitionpb.RenewSessionLockRequest) (*partitionpb.RenewSessionLockResponse, error) {
	if req.Renew == nil {
		return nil, toStatus(fmt.Errorf("%w: RenewSessionLock without renew", ErrInvalid))
	}
	res, err := s.propose1(ctx, req.GroupId, &partitionpb.Command{Op: &partitionpb.Command_RenewSessionLock{RenewSessionLock: req.Renew}, RequestId: req.RequestId})
	if err != nil {
		return nil, toStatus(err)
	}
	return &partitionpb.RenewSessionLockResponse{Result: res}, nil
}

func (s *service) SetSessionState(ctx context.Context, req *partitionpb.SetSessionStateRequest) (*partitionpb.SetSessionStateResponse, error) {
	if req.Set == nil {
		return nil, toStatus(fmt.Errorf("%w: SetSessionState without set", ErrInvalid))
	}
	res, err := s.propose1(ctx, req.GroupId, &partitionpb.Command{Op: &partitionpb.Command_SetSessionState{SetSessionState: req.Set}, RequestId: req.RequestId})
	if err != nil {
		return nil, toStatus(err)
	}
	return &partitionpb.SetSessionStateResponse{Result: res}, nil
}

func (s *service) ReleaseSession(ctx context.Context, req *partitionpb.ReleaseSessionRequest) (*partitionpb.ReleaseSessionResponse, error) {
	if req.Release == nil {
		return nil, toStatus(fmt.Errorf("%w: ReleaseSession without release", ErrInvalid))
	}
	res, err := s.propose1(ctx, req.GroupId, &partitionpb.Command{Op: &partitionpb.Command_ReleaseSession{ReleaseSession: req.Release}, RequestId: req.RequestId})
	if err != nil {
		return nil, toStatus(err)
	}
	return &partitionpb.ReleaseSessionResponse{Result: res}, nil
}

// GetSessionState reads the leader's own state machine once a quorum
// confirmed its leadership, like Peek; the lock is judged by the
// leader's clock.
func (s *service) GetSessionState(ctx context.Context, req *partitionpb.GetSessionStateRequest) (*partitionpb.GetSessionStateResponse, error) {
	g, err := s.reader(req.GroupId)
	if err != nil {
		return nil, toStatus(err)
	}
	st, err := g.machine.SessionState(req.EntityId, req.Partition, req.SessionId, req.Token, g.node.wallMs())
	if code, ok := partition.Code(err); ok && code != partitionpb.ResultCode_RESULT_OK {
		return &partitionpb.GetSessionStateResponse{Result: &partitionpb.Result{Code: code, Description: err.Error()}}, nil
	}
	if err != nil {
		return nil, toStatus(err)
	}
	return &partitionpb.GetSessionStateResponse{Result: &partitionpb.Result{}, State: st}, nil
}

// ListSessions reads the leader's own state machine, like Peek.
func (s *service) ListSessions(ctx context.Context, req *partitionpb.ListSessionsRequest) (*partitionpb.ListSessionsResponse, error) {
	g, err := s.reader(req.GroupId)
	if err != nil {
		return nil, toStatus(err)
	}
	sids, err := g.machine.ListSessions(req.EntityId, req.Partition, req.Skip, req.Top, req.UpdatedSinceMs)
	if err != nil {
		return nil, toStatus(err)
	}
	return &partitionpb.ListSessionsResponse{SessionIds: sids}, nil
}
