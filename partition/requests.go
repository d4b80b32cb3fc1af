package partition

import (
	"fmt"
	"math"

	"google.golang.org/protobuf/proto"

	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// Requests the front-end may send twice (Command.request_id).
//
// A front-end retries a send or a settle when it cannot tell whether the
// first attempt was applied: the attempt timed out, or the leader lost its
// term after proposing. Applied twice, a send would store its messages
// twice and a complete would be refused as lock-lost although the first
// attempt completed the messages. So the partition stores the result of
// each request id it applies, in the same batch, and answers the id again
// with that result, applying nothing. The results live in the store, not
// in memory, so that a replica that restarted answers and writes exactly
// as the others do.

const (
	// requestWindowMs is how long a request's result is kept: a front-end
	// gives up on a request after 30 s (frontend sendTimeout), and an id
	// seen again after this window is applied as new.
	requestWindowMs = 120_000
	// maxRequestIDBytes bounds a request id.
	maxRequestIDBytes = 64
	// requestPrune is how many expired results one entry deletes beyond one
	// per request it carries, so that pruning keeps up with any load.
	requestPrune = 64
)

// applyOnce applies c and returns its result, unless c repeats a request
// applied within the window: then it returns that request's result and
// applies nothing.
func (a *applier) applyOnce(c *partitionpb.Command) (*partitionpb.Result, error) {
	if len(c.RequestId) == 0 {
		return result(a.apply(c))
	}
	lock, locks := lockOf(c)
	switch {
	case locks && lock.receiveAndDelete:
		return result(nil, fmt.Errorf("%w: request id on a receive-and-delete lock", ErrInvalid))
	case !locks && c.GetEnqueue() == nil && c.GetSettle() == nil && c.GetAcceptSession() == nil && !(sessionRequest(c) && a.format >= FormatV8):
		return result(nil, fmt.Errorf("%w: request id on a command other than Enqueue, Settle, a session command or a peek-lock lock", ErrInvalid))
	}
	if len(c.RequestId) > maxRequestIDBytes {
		return result(nil, fmt.Errorf("%w: request id of %d bytes, at most %d", ErrInvalid, len(c.RequestId), maxRequestIDBytes))
	}
	r, stale, err := a.requestResult(c.RequestId)
	if err != nil {
		return nil, err
	}
	if locks {
		return a.lockOnce(c, lock, r, stale)
	}
	if r != nil {
		// A repeat: a staged body it names was staged again for nothing.
		if enq := c.GetEnqueue(); enq != nil {
			if err := a.dropStaged(enq); err != nil {
				return nil, err
			}
		}
		return r, nil
	}
	if r, err = result(a.apply(c)); err != nil {
		return nil, err
	}
	if c.GetAcceptSession() != nil && r.SessionId == "" {
		// An accept that locked nothing records nothing, as a Lock: the
		// node proposes a waiting accept-next again under the same id.
		return r, nil
	}
	return r, a.recordRequest(c.RequestId, r, stale)
}

// lockTarget is what relock needs of a Lock or a LockBySequence.
type lockTarget struct {
	entity           uint64
	part             uint32
	sub              partitionpb.SubQueue
	seed             []byte
	receiveAndDelete bool
	bySequence       bool
}

// lockOf returns the target of c, if c locks messages.
func lockOf(c *partitionpb.Command) (lockTarget, bool) {
	if l := c.GetLock(); l != nil {
		return lockTarget{l.EntityId, l.Partition, l.SubQueue, l.TokenSeed, l.ReceiveAndDelete, false}, true
	}
	if l := c.GetLockBySequence(); l != nil {
		return lockTarget{l.EntityId, l.Partition, l.SubQueue, l.TokenSeed, l.ReceiveAndDelete, true}, true
	}
	return lockTarget{}, false
}

// lockOnce applies a peek-lock Lock or LockBySequence with request id,
// unless the id was applied (done is its record): then it answers with
// the messages of that command still locked by it.
//
// The record is the same on every replica: what the Lock handed out
// (the numbers and the token seed; a repeat reads locked-until from the
// messages), not the answer, which only the answering replica fills with messages:
// recording the messages would marshal each one again, on every replica,
// for every receive. A Lock that locked nothing records nothing: the node
// proposes a waiting receive's Lock again under the same id when
// messages arrive.
func (a *applier) lockOnce(c *partitionpb.Command, l lockTarget, done *partitionpb.Result, stale *int64) (*partitionpb.Result, error) {
	if done != nil {
		return result(a.relock(l, done))
	}
	a.handedOut = a.handedOut[:0]
	a.recordLocks = true
	r, err := result(a.apply(c))
	a.recordLocks = false
	if err != nil || len(a.handedOut) == 0 {
		return r, err
	}
	rec := &partitionpb.Result{SequenceNumbers: a.handedOut, TokenSeed: l.seed}
	return r, a.recordRequest(c.RequestId, rec, stale)
}

// requestResult returns the stored result of request id, nil if there is
// none within the window. A result that expired but is not yet pruned
// comes back as stale, the time it was applied, for recordRequest to
// replace; a point read costs the apply path more than the rest of a
// request's bookkeeping, so it reads once.
func (a *applier) requestResult(id []byte) (r *partitionpb.Result, stale *int64, err error) {
	if a.reqFilter.Absent(id, *a.reqFloor) {
		return nil, nil, nil
	}
	at, p, found, err := a.b.RequestResult(id)
	if err != nil || !found {
		return nil, nil, err
	}
	if a.now-at >= requestWindowMs {
		return nil, &at, nil // expired, not yet pruned: new again
	}
	r = new(partitionpb.Result)
	if err := proto.Unmarshal(p, r); err != nil {
		return nil, nil, fmt.Errorf("%w: request %x: %v", ErrCorrupt, id, err)
	}
	return r, nil, nil
}

// recordRequest stores the result r of request id, applied now, in place
// of the expired result applied at stale, if there is one.
func (a *applier) recordRequest(id []byte, r *partitionpb.Result, stale *int64) error {
	if err := a.b.PutRequestResult(id, a.now, stale, r); err != nil {
		return err
	}
	*a.reqFloor = min(*a.reqFloor, a.now)
	a.reqFilter.Add(id, a.now)
	return nil
}

// pruneRequests deletes up to budget results older than the window,
// oldest first (store.Batch.PruneRequests).
func (a *applier) pruneRequests(budget int) error {
	if a.now < math.MinInt64+requestWindowMs {
		return nil
	}
	return a.b.PruneRequests(a.now-requestWindowMs, a.reqFloor, budget)
}
