package placement

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quorumbus/quorumbus/placement/catalog"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

var (
	ErrNotLeader      = errors.New("placement: not the meta leader")
	ErrNoLeader       = errors.New("placement: no meta leader known")
	ErrOutcomeUnknown = errors.New("placement: leadership lost while the change was in flight; it may or may not have been applied")
	ErrNoGroups       = errors.New("placement: no partition groups yet (waiting for enough storage nodes)")
	ErrNotRunning     = errors.New("placement: not running")
	// ErrCatchingUp: the member has not applied the catalog as of its
	// start (or, as a new leader, of its election) yet; another member, or
	// this one a moment later, can answer.
	ErrCatchingUp = errors.New("placement: catching up with the meta log")
	// ErrOrphaned: this member has heard from no meta leader for long
	// (orphan.go); its catalog may be frozen, so ask another member.
	ErrOrphaned = errors.New("placement: no word from a meta leader for long; ask another member")
	// ErrInvalidRequest: a request whose fields do not go together.
	ErrInvalidRequest = errors.New("placement: invalid request")
)

// grpcCodes is the one table from our errors to gRPC codes; the first
// entry that matches wins.
var grpcCodes = []struct {
	err  error
	code codes.Code
}{
	{catalog.ErrNameTaken, codes.AlreadyExists},
	{catalog.ErrNotFound, codes.NotFound},
	{catalog.ErrTooManyEntities, codes.ResourceExhausted},
	{catalog.ErrTooManyPartitioned, codes.ResourceExhausted},
	{catalog.ErrInvalidName, codes.InvalidArgument},
	{catalog.ErrInvalidProperties, codes.InvalidArgument},
	{catalog.ErrInvalidRule, codes.InvalidArgument},
	{catalog.ErrRuleNameTaken, codes.AlreadyExists},
	{catalog.ErrRuleNotFound, codes.NotFound},
	{catalog.ErrInvalidAuthRule, codes.InvalidArgument},
	{catalog.ErrAuthRuleExists, codes.AlreadyExists},
	{catalog.ErrAuthRuleNotFound, codes.NotFound},
	{catalog.ErrTooManyAuthRules, codes.ResourceExhausted},
	// The plan was made against a catalog that changed before it applied;
	// trying again plans afresh.
	{catalog.ErrConflict, codes.Aborted},
	{catalog.ErrUnknownGroup, codes.Aborted},
	{catalog.ErrUnknownNode, codes.Aborted},
	{catalog.ErrInvalidCommand, codes.Internal},
	{catalog.ErrStopped, codes.Unavailable},
	{ErrInvalidRequest, codes.InvalidArgument},
	{ErrNotLeader, codes.FailedPrecondition},
	{ErrNoLeader, codes.Unavailable},
	{ErrOutcomeUnknown, codes.Unavailable},
	{ErrNoGroups, codes.Unavailable},
	{ErrNotRunning, codes.Unavailable},
	{ErrCatchingUp, codes.Unavailable},
	{ErrOrphaned, codes.Unavailable},
	{context.DeadlineExceeded, codes.DeadlineExceeded},
	{context.Canceled, codes.Canceled},
}

// toStatus turns an error of this package or of catalog into a gRPC status
// error.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	for _, e := range grpcCodes {
		if errors.Is(err, e.err) {
			return status.Error(e.code, err.Error())
		}
	}
	return status.Error(codes.Internal, err.Error())
}

// notLeaderStatus is the answer of a member that is not the meta leader and
// does not forward: FAILED_PRECONDITION with a MetaLeaderHint.
func notLeaderStatus(hint *placementpb.MetaLeaderHint) error {
	st := status.New(codes.FailedPrecondition, ErrNotLeader.Error())
	if hint.LeaderId == "" {
		st = status.New(codes.Unavailable, ErrNoLeader.Error())
	}
	if withHint, err := st.WithDetails(hint); err == nil {
		st = withHint
	}
	return st.Err()
}
