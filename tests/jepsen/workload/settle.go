package workload

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	amqp "github.com/Azure/go-amqp"

	"github.com/quorumbus/quorumbus/tests/jepsen/history"
)

// SettleConfig drives a queue with every settlement but complete:
// abandon, dead-letter and defer, and the two ways back out of them, the
// dead-letter sub-queue and receive by sequence number.
type SettleConfig struct {
	Common
	Queue string
	// Senders, Receivers (of the queue) and DeadLetterReceivers (of its
	// dead-letter sub-queue) each have their own connection; one more
	// process receives the deferred messages.
	Senders, Receivers, DeadLetterReceivers int
	SendRate                                float64
	Seed                                    uint64
}

// DeadLetterPath is the address of an entity's dead-letter sub-queue.
func DeadLetterPath(entity string) string { return entity + "/$DeadLetterQueue" }

// Attrs of the settlement workload's operations.
const (
	// AttrVia on a receive or complete is "deferred" when it went through
	// $management (receive-by-sequence-number, update-disposition).
	AttrVia = "via"
	// AttrReason on a delivery from the dead-letter sub-queue is the
	// message's DeadLetterReason.
	AttrReason = "reason"
)

// ExplicitDeadLetterReason is the reason the workload dead-letters with;
// the broker's own (MaxDeliveryCountExceeded) tells the two apart.
const ExplicitDeadLetterReason = "jepsen"

// StartSettle: senders send unique ids; the queue's receivers settle each
// delivery with an outcome drawn at random (complete 40%, abandon,
// dead-letter and defer 20% each); the dead-letter receivers complete
// what reaches the sub-queue; the deferred receiver takes each deferred
// message back by its sequence number and completes it through
// $management. A message is done when it was completed (from the queue or
// after deferral) or received from the dead-letter sub-queue: the drain
// waits for every acknowledged send to be done.
func StartSettle(ctx context.Context, cfg SettleConfig) Runner {
	s := newStream(ctx, cfg.Common, "settle")
	d := &deferred{seqs: map[int64]*deferredSeq{}}
	interval := time.Duration(float64(cfg.Senders) / cfg.SendRate * float64(time.Second))
	for i := range cfg.Senders {
		p := 800 + i
		next := func(n int) (*amqp.Message, history.Op) {
			id := fmt.Sprintf("x%d-%d", p, n)
			return &amqp.Message{Properties: &amqp.MessageProperties{MessageID: id}, Data: [][]byte{[]byte(id)}},
				history.Op{Entity: cfg.Queue, MsgID: id}
		}
		s.goSend(func(ctx context.Context) {
			s.sendLoop(ctx, p, cfg.Queue, interval, next, func(inv history.Op) { s.expect(inv.MsgID, 1) })
		})
	}
	// Every delivery counts under its own key, which nobody expects: it
	// keeps the drain's quiet period honest; only a done message counts
	// against the acknowledged sends.
	delivered := func(d history.Op) string { return "delivered|" + d.MsgID }
	for i := range cfg.Receivers {
		p := 850 + i
		rng := rand.New(rand.NewPCG(cfg.Seed, uint64(p)))
		s.goRecv(func(ctx context.Context) {
			s.recvLoop(ctx, p, cfg.Queue, cfg.Queue, 5, delivered, func(ctx context.Context, r received) bool {
				return s.settleRandomly(ctx, p, cfg.Queue, r, rng, d)
			})
		})
	}
	dlq := DeadLetterPath(cfg.Queue)
	for i := range cfg.DeadLetterReceivers {
		p := 880 + i
		s.goRecv(func(ctx context.Context) {
			s.recvLoop(ctx, p, dlq, dlq, 10, delivered, func(ctx context.Context, r received) bool {
				s.arrived(r.d.MsgID, 0)
				return s.complete(ctx, p, dlq, r.d, r.rcv, r.m)
			})
		})
	}
	s.goRecv(func(ctx context.Context) { s.deferredReceiver(ctx, 890, cfg.Queue, d) })
	return s
}

