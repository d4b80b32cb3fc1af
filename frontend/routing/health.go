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
// so, and Serving passes over that group for failedFor: unkeyed sends
// then avoid it before the catalog says so. A success (of any call)
// clears it, and so does time, so that a group that recovered with no
// call to show it gets unkeyed sends again.

// failedFor is how long a group whose calls failed counts as not serving,
// unless a call succeeds first. Longer than the catalog takes to record a
// group without quorum (about five seconds), so that the two overlap.
const failedFor = 10 * time.Second

// leaderHealth is, per group, when a call last failed for want of an
// answering leader, until a call to it succeeds. Safe for concurrent use;
// a success, every call's outcome, takes only the read lock unless it
// clears a failure.
type leaderHealth struct {
	mu     sync.RWMutex
	failed map[uint64]time.Time
}

// noted records the outcome of an attempt (or a call) at group: a success
// when err is nil, which clears a failure, and a failure when err says no
// leader answered. A success of a call that began before the failure
// clears it too: the group took a request since it failed.
func (h *leaderHealth) noted(group uint64, err error, now time.Time) {
	if err == nil {
		h.mu.RLock()
		_, failed := h.failed[group]
		h.mu.RUnlock()
		if failed {
			h.mu.Lock()
			delete(h.failed, group)
			h.mu.Unlock()
		}
		return
	}
	if !leaderless(err) {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.failed == nil {
		h.failed = map[uint64]time.Time{}
	}
	h.failed[group] = now
}

// answering reports whether group has not failed since a call to it last
// succeeded, or not within failedFor of now.
func (h *leaderHealth) answering(group uint64, now time.Time) bool {
	h.mu.RLock()
	defer h.mu.RUnlock()
	failed, ok := h.failed[group]
	return !ok || now.Sub(failed) >= failedFor
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
