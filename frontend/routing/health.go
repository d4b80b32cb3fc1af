package routing

import (
	"context"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quorumbus/quorumbus/proto/partitionpb"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// What the router saw of each group's leader.
//
// The catalog records a group without quorum a few seconds after it lost
// it (placement's reports and GroupSilence); the router sees it first, in
// the answers of its own calls: a node that does not answer, or answers
// that it is no leader and knows none. It notes when a group last failed
// so and when a call to it last succeeded, and Serving passes over a
// group whose last failure is the newer, for failedFor: unkeyed sends
// then avoid it before the catalog says so. A success (of any call)
// clears it, and so does time, so that a group that recovered with no
// call to show it gets unkeyed sends again.

// failedFor is how long a group whose calls failed counts as not serving,
// unless a call succeeds first. Longer than the catalog takes to record a
// group without quorum (about five seconds), so that the two overlap.
const failedFor = 10 * time.Second

// leaderHealth is, per group, when a call last failed for want of an
// answering leader and when one last succeeded. Safe for concurrent use.
type leaderHealth struct {
	mu        sync.Mutex
	failed    map[uint64]time.Time
	succeeded map[uint64]time.Time
}

// noted records the outcome of an attempt (or a call) at group: success
// when err is nil, a failure when err says no leader answered.
func (h *leaderHealth) noted(group uint64, err error, now time.Time) {
	if err != nil && !leaderless(err) {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if err == nil {
		if h.succeeded == nil {
			h.succeeded = map[uint64]time.Time{}
		}
		h.succeeded[group] = now
		return
	}
	if h.failed == nil {
		h.failed = map[uint64]time.Time{}
	}
	h.failed[group] = now
}

// answering reports whether group has not failed since its last success,
// or not within failedFor of now.
func (h *leaderHealth) answering(group uint64, now time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	failed, ok := h.failed[group]
	if !ok || now.Sub(failed) >= failedFor {
		return true
	}
	return h.succeeded[group].After(failed)
}

// leaderless reports whether an attempt's error (or the last attempt's,
// of a call that gave up) says the group had no leader that answered: the
// node did not answer (UNAVAILABLE, DEADLINE_EXCEEDED), or it is no
// leader and names none. A refusal that names a leader is a leader change
// the call follows, a rule's answer (not found, a quota) is the group
// serving, and a call its caller cancelled says nothing of the group.
func leaderless(err error) bool {
	st, _ := status.FromError(err) // sees through groupcall.GaveUp
	switch st.Code() {
	case codes.Unavailable, codes.DeadlineExceeded:
		return true
	case codes.FailedPrecondition:
		for _, d := range st.Details() {
			if h, ok := d.(*partitionpb.LeaderHint); ok {
				return h.LeaderId == ""
			}
		}
	}
	return false
}

// Serving implements frontend.Backend: the routing table records the
// group of the entity's partition with a quorum, and the router's own
// calls to it did not fail for want of a leader since the last that
// succeeded (within failedFor).
func (r *Router) Serving(e *placementpb.Entity, partition uint32) bool {
	if int(partition) >= len(e.PartitionGroups) {
		return false
	}
	group := e.PartitionGroups[partition]
	r.mu.RLock()
	var g *placementpb.Group
	if r.table != nil {
		g = r.table.groups[group]
	}
	r.mu.RUnlock()
	return g != nil && g.HasQuorum && r.health.answering(group, time.Now())
}

// SendOnce implements frontend.OnceSender: Send, but each replica of the
// group is tried once (its leader, the one a refusal names, the others),
// and the call gives up at once, frontend.ErrUnavailable, when none took
// the request.
func (r *Router) SendOnce(ctx context.Context, e *placementpb.Entity, partition uint32, msgs []*partitionpb.NewMessage) (*partitionpb.Result, error) {
	return r.send(ctx, e, partition, msgs, true)
}