// deferred holds the sequence numbers of messages whose defer the broker
// acknowledged, or answered with an unknown outcome, and that have not
// been taken back yet, each with the number of times a receive by that
// number found nothing.
type deferred struct {
	mu   sync.Mutex
	seqs map[int64]*deferredSeq
}

type deferredSeq struct {
	misses int
	added  time.Time
}

// forgetAfter is how long a number whose receives found nothing is kept
// after it was added or last received in doubt: a defer of unknown
// outcome may still be applied for a while after its client gave up, and
// a receive by number that timed out may have locked the message, which
// then answers not-found until the lock (the queue's, 10 s) runs out.
// A soak once forgot a number 10 s after such a receive and left its
// message deferred for good.
const forgetAfter = 30 * time.Second

func (d *deferred) add(seq int64) {
	d.mu.Lock()
	d.seqs[seq] = &deferredSeq{added: time.Now()}
	d.mu.Unlock()
}

// inDoubt restarts seq's forgetAfter: a receive of it may have locked it.
func (d *deferred) inDoubt(seq int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if e := d.seqs[seq]; e != nil {
		e.added = time.Now()
	}
}

// one returns a sequence number to take back, if any.
func (d *deferred) one() (int64, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for seq := range d.seqs {
		return seq, true
	}
	return 0, false
}

// done forgets seq; missing counts a receive that found nothing and
// forgets seq only after a few of them and forgetAfter (a complete whose
// answer was lost may have taken it already, or a defer of unknown
// outcome was never applied: the checker judges both from the history).
func (d *deferred) done(seq int64, missing bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	e := d.seqs[seq]
	if e == nil {
		return
	}
	if missing {
		e.misses++
		if e.misses < 5 || time.Since(e.added) < forgetAfter {
			return
		}
	}
	delete(d.seqs, seq)
}

// settleRandomly settles one delivery of the queue with a drawn outcome
// and records it; it returns false when the link is in doubt.
func (s *stream) settleRandomly(ctx context.Context, p int, queue string, r received, rng *rand.Rand, d *deferred) bool {
	f := history.Complete
	switch n := rng.IntN(10); {
	case n < 4:
	case n < 6:
		f = history.Abandon
	case n < 8:
		f = history.DeadLetter
	default:
		f = history.Defer
	}
	if f == history.Complete {
		outcome := s.completed(ctx, p, queue, r.d, r.rcv, r.m)
		if outcome != history.Fail {
			// Unknown counts too: a message it did not take comes back
			// after its lock, before the drain's quiet period ends.
			s.arrived(r.d.MsgID, 0)
		}
		return outcome != history.Info
	}
	inv := history.Op{Process: p, Type: history.Invoke, F: f, Entity: queue, MsgID: r.d.MsgID, LockToken: r.d.LockToken, Seq: r.d.Seq}
	s.Rec.Add(inv)
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.OpTimeout)
	var err error
	switch f {
	case history.Abandon:
		err = r.rcv.ModifyMessage(cctx, r.m, &amqp.ModifyMessageOptions{DeliveryFailed: true})
	case history.DeadLetter:
		err = r.rcv.RejectMessage(cctx, r.m, &amqp.Error{Condition: "com.microsoft:dead-letter",
			Info: map[string]any{"DeadLetterReason": ExplicitDeadLetterReason, "DeadLetterErrorDescription": "drawn by the settlement workload"}})
	case history.Defer:
		err = r.rcv.ModifyMessage(cctx, r.m, &amqp.ModifyMessageOptions{UndeliverableHere: true})
	}
	cancel()
	done := inv
	done.Type = history.OK
	switch {
	case err == nil:
	case settleRefused(err):
		done.Type, done.Err = history.Fail, err.Error()
	default:
		done.Type, done.Err = history.Info, err.Error()
	}
	s.Rec.Add(done)
	if done.Type != history.Fail && f == history.Defer {
		// Unknown outcome too: the message may be deferred, and only a
		// receive by its number would ever bring it back.
		d.add(r.d.Seq)
	}
	return done.Type != history.Info
}

