// Package groupcall calls the leader of a partition group: the one
// leader-following client of the services a storage node serves per group
// (PartitionService, GroupMembership), shared by the front-end's router
// (frontend/routing), placement's control loop and the node tests
// (node/nodetest).
//
// A call goes to the node believed to lead the group: the one that last
// answered as its leader, else the leader the caller was told of (the
// routing table's), else the replicas in turn. A node that is not the
// leader answers FAILED_PRECONDITION with a partitionpb.LeaderHint, and the
// next attempt goes straight to the node it names; a node that does not
// answer (UNAVAILABLE, DEADLINE_EXCEEDED, CANCELED) is passed over until a
// replica names it the leader again. Other answers end the call.
//
// It lives in proto/ because each of its users may import proto/ and none
// may import the others' packages (tests/arch).
package groupcall

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quorumbus/quorumbus/proto/partitionpb"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// Defaults of Config.
const (
	DefaultBackoff    = 10 * time.Millisecond
	DefaultMaxBackoff = 500 * time.Millisecond
)

// Config configures a Caller of clients of type C.
type Config[C any] struct {
	// Group returns what the caller knows of a group now: its replicas
	// and the leader it was told of (LeaderId); nil when it knows no such
	// group. It is read before every attempt, because a routing table
	// may change during a call. Required.
	Group func(id uint64) *placementpb.Group
	// Addr returns a node's gRPC address, "" when unknown; a leader hint's
	// own address stands in for an unknown one. Required.
	Addr func(nodeID string) string
	// Dial returns the client of a node. An error ends the call: it means
	// the caller cannot dial at all (closed), not that the node is down.
	// Required.
	Dial func(nodeID, addr string) (C, error)
	// AttemptTimeout bounds one attempt at a node, so that a node that
	// does not answer (dead, paused, cut off) costs a retry rather than the
	// caller's whole deadline; 0 lets the attempt take the whole deadline.
	// nil: 0 for every node. The router gives nodes in its own process 0:
	// they cannot be cut off from it, and a slow one is better waited for
	// than sent the request again.
	AttemptTimeout func(nodeID string) time.Duration
	// Backoff is the first wait before an attempt that follows a failure
	// without a leader hint; each wait doubles up to MaxBackoff, plus up
	// to as much again at random, so that callers do not retry in step.
	// 0: DefaultBackoff and DefaultMaxBackoff.
	Backoff, MaxBackoff time.Duration
	// OneRound ends a call once every replica was tried (each at most
	// once, a hinted leader included), returning GaveUp, instead of going
	// on until the context ends; attempts then follow one another without
	// a wait. Placement's control loop sets it: it retries a failed task
	// itself, with its own backoff, after reading the task again (an
	// update or delete may have replaced it meanwhile).
	OneRound bool
	// Leaders remembers which node answered as each group's leader. Two
	// callers of the same groups (placement's PartitionService and
	// GroupMembership clients) may share one; nil: the caller's own.
	Leaders *Leaders
	// OnRetry, if set, is called before every attempt after a call's
	// first, with the error that made it necessary.
	OnRetry func(group uint64, err error)
}

// CallOptions adjust one call.
type CallOptions struct {
	// Extra lengthens each attempt's timeout (when it has one): a
	// long-poll's wait, or the time to carry a large request.
	Extra time.Duration
	// RetryNotFound reports whether a NOT_FOUND answer is worth another
	// attempt; nil: NOT_FOUND ends the call. A node that does not host the
	// group answers it, and so does a partition that does not know an
	// entity yet; both are passing while a creation or a move settles.
	RetryNotFound func(*status.Status) bool
	// OneRound is Config.OneRound for this call: it ends, GaveUp, once
	// every replica was tried, without waits between the attempts. The
	// front-end sends an unkeyed message so, to move it to another
	// partition when this one's group has no leader that answers.
	OneRound bool
}

