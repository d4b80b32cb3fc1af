package frontend

import (
	"context"
	"strings"
	"sync/atomic"

	"github.com/quorumbus/quorumbus/frontend/amqp"
	"github.com/quorumbus/quorumbus/placement/credits"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// Credit-based throttling, as Service Bus Standard does it (seed 003;
// the budget itself is placement/credits, shared with the gateway): the
// namespace has a budget of credits a second; a message sent, received,
// peeked or scheduled costs 1, a rule operation 10 (managementCost), and
// a message sent to a topic 1 more per filter it is evaluated against; the budget refills each second. A
// throttled send or management operation fails with server-busy, which
// the SDKs retry with their backoff (nothing was stored); a throttled
// receiver waits for the next second instead.
//
// Front-ends are stateless and several serve one namespace beside its
// admin API's gateways: each enforces its share of the one budget
// (Config.ThrottleShare, placement/credits.Spenders). That is exact while
// the clients spread evenly over the front-ends; one front-end's clients
// cannot borrow the share of an idle one.

// FilterCounter is what a Backend may tell of a topic for throttling: how
// many filters (rules, over all its subscriptions) each message sent to
// it is evaluated against. A Backend without it makes topic sends cost
// what queue sends do.
type FilterCounter interface {
	Filters(topic string) int
}

// sendCost is what sending n messages to e costs: 1 each, and on a topic
// 1 more per filter each is evaluated against (seed 003).
func (s *Server) sendCost(e *placementpb.Entity, n int) int64 {
	cost := int64(n)
	if e.Kind == placementpb.EntityKind_ENTITY_KIND_TOPIC {
		if fc, ok := s.cfg.Backend.(FilterCounter); ok {
			cost += int64(n) * int64(fc.Filters(e.Name))
		}
	}
	return cost
}

const (
	condServerBusy amqp.Symbol = "com.microsoft:server-busy"
	// ruleOperationCost is what a management operation proper costs
	// (seed 003: create, read, update, delete of entities and filters).
	ruleOperationCost = credits.Management
)

// managementCost is what a $management operation on e costs before it
// runs (seed 003: data operations 1 a message, management operations 10):
// a schedule what sending its messages does; settling, renewing a lock,
// cancelling a schedule and the session operations 1; the rule
// operations 10. Peek and receive-by-sequence-number cost nothing up
// front, only credits left, and are charged 1 a message they return once
// they know (as a receive is).
func (s *Server) managementCost(e *placementpb.Entity, op string, messages int) int64 {
	switch op {
	case "com.microsoft:peek-message", "com.microsoft:receive-by-sequence-number":
		return 0
	case "com.microsoft:schedule-message":
		return s.sendCost(e, max(messages, 1))
	case "com.microsoft:add-rule", "com.microsoft:remove-rule", "com.microsoft:enumerate-rules":
		return ruleOperationCost
	}
	return 1
}

// failBusy's words are Service Bus's; describe adds the full stop.
var failBusy = failure{condServerBusy, 503, true, strings.TrimSuffix(credits.ThrottledText, ".")}

// Resource-based throttling, as Service Bus Premium does it (no credits):
// a send or a schedule is refused with the same server-busy when the
// front-end's pending work would pass Config.MaxPendingSends: the
// messages links have queued for their workers and partition requests
// have in flight, from when a link queues them (or a schedule is
// admitted) until they are stored or refused, or their link or
// connection ends. Partition leaders that fall behind (a long
// proposal queue, slow disks) keep requests in flight longer, so the
// bound is reached when the partitions, not the clients, are the limit.
// A request larger than the bound passes when nothing else is in flight.
//
// Partition leaders bound their own proposal queues (a storage node's
// MaxQueuedSendBytes) and refuse a send past it before proposing it; the
// router reports that as ErrServerBusy, and the client gets the same
// server-busy, with credits or without.

// throttle is this front-end's share of the namespace's credits
// (placement/credits) and its bound of pending sends. A nil throttle
// never throttles.
type throttle struct {
	credits    *credits.Bucket
	maxPending int64        // bound of pending; 0: none
	pending    atomic.Int64 // messages queued by links or in flight to partitions
}

// newThrottle returns a throttle even when it has neither credits nor a
// bound: it still counts the sends that partition leaders refused as
// busy (refused).
func newThrottle(budget int64, share func() float64, maxPending int) *throttle {
	return &throttle{credits: credits.New(credits.Config{Budget: budget, Share: share}), maxPending: int64(max(maxPending, 0))}
}

// admit reserves n messages of pending work for entity under the pending
// bound and reports whether it may go ahead; a refusal is counted against
// the entity. What it admitted is given back with inFlight(-n) once
// sent, refused or dropped. Without a bound it only counts.
func (t *throttle) admit(entity string, n int) bool {
	if t == nil {
		return true
	}
	for {
		p := t.pending.Load()
		if t.maxPending > 0 && p > 0 && p+int64(n) > t.maxPending {
			t.refused(entity)
			return false
		}
		if t.pending.CompareAndSwap(p, p+int64(n)) {
			return true
		}
	}
}

// refused counts a request for entity refused as server-busy outside the
// credits: by the pending bound, or by a partition leader whose proposal
// queue was full (ErrServerBusy).
func (t *throttle) refused(entity string) {
	if t != nil {
		t.credits.Count(entity)
	}
}

// inFlight adds n (negative: gives back) messages of pending work without
// checking the bound: pre-settled sends, which are never refused.
func (t *throttle) inFlight(n int) {
	if t != nil {
		t.pending.Add(int64(n))
	}
}

// take spends cost credits for an operation on entity and reports whether
// it may go ahead; a refusal is counted against the entity.
func (t *throttle) take(entity string, cost int64) bool {
	return t == nil || t.credits.Take(entity, cost)
}

// charge spends credits already used (messages a receive returned).
func (t *throttle) charge(cost int64) {
	if t != nil {
		t.credits.Charge(cost)
	}
}

// wait blocks until credits are left (counting the wait once against
// entity) or ctx ends.
func (t *throttle) wait(ctx context.Context, entity string) error {
	if t == nil {
		return nil
	}
	return t.credits.Wait(ctx, entity)
}

// counts returns the throttled requests per entity.
func (t *throttle) counts() map[string]uint64 {
	if t == nil {
		return map[string]uint64{}
	}
	return t.credits.Throttled()
}