// deferredReceiver takes deferred messages back one sequence number at a
// time (receive-by-sequence-number, peek-lock) and completes each
// (update-disposition), both through the queue's $management node.
func (s *stream) deferredReceiver(ctx context.Context, p int, queue string, d *deferred) {
	var l *link
	var m *mgmt
	defer func() { l.close() }()
	for ctx.Err() == nil {
		seq, ok := d.one()
		if !ok {
			pause(ctx, 200*time.Millisecond)
			continue
		}
		if m == nil {
			var err error
			if l, err = dialLink(ctx, s.Dial); err == nil {
				m, err = newMgmt(ctx, l, queue)
			}
			if err != nil {
				l.close()
				l, m = nil, nil
				pause(ctx, 200*time.Millisecond)
				continue
			}
		}
		via := map[string]string{AttrVia: "deferred", "seq": strconv.FormatInt(seq, 10)}
		inv := history.Op{Process: p, Type: history.Invoke, F: history.Receive, Entity: queue, Attrs: via}
		s.Rec.Add(inv)
		cctx, cancel := context.WithTimeout(ctx, s.OpTimeout)
		res, err := m.call(cctx, "com.microsoft:receive-by-sequence-number", "",
			map[string]any{"sequence-numbers": []int64{seq}, "receiver-settle-mode": uint32(1)})
		cancel()
		got, tok, perr := deferredMessage(res)
		if err == nil {
			err = perr
		}
		if err != nil {
			done := inv
			done.Type, done.Err = history.Fail, err.Error()
			var es *errStatus
			switch {
			case errors.As(err, &es) && es.code == 404:
				d.done(seq, true) // taken already, or not deferred (yet)
				pause(ctx, 200*time.Millisecond)
			case errors.As(err, &es):
				// Refused for now: the number stays to be tried again.
			default:
				// The management links are in doubt; the number stays to
				// be tried again on new ones (a lock this receive may
				// have taken runs out and leaves the message deferred).
				d.inDoubt(seq)
				m = nil
				l.close()
				l = nil
			}
			s.Rec.Add(done)
			continue
		}
		dl := delivery(got)
		dl.Process, dl.Type, dl.F, dl.Entity, dl.Attrs = p, history.OK, history.Receive, queue, via
		dl.LockToken = tok.String()
		dl.AtMs = time.Now().UnixMilli()
		s.Rec.Add(dl)
		s.arrived("delivered|"+dl.MsgID, dl.Seq)

		cinv := history.Op{Process: p, Type: history.Invoke, F: history.Complete, Entity: queue, MsgID: dl.MsgID, LockToken: dl.LockToken, Attrs: via}
		s.Rec.Add(cinv)
		cctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), s.OpTimeout)
		_, err = m.call(cctx, "com.microsoft:update-disposition", "",
			map[string]any{"lock-tokens": []amqp.UUID{tok}, "disposition-status": "completed"})
		cancel()
		cdone := cinv
		cdone.Type = history.OK
		if err != nil {
			cdone.Type, cdone.Err = mgmtOutcome(err), err.Error()
		}
		switch {
		case err == nil:
			s.arrived(dl.MsgID, 0)
			d.done(seq, false)
		case cdone.Type == history.Fail:
			// The lock was lost: the message stays deferred, to be taken
			// back again.
		default:
			// Unknown: it may be completed; a receive that finds it gone
			// five times gives up on it.
			s.arrived(dl.MsgID, 0)
			m = nil
			l.close()
			l = nil
		}
		s.Rec.Add(cdone)
	}
}

// deferredMessage reads the one message of a receive-by-sequence-number
// answer and its lock token.
func deferredMessage(res map[string]any) (*amqp.Message, amqp.UUID, error) {
	var tok amqp.UUID
	list, _ := res["messages"].([]any)
	if len(list) != 1 {
		return nil, tok, fmt.Errorf("receive-by-sequence-number answered %d messages, want 1", len(list))
	}
	item, _ := list[0].(map[string]any)
	payload, _ := item["message"].([]byte)
	tok, _ = item["lock-token"].(amqp.UUID)
	var got amqp.Message
	if err := got.UnmarshalBinary(payload); err != nil {
		return nil, tok, fmt.Errorf("decoding a deferred message: %w", err)
	}
	return &got, tok, nil
}
