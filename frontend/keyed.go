package frontend

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/quorumbus/quorumbus/proto/partitionpb"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// A request that only one partition can take waits for that partition's
// group as long as the group may be electing a leader, and no longer: a
// keyed one (a SessionId, a PartitionKey, or a MessageId with duplicate
// detection names its partition), any request to an entity of one
// partition (every plain queue and topic), an unkeyed one that no group
// took (sendUnkeyed), and $management's settles, lock renewals, cancels
// of scheduled messages and deferred receives (management.go). A
// client then gets com.microsoft:timeout, which every SDK retries at once
// (in place, no reconnect), within seconds rather than after the whole
// sendTimeout of silence, and its next try finds the group again once it
// has a quorum.
const (
	// unservedWait is how long such a request waits on while its
	// partition reads not serving (Backend.Serving: recorded without a
	// quorum, or the router's latest calls found no leader that
	// answered) before it gives up. The figure, from the code:
	//
	//   - Raft's election timeout T is 1 s on every storage node, dev
	//     and production alike (node.DefaultElectionTimeout; nothing sets
	//     another). A follower notices a lost leader after T to 2T
	//     (hashicorp/raft randomizes its heartbeat timeout), then wins in
	//     one round, or after another T to 2T when the votes split.
	//     Serving turns false at the first call that failed (the router
	//     notes it before its next attempt), so a leader change reads
	//     not serving for 1 to 4 s, 4 only with a split vote.
	//   - The catalog records a group without quorum once a replica has
	//     known no leader for 2T, so a slow election may read so too;
	//     the request goes on trying meanwhile and succeeds as soon as
	//     the new leader answers.
	//   - A leader that does not answer at all (paused, cut off) costs
	//     the router's attemptTimeout (3 s) before Serving turns false:
	//     that time passes before this wait starts counting, so it does
	//     not eat into it.
	//
	// Five election timeouts cover a leader change with a split vote and
	// a second to spare, on a machine whose timers run late; a group
	// that has been without a leader that long has lost its quorum, and
	// will not get one back before its nodes do. A client waits at most
	// about 3 s + 5 s + servingPoll.
	//
	// A request gets a second more per MiB it carries, as sendTimeout
	// does: after a leader change its retry carries it to the new leader
	// again, and Serving reads false until that call succeeds.
	unservedWait = 5 * time.Second
	// servingPoll is how often such a request in flight reads
	// Serving: a map lookup under a read lock, so its cost is the timer;
	// a request that ends within it (almost every one) never reads it.
	servingPoll = 200 * time.Millisecond
)

// errPartitionUnserved is the cause of a request's context when it gave
// up on a partition that read not serving for unservedWait.
var errPartitionUnserved = errors.New("partition not serving")

// sendServed is Backend.Send of a request of bytes to a partition that
// no other may take (a keyed request, or any to an entity of one
// partition), given up as served says: the client gets ErrUnavailable,
// com.microsoft:timeout (errFailure), as when a send runs out of
// sendTimeout.
//
// A request given up so may still have been stored: its leader may have
// proposed it before losing the quorum, and the entry may commit once the
// group has one again. The client's retry then stores a second copy,
// unless the entity has duplicate detection and the retry carries the
// same MessageId, as after any timeout.
func (s *sender) sendServed(ctx context.Context, partition uint32, msgs []*partitionpb.NewMessage, bytes int) (*partitionpb.Result, error) {
	return served(s.c.srv, ctx, s.entity, partition, bytes, func(ctx context.Context) (*partitionpb.Result, error) {
		return s.c.srv.cfg.Backend.Send(ctx, s.entity, partition, msgs)
	})
}

// served runs call, a request of bytes to partition of e, with a context
// of ctx that ends once the partition has read not serving for
// unservedWait (and a second per MiB) in a row (servingWatch). When it
// ended so and call failed, the error is ErrUnavailable; otherwise call's
// answer stands, also a success that came as the watch gave up.
func served[T any](srv *Server, ctx context.Context, e *placementpb.Entity, partition uint32, bytes int, call func(context.Context) (T, error)) (T, error) {
	wait := unservedWait + time.Duration(bytes>>20)*time.Second
	wctx, stop := watchServing(ctx, func() bool { return srv.cfg.Backend.Serving(e, partition) }, wait)
	res, err := call(wctx)
	stop()
	if err != nil && errors.Is(context.Cause(wctx), errPartitionUnserved) && ctx.Err() == nil {
		return res, fmt.Errorf("%w: partition %d of %s read not serving for %v: %v", ErrUnavailable, partition, e.Name, wait, err)
	}
	return res, err
}

// watchServing returns a context of ctx that ends, with the cause
// errPartitionUnserved, once serving has read false at every poll for
// wait, and a stop that ends the watch (and the context). The first read
// is at once: a partition known not to serve counts from the start.
func watchServing(ctx context.Context, serving func() bool, wait time.Duration) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	w := &servingWatch{cancel: cancel, serving: serving, wait: wait}
	w.mu.Lock()
	w.check(time.Now())
	w.mu.Unlock()
	return ctx, w.stop
}

// servingWatch polls Serving for one request on a timer, which fires in
// a goroutine of its own only when the request outlives a poll.
type servingWatch struct {
	cancel  context.CancelCauseFunc
	serving func() bool
	wait    time.Duration // of not serving in a row, before cancel

	mu      sync.Mutex
	since   time.Time // when Serving last turned false; zero while it reads true
	timer   *time.Timer
	stopped bool // no check re-arms the timer once set
}

// check reads Serving at now and either gives up or arms the next poll;
// w.mu is held.
func (w *servingWatch) check(now time.Time) {
	if w.stopped {
		return
	}
	switch {
	case w.serving():
		w.since = time.Time{}
	case w.since.IsZero():
		w.since = now
	case now.Sub(w.since) >= w.wait:
		w.cancel(errPartitionUnserved)
		return
	}
	// The last poll falls on the deadline rather than up to a poll after.
	next := servingPoll
	if !w.since.IsZero() {
		next = min(next, max(w.since.Add(w.wait).Sub(now), time.Millisecond))
	}
	if w.timer == nil {
		w.timer = time.AfterFunc(next, w.fire)
	} else {
		w.timer.Reset(next)
	}
}

func (w *servingWatch) fire() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.check(time.Now())
}

func (w *servingWatch) stop() {
	w.mu.Lock()
	w.stopped = true
	if w.timer != nil {
		w.timer.Stop()
	}
	w.mu.Unlock()
	w.cancel(nil)
}