// GaveUp is the error of a call that ended without an answer: its context
// ended, or (Config.OneRound) every replica was tried. Last is the last
// attempt's error; errors.Is and status.Code see through to it.
type GaveUp struct {
	Group uint64
	Last  error
}

func (e *GaveUp) Error() string { return fmt.Sprintf("group %d: %v", e.Group, e.Last) }
func (e *GaveUp) Unwrap() error { return e.Last }

// Replica is a node as a call reaches it.
type Replica struct {
	ID   string
	Addr string // from the leader hint that named it; Config.Addr's wins
}

// Leaders remembers, per group, the node that last answered as its leader
// or that a replica named the leader. The zero value is ready to use; it
// is safe for concurrent use.
type Leaders struct {
	mu sync.Mutex
	m  map[uint64]Replica
}

// Get returns the node remembered as group's leader.
func (l *Leaders) Get(group uint64) (Replica, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r, ok := l.m[group]
	return r, ok
}

// Set remembers r as group's leader; an r without an ID forgets it.
func (l *Leaders) Set(group uint64, r Replica) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r.ID == "" {
		delete(l.m, group)
		return
	}
	if l.m == nil {
		l.m = map[uint64]Replica{}
	}
	l.m[group] = r
}

// Caller makes calls on group leaders through clients of type C. It is
// safe for concurrent use.
type Caller[C any] struct {
	cfg     Config[C]
	leaders *Leaders
}

// New returns a Caller; it panics if a required function is missing (a
// wiring mistake, not a runtime condition).
func New[C any](cfg Config[C]) *Caller[C] {
	if cfg.Group == nil || cfg.Addr == nil || cfg.Dial == nil {
		panic("groupcall: Config needs Group, Addr and Dial")
	}
	if cfg.Backoff <= 0 {
		cfg.Backoff, cfg.MaxBackoff = DefaultBackoff, DefaultMaxBackoff
	}
	cfg.MaxBackoff = max(cfg.MaxBackoff, cfg.Backoff)
	l := cfg.Leaders
	if l == nil {
		l = &Leaders{}
	}
	return &Caller[C]{cfg: cfg, leaders: l}
}

// Leaders returns the caller's record of group leaders.
func (c *Caller[C]) Leaders() *Leaders { return c.leaders }

// Call runs op against the leader of group until op succeeds, an answer
// ends the call (returned as op returned it), or the call gives up
// (*GaveUp). op may run several times, on several nodes: a request it
// sends must be safe to repeat (the partition's request ids make sends,
// locks and settles so).
func (c *Caller[C]) Call(ctx context.Context, group uint64, o CallOptions, op func(context.Context, C) error) error {
	backoff := c.cfg.Backoff
	var (
		lastErr error
		silent  string          // the last node that did not answer in time, or at all
		tried   map[string]bool // OneRound: the nodes tried
	)
	oneRound := c.cfg.OneRound || o.OneRound
	if oneRound {
		tried = map[string]bool{}
	}
	for attempt := 0; ; attempt++ {
		if attempt > 0 && c.cfg.OnRetry != nil {
			c.cfg.OnRetry(group, lastErr)
		}
		r, ok := c.target(group, attempt, silent, tried)
		switch {
		case !ok && oneRound:
			if lastErr == nil {
				lastErr = noReplicas(group)
			}
			return &GaveUp{Group: group, Last: lastErr}
		case r.Addr == "":
			lastErr = noReplicas(group)
			if tried != nil {
				tried[r.ID] = true
			}
		default:
			if tried != nil {
				tried[r.ID] = true
			}
			err := c.attempt(ctx, r, o.Extra, op)
			if err == nil {
				c.leaders.Set(group, r)
				return nil
			}
			lastErr = err
			st, _ := status.FromError(err)
			switch st.Code() {
			case codes.FailedPrecondition:
				if h := hint(st); h.ID != "" && h.ID != r.ID {
					c.leaders.Set(group, h)
					// The replicas name the leader, the silent node too:
					// it answered them since (a leader that lost its term
					// while an entry was slow to commit may win the next).
					silent = ""
					if ctx.Err() == nil {
						continue // straight to the hinted leader
					}
				} else {
					// No leader known, or a node that names itself while
					// it refuses: wait for an election.
					c.leaders.Set(group, Replica{})
				}
			case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
				c.leaders.Set(group, Replica{})
				silent = r.ID
			case codes.NotFound:
				if o.RetryNotFound == nil || !o.RetryNotFound(st) {
					return err
				}
				c.leaders.Set(group, Replica{})
			default:
				return err
			}
		}
		if ctx.Err() != nil {
			return &GaveUp{Group: group, Last: lastErr}
		}
		if oneRound {
			continue
		}
		t := time.NewTimer(backoff + time.Duration(rand.Int64N(int64(backoff))))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return &GaveUp{Group: group, Last: lastErr}
		}
		backoff = min(2*backoff, c.cfg.MaxBackoff)
	}
}

