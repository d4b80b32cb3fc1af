package workload

import (
	"context"
	"errors"
	"net"
	"sync"
	"time"

	amqp "github.com/Azure/go-amqp"

	"github.com/quorumbus/quorumbus/tests/jepsen/history"
)

// Common is what every feature workload needs: how to reach the
// front-end, where to record, and how long an operation may take before
// its outcome counts as unknown.
type Common struct {
	Dial      func(ctx context.Context) (net.Conn, error)
	Rec       *history.Recorder
	OpTimeout time.Duration
}

// Runner is a running workload: it sends until StopSends and receives
// until Drain has seen what it expects. Every workload of the run is
// one, so the test drives them alike.
type Runner interface {
	StopSends()
	Drain(ctx context.Context, quiet time.Duration) (missing int)
	Missing() int
	Name() string
}

var _ Runner = (*Queue)(nil)

// Name is the queue workload's name in the test's log.
func (q *Queue) Name() string { return "queue" }

// stream is the machinery the feature workloads share: sender and
// receiver goroutines, a count of what was acknowledged against what
// arrived, and the drain.
type stream struct {
	Common
	name string

	stopSends chan struct{}
	sendersWG sync.WaitGroup
	recvWG    sync.WaitGroup
	ctx       context.Context
	cancel    context.CancelFunc

	mu sync.Mutex
	// want: for each key (a message id, or subscription/id on a topic),
	// how many distinct messages acknowledged sends must have produced;
	// got: the distinct sequence numbers received under it.
	want         map[string]int
	got          map[string]map[int64]bool
	lastDelivery time.Time
}

func newStream(ctx context.Context, c Common, name string) *stream {
	ctx, cancel := context.WithCancel(ctx)
	return &stream{Common: c, name: name, stopSends: make(chan struct{}), ctx: ctx, cancel: cancel,
		want: map[string]int{}, got: map[string]map[int64]bool{}}
}

func (s *stream) Name() string { return s.name }

func (s *stream) goSend(f func(ctx context.Context)) {
	s.sendersWG.Add(1)
	go func() { defer s.sendersWG.Done(); f(s.ctx) }()
}

func (s *stream) goRecv(f func(ctx context.Context)) {
	s.recvWG.Add(1)
	go func() { defer s.recvWG.Done(); f(s.ctx) }()
}

func (s *stream) StopSends() {
	close(s.stopSends)
	s.sendersWG.Wait()
}

func (s *stream) stopped() bool {
	select {
	case <-s.stopSends:
		return true
	default:
		return false
	}
}

// expect notes that an acknowledged send must show as at least n
// distinct messages under key.
func (s *stream) expect(key string, n int) {
	s.mu.Lock()
	s.want[key] = max(s.want[key], n)
	s.mu.Unlock()
}

func (s *stream) arrived(key string, seq int64) {
	s.mu.Lock()
	if s.got[key] == nil {
		s.got[key] = map[int64]bool{}
	}
	s.got[key][seq] = true
	s.lastDelivery = time.Now()
	s.mu.Unlock()
}

func (s *stream) Missing() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for k, w := range s.want {
		n += max(0, w-len(s.got[k]))
	}
	return n
}

