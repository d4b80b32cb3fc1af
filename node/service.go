package node

import (
	"context"
	"crypto/rand"
	"fmt"
	"time"

	"github.com/quorumbus/quorumbus/partition"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// service is the node's PartitionService. Every call names a group; only
// the group's leader answers, others return FailedPrecondition with a
// LeaderHint. Rejections by the state machine come back as the Result of
// the response where there is one; errors go through toStatus.
type service struct {
	partitionpb.UnimplementedPartitionServiceServer
	n *Node
}

// leader returns the group if this node may serve it.
func (s *service) leader(id uint64) (*group, error) {
	g, err := s.n.group(id)
	if err != nil {
		return nil, err
	}
	if err := g.checkLeader(); err != nil {
		return nil, err
	}
	return g, nil
}

// propose1 proposes one command on the group's leader and returns its
// result.
func (s *service) propose1(ctx context.Context, groupID uint64, cmd *partitionpb.Command) (*partitionpb.Result, error) {
	g, err := s.leader(groupID)
	if err != nil {
		return nil, err
	}
	return g.propose1(ctx, cmd)
}

func (g *group) propose1(ctx context.Context, cmd *partitionpb.Command) (*partitionpb.Result, error) {
	res, err := g.propose(ctx, cmd)
	if err != nil {
		return nil, err
	}
	return res[0], nil
}

func (s *service) UpsertEntity(ctx context.Context, req *partitionpb.UpsertEntityRequest) (*partitionpb.UpsertEntityResponse, error) {
	if req.Config == nil {
		return nil, toStatus(fmt.Errorf("%w: UpsertEntity without config", ErrInvalid))
	}
	res, err := s.propose1(ctx, req.GroupId, &partitionpb.Command{Op: &partitionpb.Command_UpsertEntity{
		UpsertEntity: &partitionpb.UpsertEntity{Config: req.Config},
	}})
	if err == nil {
		err = partition.ResultErr(res)
	}
	if err != nil {
		return nil, toStatus(err)
	}
	return &partitionpb.UpsertEntityResponse{}, nil
}

func (s *service) DeleteEntity(ctx context.Context, req *partitionpb.DeleteEntityRequest) (*partitionpb.DeleteEntityResponse, error) {
	res, err := s.propose1(ctx, req.GroupId, &partitionpb.Command{Op: &partitionpb.Command_DeleteEntity{
		DeleteEntity: &partitionpb.DeleteEntity{EntityId: req.EntityId, Partition: req.Partition, Version: req.Version},
	}})
	if err == nil {
		err = partition.ResultErr(res)
	}
	if err != nil {
		return nil, toStatus(err)
	}
	return &partitionpb.DeleteEntityResponse{}, nil
}

// Send refuses with ErrNoSpace, before proposing anything, when the
// node's disk is down to its reserve: the reserve is kept for the
// settles that free space (Config.DiskReserveBytes); and with ErrBusy
// when the leader's proposal queue is full (Config.MaxQueuedSendBytes).
func (s *service) Send(ctx context.Context, req *partitionpb.SendRequest) (*partitionpb.SendResponse, error) {
	g, err := s.leader(req.GroupId)
	if err != nil {
		return nil, toStatus(err)
	}
	// Before staging: staged chunks of a large message are writes too.
	if err := s.n.checkSpace(); err != nil {
		return nil, toStatus(err)
	}
	if err := g.prop.admitSend(s.n.cfg.MaxQueuedSendBytes); err != nil {
		return nil, toStatus(err)
	}
	enq, rejected, err := g.stageLarge(ctx, &partitionpb.Enqueue{EntityId: req.EntityId, Partition: req.Partition, Messages: req.Messages})
	if err != nil {
		return nil, toStatus(err)
	}
	if rejected != nil {
		return &partitionpb.SendResponse{Result: rejected}, nil
	}
	res, err := g.propose1(ctx, &partitionpb.Command{Op: &partitionpb.Command_Enqueue{Enqueue: enq}, RequestId: req.RequestId})
	if err != nil {
		return nil, toStatus(err)
	}
	return &partitionpb.SendResponse{Result: res}, nil
}

// Receive locks (or takes) up to max_count messages. With wait_ms it waits
// for a message to become available, then tries once more when the time is
// up; running out of time is an empty result, not an error.
//
// max_count 0 with wait_ms > 0 takes nothing: it answers (empty) as soon as
// the partition has a message for the request, or when the time is up. A
// receiver of a partitioned entity waits on all its partitions this way at
// once and cancels the others when one answers, which is safe because
// nothing was taken; it then takes what is there without waiting.
func (s *service) Receive(ctx context.Context, req *partitionpb.ReceiveRequest) (*partitionpb.ReceiveResponse, error) {
	waitOnly := req.MaxCount == 0 && req.WaitMs > 0
	if req.MaxCount == 0 && !waitOnly {
		return nil, toStatus(fmt.Errorf("%w: Receive with max_count 0 and no wait_ms", ErrInvalid))
	}
	g, err := s.leader(req.GroupId)
	if err != nil {
		return nil, toStatus(err)
	}
	lead := g.leadership()
	if lead == nil {
		return nil, toStatus(g.checkLeader())
	}
	var deadline time.Time
	if req.WaitMs > 0 {
		deadline = time.Now().Add(time.Duration(req.WaitMs) * time.Millisecond)
	}
	if waitOnly {
		return awaitAvailable(ctx, g, lead, req, deadline)
	}
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	// A repeated request proposes its Lock at once: an earlier attempt's
	// Lock may have committed, and only the partition can say.
	repeat := req.Repeat && len(req.RequestId) > 0 && !req.ReceiveAndDelete
	for {
		// Take the channel before looking, so that a message that
		// arrives in between still wakes us.
		changed := g.machine.Changed(req.EntityId, req.Partition, req.SubQueue)
		last := !time.Now().Before(deadline)
		// An unknown entity goes to the machine too: its Result says so.
		if repeat || !g.machine.HasEntity(req.EntityId, req.Partition) || available(g.machine, req) {
			repeat = false
			res, err := g.propose1(ctx, lockCommand(req))
			if err != nil {
				return nil, toStatus(err)
			}
			if res.Code != partitionpb.ResultCode_RESULT_OK || len(res.Messages) > 0 || last {
				return &partitionpb.ReceiveResponse{Result: res}, nil
			}
			// Another receiver took them first; wait for more.
		} else if last {
			return &partitionpb.ReceiveResponse{Result: &partitionpb.Result{}}, nil
		}
		if timer == nil {
			timer = time.NewTimer(time.Until(deadline))
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

// awaitAvailable answers a wait-only Receive: empty, once the partition
// has a message for it (or does not know the entity, which a taking
// Receive then reports) or at the deadline.
func awaitAvailable(ctx context.Context, g *group, lead context.Context, req *partitionpb.ReceiveRequest, deadline time.Time) (*partitionpb.ReceiveResponse, error) {
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	for {
		changed := g.machine.Changed(req.EntityId, req.Partition, req.SubQueue)
		if !g.machine.HasEntity(req.EntityId, req.Partition) || available(g.machine, req) {
			return &partitionpb.ReceiveResponse{Result: &partitionpb.Result{}}, nil
		}
		select {
		case <-changed:
		case <-timer.C:
			return &partitionpb.ReceiveResponse{Result: &partitionpb.Result{}}, nil
		case <-lead.Done():
			return nil, toStatus(g.checkLeader())
		case <-ctx.Done():
			return nil, toStatus(ctx.Err())
		}
	}
}

// reader is what the service reads from the leader's own state machine
// (its sessions: sessionReader, sessions.go).
type reader interface {
	Stats(entityID uint64, partition uint32) (*partitionpb.StatsResponse, error)
	GroupStats(refs []*partitionpb.EntityPartitionRef) ([]*partitionpb.EntityPartitionStats, error)
	PeekBounded(req *partitionpb.PeekRequest, nowMs int64) ([]*partitionpb.Message, error)
	Available(entityID uint64, partition uint32, q partitionpb.SubQueue) bool
	Changed(entityID uint64, partition uint32, q partitionpb.SubQueue) <-chan struct{}
	HasEntity(entityID uint64, partition uint32) bool
}

// available reports whether a Receive may find a message: in its session,
// for a session receiver.
func available(m interface {
	reader
	sessionReader
}, req *partitionpb.ReceiveRequest) bool {
	if len(req.SessionToken) > 0 {
		return m.SessionAvailable(req.EntityId, req.Partition, req.SessionId)
	}
	return m.Available(req.EntityId, req.Partition, req.SubQueue)
}

func lockCommand(req *partitionpb.ReceiveRequest) *partitionpb.Command {
	seed := make([]byte, 8)
	rand.Read(seed) // never fails (crypto/rand)
	c := &partitionpb.Command{Op: &partitionpb.Command_Lock{Lock: &partitionpb.Lock{
		EntityId:         req.EntityId,
		Partition:        req.Partition,
		SubQueue:         req.SubQueue,
		MaxCount:         req.MaxCount,
		ReceiveAndDelete: req.ReceiveAndDelete,
		TokenSeed:        seed,
		SessionId:        req.SessionId,
		SessionToken:     req.SessionToken,
	}}}
	if !req.ReceiveAndDelete {
		// Every Lock of this request, on any attempt, under one id: a
		// Lock that locked nothing records nothing, so waiting and
		// proposing again under it is safe (partition/requests.go).
		c.RequestId = req.RequestId
	}
	return c
}

func (s *service) Settle(ctx context.Context, req *partitionpb.SettleRequest) (*partitionpb.SettleResponse, error) {
	if req.Settle == nil {
		return nil, toStatus(fmt.Errorf("%w: Settle without settle", ErrInvalid))
	}
	res, err := s.propose1(ctx, req.GroupId, &partitionpb.Command{Op: &partitionpb.Command_Settle{Settle: req.Settle}, RequestId: req.RequestId})
	if err != nil {
		return nil, toStatus(err)
	}
	return &partitionpb.SettleResponse{Result: res}, nil
}

func (s *service) RenewLocks(ctx context.Context, req *partitionpb.RenewLocksRequest) (*partitionpb.RenewLocksResponse, error) {
	if req.Renew == nil {
		return nil, toStatus(fmt.Errorf("%w: RenewLocks without renew", ErrInvalid))
	}
	res, err := s.propose1(ctx, req.GroupId, &partitionpb.Command{Op: &partitionpb.Command_RenewLocks{RenewLocks: req.Renew}})
	if err != nil {
		return nil, toStatus(err)
	}
	return &partitionpb.RenewLocksResponse{Result: res}, nil
}

// reader returns the group if this node may answer a read from its own
// state machine: it leads, and a quorum has just confirmed that (raft's
// VerifyLeader). A leader cut off from its followers believes it leads
// until its lease runs out, and by then the others may have elected a
// leader that changed the state: without the confirmation it would answer
// from a state that is no longer the group's (a stale read).
func (s *service) reader(id uint64) (*group, error) {
	g, err := s.leader(id)
	if err != nil {
		return nil, err
	}
	if err := g.raft.VerifyLeader().Error(); err != nil {
		return nil, g.leaderError(err)
	}
	return g, nil
}

// counter returns the group if this node may answer a read of counters
// from its own state machine: it leads, and a quorum confirmed that
// within the read lease (readlease.go). A list of entities with their
// counts reads every group once a page (docs/performance.md) and so
// waits for no heartbeat round; its counts are stale by at most the
// lease, and only on a deposed leader.
func (s *service) counter(id uint64) (*group, error) {
	g, err := s.leader(id)
	if err != nil {
		return nil, err
	}
	if err := g.confirmLeadership(); err != nil {
		return nil, err
	}
	return g, nil
}

// Stats reads the leader's own state machine once its leadership is
// confirmed (counter): it has applied every entry of earlier terms, but
// an entry committed a moment ago may not show yet.
func (s *service) Stats(ctx context.Context, req *partitionpb.StatsRequest) (*partitionpb.StatsResponse, error) {
	g, err := s.counter(req.GroupId)
	if err != nil {
		return nil, toStatus(err)
	}
	st, err := g.machine.Stats(req.EntityId, req.Partition)
	if err != nil {
		return nil, toStatus(err)
	}
	return st, nil
}

// GroupStats reads many entity partitions' counters as Stats reads one,
// under one confirmation of leadership.
func (s *service) GroupStats(ctx context.Context, req *partitionpb.GroupStatsRequest) (*partitionpb.GroupStatsResponse, error) {
	g, err := s.counter(req.GroupId)
	if err != nil {
		return nil, toStatus(err)
	}
	es, err := g.machine.GroupStats(req.Entities)
	if err != nil {
		return nil, toStatus(err)
	}
	return &partitionpb.GroupStatsResponse{Entities: es}, nil
}

// Peek reads the leader's own state machine, like Stats, and locks
// nothing. Expiry is judged by the leader's clock; the answer keeps to the
// request's bounds in bytes (max_bytes, body_prefix_bytes).
func (s *service) Peek(ctx context.Context, req *partitionpb.PeekRequest) (*partitionpb.PeekResponse, error) {
	g, err := s.reader(req.GroupId)
	if err != nil {
		return nil, toStatus(err)
	}
	msgs, err := g.machine.PeekBounded(req, g.node.wallMs())
	if err != nil {
		return nil, toStatus(err)
	}
	return &partitionpb.PeekResponse{Messages: msgs}, nil
}

func (s *service) CancelScheduled(ctx context.Context, req *partitionpb.CancelScheduledRequest) (*partitionpb.CancelScheduledResponse, error) {
	if req.Cancel == nil {
		return nil, toStatus(fmt.Errorf("%w: CancelScheduled without cancel", ErrInvalid))
	}
	res, err := s.propose1(ctx, req.GroupId, &partitionpb.Command{Op: &partitionpb.Command_CancelScheduled{CancelScheduled: req.Cancel}})
	if err != nil {
		return nil, toStatus(err)
	}
	return &partitionpb.CancelScheduledResponse{Result: res}, nil
}

// ReceiveDeferred locks (or takes) deferred messages by sequence number. It
// does not wait: a deferred message is there or not.
func (s *service) ReceiveDeferred(ctx context.Context, req *partitionpb.ReceiveDeferredRequest) (*partitionpb.ReceiveDeferredResponse, error) {
	l := &partitionpb.LockBySequence{
		EntityId:         req.EntityId,
		Partition:        req.Partition,
		SubQueue:         req.SubQueue,
		SequenceNumbers:  req.SequenceNumbers,
		ReceiveAndDelete: req.ReceiveAndDelete,
		SessionId:        req.SessionId,
		SessionToken:     req.SessionToken,
	}
	c := &partitionpb.Command{Op: &partitionpb.Command_LockBySequence{LockBySequence: l}}
	if !req.ReceiveAndDelete {
		l.TokenSeed = make([]byte, 8)
		rand.Read(l.TokenSeed) // never fails (crypto/rand)
		c.RequestId = req.RequestId
	}
	res, err := s.propose1(ctx, req.GroupId, c)
	if err != nil {
		return nil, toStatus(err)
	}
	return &partitionpb.ReceiveDeferredResponse{Result: res}, nil
}

// Purge proposes one bounded Purge (issue 23); the caller loops.
func (s *service) Purge(ctx context.Context, req *partitionpb.PurgeRequest) (*partitionpb.PurgeResponse, error) {
	if req.Purge == nil {
		return nil, toStatus(fmt.Errorf("%w: Purge without purge", ErrInvalid))
	}
	res, err := s.propose1(ctx, req.GroupId, &partitionpb.Command{Op: &partitionpb.Command_Purge{Purge: req.Purge}})
	if err != nil {
		return nil, toStatus(err)
	}
	return &partitionpb.PurgeResponse{Result: res}, nil
}

// Redrive proposes one bounded Redrive (issue 23); the caller loops.
func (s *service) Redrive(ctx context.Context, req *partitionpb.RedriveRequest) (*partitionpb.RedriveResponse, error) {
	if req.Redrive == nil {
		return nil, toStatus(fmt.Errorf("%w: Redrive without redrive", ErrInvalid))
	}
	res, err := s.propose1(ctx, req.GroupId, &partitionpb.Command{Op: &partitionpb.Command_Redrive{Redrive: req.Redrive}})
	if err != nil {
		return nil, toStatus(err)
	}
	return &partitionpb.RedriveResponse{Result: res}, nil
}