// attempt runs op once against r.
func (c *Caller[C]) attempt(ctx context.Context, r Replica, extra time.Duration, op func(context.Context, C) error) error {
	client, err := c.cfg.Dial(r.ID, r.Addr)
	if err != nil {
		return err
	}
	if c.cfg.AttemptTimeout != nil {
		if d := c.cfg.AttemptTimeout(r.ID); d > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, d+extra)
			defer cancel()
		}
	}
	return op(ctx, client)
}

// target picks the node to try: the remembered leader, else (on a call's
// first attempt) the leader the caller was told of, else the replicas in
// turn, passing over the node that last gave no answer (avoid) while
// there is another: the routing table may still name it the leader while
// the others have elected one of their own. With tried (OneRound), a node
// already tried is never picked again, and false means none is left.
func (c *Caller[C]) target(group uint64, attempt int, avoid string, tried map[string]bool) (Replica, bool) {
	usable := func(id string) bool { return id != "" && id != avoid && !tried[id] }
	known, _ := c.leaders.Get(group)
	pick := func(id string) (Replica, bool) {
		r := Replica{ID: id, Addr: c.cfg.Addr(id)}
		if r.Addr == "" && id == known.ID {
			r.Addr = known.Addr
		}
		return r, true
	}
	if usable(known.ID) {
		return pick(known.ID)
	}
	g := c.cfg.Group(group)
	if g == nil {
		if known.ID != "" && tried == nil {
			return pick(known.ID) // all there is, silent or not
		}
		return Replica{}, false
	}
	if attempt == 0 && usable(g.LeaderId) {
		return pick(g.LeaderId)
	}
	n := len(g.Replicas)
	for k := range n {
		if id := g.Replicas[(attempt+k)%n].NodeId; usable(id) {
			return pick(id)
		}
	}
	if n > 0 && tried == nil {
		// Only the silent node is left: try it again rather than none.
		return pick(g.Replicas[(attempt+n-1)%n].NodeId)
	}
	return Replica{}, false
}

// hint returns the leader a FAILED_PRECONDITION answer names, if any.
func hint(st *status.Status) Replica {
	for _, d := range st.Details() {
		if h, ok := d.(*partitionpb.LeaderHint); ok {
			return Replica{ID: h.LeaderId, Addr: h.LeaderAddr}
		}
	}
	return Replica{}
}

func noReplicas(group uint64) error {
	return status.Errorf(codes.Unavailable, "group %d has no known replicas", group)
}

// HasResult reports whether a status carries a partitionpb.Result: the
// answer of a rule of the state machine (the entity is missing, a quota),
// not of the node (node/errors.go).
func HasResult(st *status.Status) bool {
	for _, d := range st.Details() {
		if _, ok := d.(*partitionpb.Result); ok {
			return true
		}
	}
	return false
}