// Drain is Queue.Drain's: receivers run until nothing is missing and
// nothing arrived for quiet.
func (s *stream) Drain(ctx context.Context, quiet time.Duration) int {
	defer func() { s.cancel(); s.recvWG.Wait() }()
	for {
		missing := s.Missing()
		s.mu.Lock()
		idle := time.Since(s.lastDelivery)
		s.mu.Unlock()
		if missing == 0 && idle >= quiet {
			return 0
		}
		select {
		case <-ctx.Done():
			return missing
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// sendLoop sends one message per tick on its own connection until the
// sends stop. next builds the n-th message and the invoke to record;
// acked runs after an acknowledged send.
func (s *stream) sendLoop(ctx context.Context, p int, address string, interval time.Duration,
	next func(n int) (*amqp.Message, history.Op), acked func(inv history.Op)) {
	var l *link
	var snd *amqp.Sender
	defer func() { l.close() }()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for n := 0; ; {
		select {
		case <-ctx.Done():
			return
		case <-s.stopSends:
			return
		case <-tick.C:
		}
		if snd == nil {
			var err error
			if l, err = dialLink(ctx, s.Dial); err == nil {
				actx, cancel := context.WithTimeout(ctx, 5*time.Second)
				snd, err = l.sess.NewSender(actx, address, nil)
				cancel()
			}
			if err != nil {
				l.close()
				l, snd = nil, nil
				pause(ctx, 200*time.Millisecond)
				continue
			}
		}
		n++
		m, inv := next(n)
		inv.Process, inv.Type, inv.F = p, history.Invoke, history.Send
		s.Rec.Add(inv)
		sctx, cancel := context.WithTimeout(ctx, s.OpTimeout)
		err := snd.Send(sctx, m, nil)
		cancel()
		done := inv
		done.Type = history.OK
		if err != nil {
			done.Type, done.Err = sendOutcome(err), err.Error()
		}
		s.Rec.Add(done)
		if err == nil {
			acked(inv)
			continue
		}
		l.close()
		l, snd = nil, nil
	}
}

// received is what a receive loop hands to its workload's hold: the
// delivery as recorded, the message, and the link it came on.
type received struct {
	d   history.Op
	m   *amqp.Message
	rcv *amqp.Receiver
	l   *link
}

// recvLoop receives peek-lock on its own connection, records each
// delivery and hands it to settle, which settles it and says whether the
// link is still sound (nil: complete it; the lock-renewal workload holds
// and renews first, the settlement workload picks an outcome). key names
// what a delivery counts for.
func (s *stream) recvLoop(ctx context.Context, p int, entity, address string, credit int32,
	key func(d history.Op) string, settle func(ctx context.Context, r received) bool) {
	var l *link
	var rcv *amqp.Receiver
	defer func() { l.close() }()
	for ctx.Err() == nil {
		if rcv == nil {
			var err error
			if l, err = dialLink(ctx, s.Dial); err == nil {
				actx, cancel := context.WithTimeout(ctx, 5*time.Second)
				rcv, err = l.sess.NewReceiver(actx, address, &amqp.ReceiverOptions{
					Credit: credit, SettlementMode: amqp.ReceiverSettleModeSecond.Ptr()})
				cancel()
			}
			if err != nil {
				l.close()
				l, rcv = nil, nil
				pause(ctx, 200*time.Millisecond)
				continue
			}
		}
		s.Rec.Add(history.Op{Process: p, Type: history.Invoke, F: history.Receive, Entity: entity})
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		m, err := rcv.Receive(rctx, nil)
		empty := rctx.Err() != nil && ctx.Err() == nil
		cancel()
		if err != nil {
			s.Rec.Add(history.Op{Process: p, Type: history.Fail, F: history.Receive, Entity: entity, Err: err.Error()})
			if !empty {
				l.close()
				l, rcv = nil, nil
				pause(ctx, 100*time.Millisecond)
			}
			continue
		}
		d := delivery(m)
		d.Process, d.Type, d.F, d.Entity = p, history.OK, history.Receive, entity
		d.AtMs = time.Now().UnixMilli()
		if m.Properties != nil && m.Properties.GroupID != nil {
			d.SessionID = *m.Properties.GroupID
		}
		s.Rec.Add(d)
		s.arrived(key(d), d.Seq)
		sound := false
		if settle != nil {
			sound = settle(ctx, received{d: d, m: m, rcv: rcv, l: l})
		} else {
			sound = s.complete(ctx, p, entity, d, rcv, m)
		}
		if !sound {
			l.close()
			l, rcv = nil, nil
		}
	}
}

// complete settles a delivery (settle mode second: the broker's answer is
// awaited) and records it; it returns false when the link is in doubt.
func (s *stream) complete(ctx context.Context, p int, entity string, d history.Op, rcv *amqp.Receiver, m *amqp.Message) bool {
	return s.completed(ctx, p, entity, d, rcv, m) != history.Info
}

// completed is complete, returning the outcome recorded.
func (s *stream) completed(ctx context.Context, p int, entity string, d history.Op, rcv *amqp.Receiver, m *amqp.Message) history.Type {
	// Attrs carry over: a session receiver's name its holding of the
	// session.
	inv := history.Op{Process: p, Type: history.Invoke, F: history.Complete, Entity: entity, MsgID: d.MsgID, LockToken: d.LockToken, SessionID: d.SessionID, Attrs: d.Attrs}
	s.Rec.Add(inv)
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.OpTimeout)
	err := rcv.AcceptMessage(cctx, m)
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
	return done.Type
}

// settleRefused reports whether a disposition's error says the broker did
// not settle: an AMQP error condition other than the ones the front-end
// answers when it gave up on a partition (com.microsoft:timeout) or
// failed inside (internal-error), whose outcome is unknown.
func settleRefused(err error) bool {
	var ae *amqp.Error
	if !errors.As(err, &ae) {
		return false
	}
	return ae.Condition != "com.microsoft:timeout" && ae.Condition != amqp.ErrCondInternalError
}
