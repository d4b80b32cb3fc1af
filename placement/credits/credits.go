// Package credits is a namespace's credit budget, as Service Bus Standard
// throttles (seed 003): the namespace has a number of credits a second;
// every operation spends some (Message, Management); past them requests
// are refused until the next second refills them. The AMQP front-end
// (frontend/throttle.go) and the admin API's gateway (gateway/throttle.go)
// spend from a Bucket each, or share one in a process that runs both;
// separate processes each spend their share of the one budget (Spenders).
//
// It reads only the clock it is given, so it is as deterministic as
// that clock; it knows nothing of the protocols that spend it.
package credits

import (
	"context"
	"maps"
	"math"
	"sync"
	"time"
)

// What operations cost (seed 003).
const (
	// Message is what a message sent, received or peeked costs, and what
	// a topic's filter costs each time a message sent to it is evaluated
	// against it.
	Message = 1
	// Management is what a management operation costs: a create, read,
	// update or delete of a queue, topic, subscription or rule (filter),
	// or a page of a list of them.
	Management = 10
)

// ThrottledText is Service Bus's answer to a throttled request (seed
// 003), which the SDKs retry as server-busy. Callers add a tracking id.
const ThrottledText = "The request was terminated because the entity is being throttled. Error code: 50009. Please wait 2 seconds and try again."

// PerSecondHelp describes Bucket.PerSecond as the processes that spend
// credits export it (quorumbus_throttle_credits_per_second).
const PerSecondHelp = "Credits a second this process admits: its share of the namespace's budget, which it shares with the live front-ends and gateways (0: no credits)."

// MaxCounted bounds the entities whose throttled requests are counted one
// by one (the namespace's limit of 10,000 entities twice over, for names
// gone and made anew); past it they are counted as Other.
const MaxCounted = 20_000

// Other is the entity the throttled requests past MaxCounted count
// against.
const Other = "(other)"

// Config configures a Bucket. The zero value never throttles.
type Config struct {
	// Budget is the namespace's credits a second. Zero or negative: no
	// credits, nothing is throttled (throttled requests are still counted
	// when the caller refuses them for reasons of its own: Count).
	Budget int64
	// Share returns the part of Budget this bucket spends, in (0, 1]
	// (Spenders: the shares of all the namespace's front-ends and
	// gateways add up to 1). Nil: the whole budget.
	Share func() float64
	// Now is the clock seconds are counted by. Default time.Now (which
	// testing/synctest makes virtual).
	Now func() time.Time
}

// Bucket is a share of a namespace's credits. Its methods are safe for
// concurrent use; a nil *Bucket never throttles and counts nothing.
type Bucket struct {
	budget int64
	share  func() float64
	now    func() time.Time

	mu        sync.Mutex
	second    int64 // the Unix second left was last refilled in
	left      int64 // may go below zero: an operation larger than what is left passes once and is paid back
	throttled map[string]uint64
}

// New returns a Bucket.
func New(cfg Config) *Bucket {
	b := &Bucket{budget: max(cfg.Budget, 0), share: cfg.Share, now: cfg.Now, throttled: map[string]uint64{}}
	if b.share == nil {
		b.share = func() float64 { return 1 }
	}
	if b.now == nil {
		b.now = time.Now
	}
	return b
}

// Limited reports whether the bucket has credits to enforce.
func (b *Bucket) Limited() bool { return b != nil && b.budget > 0 }

// PerSecond is this bucket's share of the budget, rounded down (so that
// the shares add up to no more than the budget) but at least 1; 0 without
// credits.
func (b *Bucket) PerSecond() int64 {
	if !b.Limited() {
		return 0
	}
	share := min(b.share(), 1)
	// The nudge keeps a share such as 0.9 of 1000, which float64 may
	// make 899.99..., from losing a credit to rounding.
	return max(int64(math.Floor(float64(b.budget)*share+1e-9)), 1)
}

// refillLocked adds a second's share for every second passed, up to one
// second's worth: credits do not pile up while the namespace is idle.
func (b *Bucket) refillLocked() {
	now := b.now().Unix()
	if now == b.second {
		return
	}
	per := b.PerSecond()
	elapsed := now - b.second
	if b.second == 0 || elapsed > 1<<20 || elapsed < 0 {
		elapsed = 1 << 20
	}
	b.left = min(b.left+elapsed*per, per)
	b.second = now
}

// Take spends cost credits for an operation on entity and reports whether
// it may go ahead: it may while any credit is left this second, so an
// operation that costs more than is left passes once and is paid back
// from the next seconds. A refusal is counted against entity.
func (b *Bucket) Take(entity string, cost int64) bool {
	if !b.Limited() {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refillLocked()
	if b.left <= 0 {
		b.countLocked(entity)
		return false
	}
	b.left -= cost
	return true
}

// Charge spends credits already used (messages a receive returned),
// without refusing anything.
func (b *Bucket) Charge(cost int64) {
	if !b.Limited() || cost == 0 {
		return
	}
	b.mu.Lock()
	b.refillLocked()
	b.left -= cost
	b.mu.Unlock()
}

// Wait blocks until credits are left (counting the wait once against
// entity) or ctx ends, and returns ctx's error then.
func (b *Bucket) Wait(ctx context.Context, entity string) error {
	if !b.Limited() {
		return nil
	}
	counted := false
	for {
		b.mu.Lock()
		b.refillLocked()
		ok := b.left > 0
		if !ok && !counted {
			b.countLocked(entity)
			counted = true
		}
		next := time.Unix(b.second+1, 0)
		b.mu.Unlock()
		if ok {
			return nil
		}
		timer := time.NewTimer(next.Sub(b.now()))
		select {
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return ctx.Err()
		}
	}
}

// Count counts a request for entity that its caller refused as throttled
// outside the credits (a bound of pending work, a busy partition leader),
// with credits or without.
func (b *Bucket) Count(entity string) {
	if b != nil {
		b.mu.Lock()
		b.countLocked(entity)
		b.mu.Unlock()
	}
}

func (b *Bucket) countLocked(entity string) {
	if _, ok := b.throttled[entity]; !ok && len(b.throttled) >= MaxCounted {
		entity = Other
	}
	b.throttled[entity]++
}

// Throttled returns the throttled requests per entity since the bucket
// was made.
func (b *Bucket) Throttled() map[string]uint64 {
	if b == nil {
		return map[string]uint64{}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return maps.Clone(b.throttled)
}
