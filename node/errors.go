package node

import (
	"context"
	"errors"
	"fmt"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quorumbus/quorumbus/partition"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

var (
	ErrGroupNotFound  = errors.New("node: group not found")
	ErrNotLeader      = errors.New("node: not the group's leader")
	ErrLeaderNotReady = errors.New("node: leader has not yet applied its predecessors' entries")
	ErrGroupFailed    = errors.New("node: group stopped after a storage failure")
	ErrGroupClosed    = errors.New("node: group closed")
	ErrClosed         = errors.New("node: closed")
	ErrTooLarge       = errors.New("node: request too large")
	ErrInvalid        = errors.New("node: invalid request")
	// ErrReplicaBehind refuses to hand the leadership to a replica that
	// has not caught up with the leader's log.
	ErrReplicaBehind = errors.New("node: replica behind the leader")
	// ErrNoSpace: the node's disk is full, or down to the reserve it
	// keeps for settles; requests that add messages are refused until
	// space is freed.
	ErrNoSpace = errors.New("node: no space left on the data directory's disk")
	// ErrBusy: the group's leader has more sends queued for its proposer
	// than Config.MaxQueuedSendBytes; the send was not proposed.
	ErrBusy = errors.New("node: proposal queue full")
)

// statusCodes is the one table from errors to gRPC codes at the
// PartitionService boundary; the first entry that matches (errors.Is) wins,
// and anything unmatched is Internal.
//
// Two kinds of failure carry a status detail that a caller should look at
// rather than the code alone:
//   - not the leader: FailedPrecondition with a partitionpb.LeaderHint
//     (leader id and address, empty when unknown);
//   - a rule of the state machine (entity not found, quota, ...), for the
//     calls whose response has no Result field: the partitionpb.Result.
//
// A NotFound without a Result detail means the node does not host the group;
// a ResourceExhausted without one, that its disk is full (ErrNoSpace) or
// that its proposal queue is (ErrBusy, whose message holds BusyText).
// Unavailable means "try again, maybe elsewhere"; after
// raft.ErrLeadershipLost the request may or may not have been applied.
var statusCodes = []struct {
	err  error
	code codes.Code
}{
	{ErrGroupNotFound, codes.NotFound},
	{ErrNotLeader, codes.FailedPrecondition},
	{raft.ErrNotLeader, codes.FailedPrecondition},
	{ErrLeaderNotReady, codes.Unavailable},
	{raft.ErrLeadershipLost, codes.Unavailable},
	{raft.ErrLeadershipTransferInProgress, codes.Unavailable},
	{raft.ErrAbortedByRestore, codes.Unavailable},
	{raft.ErrRaftShutdown, codes.Unavailable},
	{raft.ErrEnqueueTimeout, codes.Unavailable},
	{ErrNoSpace, codes.ResourceExhausted},
	{ErrBusy, codes.ResourceExhausted},
	{ErrGroupFailed, codes.Unavailable},
	{ErrGroupClosed, codes.Unavailable},
	{ErrClosed, codes.Unavailable},
	{partition.ErrClosed, codes.Unavailable},
	{ErrTooLarge, codes.InvalidArgument},
	{ErrInvalid, codes.InvalidArgument},
	{ErrReplicaBehind, codes.FailedPrecondition},
	{partition.ErrEntityNotFound, codes.NotFound},
	{partition.ErrLockLost, codes.Aborted},
	{partition.ErrQuotaExceeded, codes.ResourceExhausted},
	{partition.ErrEntityDisabled, codes.FailedPrecondition},
	{partition.ErrInvalid, codes.InvalidArgument},
	{context.Canceled, codes.Canceled},
	{context.DeadlineExceeded, codes.DeadlineExceeded},
}

// notLeaderError is ErrNotLeader with the hint a client needs to find the
// leader.
type notLeaderError struct {
	hint *partitionpb.LeaderHint
}

func (e *notLeaderError) Error() string {
	if e.hint.LeaderId == "" {
		return fmt.Sprintf("%v of group %d; the leader is unknown", ErrNotLeader, e.hint.GroupId)
	}
	return fmt.Sprintf("%v of group %d; the leader is %s at %s", ErrNotLeader, e.hint.GroupId, e.hint.LeaderId, e.hint.LeaderAddr)
}

func (e *notLeaderError) Unwrap() error { return ErrNotLeader }

// toStatus turns an error into the gRPC status the client sees.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	code := codes.Internal
	for _, c := range statusCodes {
		if errors.Is(err, c.err) {
			code = c.code
			break
		}
	}
	st := status.New(code, err.Error())
	var detail *partitionpb.LeaderHint
	var nl *notLeaderError
	if errors.As(err, &nl) {
		detail = nl.hint
	}
	if detail != nil {
		if withHint, derr := st.WithDetails(detail); derr == nil {
			st = withHint
		}
	} else if rc, ok := partition.Code(err); ok && rc != partitionpb.ResultCode_RESULT_OK {
		if withResult, derr := st.WithDetails(&partitionpb.Result{Code: rc, Description: err.Error()}); derr == nil {
			st = withResult
		}
	}
	return st.Err()
}
