package placement

import (
	"context"
	"sync"
	"time"

	"github.com/quorumbus/quorumbus/placement/catalog"
	pb "github.com/quorumbus/quorumbus/proto/placementpb"
)

// Group health and Degraded entities.
//
// A storage node reports, every second, the groups it leads and whether
// each can serve (it leads with a quorum behind it), and the groups it
// holds a replica of that have known no leader for two election timeouts
// (node/agent). A group that lost its quorum has no leader, so no leader
// reports it; its surviving replicas say so, and the meta leader records
// it without quorum at once, unless it heard the group serving since that
// replica lost its leader (the replica is the one cut off). Every entity
// with a partition in such a group reads Degraded (catalog.State marks the
// copies it hands out); the first serving report afterwards records the
// group healthy again, and the entity Active.
//
// When no replica survives to report, silence is the signal: the meta
// leader notes when it last heard a serving report of each group
// (groupHealth, in memory), and its control loop records a group silent
// for Config.GroupSilence as without quorum.
//
// The times are the leader's own, never in the catalog: a new leader
// starts every group's clock at its first round, which gives each group a
// whole GroupSilence to be heard from before it is judged silent. A
// replica's report of no leader needs no clock of the leader's: a new
// leader takes it at once, which is what keeps a group that lost its
// quorum together with the meta leader Degraded within 5 s (election,
// two of the group's election timeouts, a report). A replica cut off from
// a serving leader that reports to a new meta leader before that leader
// does makes the group read Degraded until the leader's next report.

// groupHealth is when the meta leader last heard each group report itself
// serving.
type groupHealth struct {
	mu    sync.Mutex
	heard map[uint64]time.Time
	since time.Time // the start of this leadership: the floor of every time
}

func newGroupHealth() *groupHealth { return &groupHealth{heard: map[uint64]time.Time{}} }

// reset starts a leadership at now: every group counts as heard now.
func (h *groupHealth) reset(now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	clear(h.heard)
	h.since = now
}

// serving notes a report that the group serves.
func (h *groupHealth) serving(group uint64, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.heard[group] = now
}

// servedAfter reports whether the group was heard serving after t in this
// leadership.
func (h *groupHealth) servedAfter(group uint64, t time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	heard, ok := h.heard[group] // reset cleared those of earlier leaderships
	return ok && heard.After(t)
}

// silentSince returns when the group was last heard serving, or the start
// of the leadership if it was not heard since.
func (h *groupHealth) silentSince(group uint64) time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	if t, ok := h.heard[group]; ok && t.After(h.since) {
		return t
	}
	return h.since
}

// markSilentGroups records as without quorum every group the catalog
// holds healthy that was not heard serving for GroupSilence.
func (s *Service) markSilentGroups(ctx context.Context) {
	now := time.Now()
	var silent []*pb.GroupReport
	s.fsm.Read(func(st *catalog.State) {
		for _, g := range st.Groups() {
			if g.HasQuorum && now.Sub(s.health.silentSince(g.Id)) >= s.cfg.GroupSilence {
				silent = append(silent, &pb.GroupReport{GroupId: g.Id, HasQuorum: false})
			}
		}
	})
	if len(silent) == 0 {
		return
	}
	for _, g := range silent {
		s.log.Warn("partition group silent: marking it without quorum and its entities degraded", "group", g.GroupId, "silent_for", s.cfg.GroupSilence)
	}
	if _, err := s.propose(ctx, &pb.CatalogCommand{Op: &pb.CatalogCommand_ReportGroups{ReportGroups: &pb.ReportGroupsRequest{Groups: silent}}}); err != nil && ctx.Err() == nil {
		s.log.Warn("recording silent groups", "err", err)
	}
}
