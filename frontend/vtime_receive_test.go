package frontend_test

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	goamqp "github.com/Azure/go-amqp"

	"github.com/quorumbus/quorumbus/frontend"
	"github.com/quorumbus/quorumbus/placement/sas"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// plainConn is an in-memory connection logged in with the emulator's rule
// by SASL PLAIN, which needs no token on $cbs.
func plainConn(t *testing.T, f *memFrontend) *goamqp.Conn {
	t.Helper()
	return f.dial(t, t.Context(), &goamqp.ConnOptions{SASLType: goamqp.SASLTypePlain(sas.DevKeyName, sas.DevKey)})
}

// pollLog records when a receive that waits (a long poll) was asked of
// the backend, and for how long.
type pollLog struct {
	*memBackend
	mu    sync.Mutex
	at    []time.Time
	waits []time.Duration
}

func (b *pollLog) Receive(ctx context.Context, e *placementpb.Entity, req *partitionpb.ReceiveRequest) (*partitionpb.Result, error) {
	if req.WaitMs > 0 {
		b.mu.Lock()
		b.at = append(b.at, time.Now())
		b.waits = append(b.waits, time.Duration(req.WaitMs)*time.Millisecond)
		b.mu.Unlock()
	}
	return b.memBackend.Receive(ctx, e, req)
}

// TestReceiveWaitAndDrainInVirtualTime: a receiver with credit is served
// by long polls of ReceiveWait, each asked when the one before ended, and
// gets a message the instant it is sent, minutes later. A drain is
// answered the instant it is asked, even during a long poll (go-amqp
// drains by taking its credit back, so there is nothing to use up), and
// leaves the link without credit: a message sent then waits for the next
// credit, and goes out the instant it is given.
func TestReceiveWaitAndDrainInVirtualTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const wait = 20 * time.Second
		b := &pollLog{memBackend: newMemBackend("q")}
		f := serveInMemory(t, frontend.Config{Backend: b, Rules: devRules(t), ReceiveWait: wait})
		ctx := t.Context()
		s, err := plainConn(t, f).NewSession(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		rcv, err := s.NewReceiver(ctx, "q", &goamqp.ReceiverOptions{Credit: -1})
		if err != nil {
			t.Fatal(err)
		}
		snd, err := s.NewSender(ctx, "q", nil)
		if err != nil {
			t.Fatal(err)
		}
		send := func(body string) {
			t.Helper()
			if err := snd.Send(ctx, goamqp.NewMessage([]byte(body)), nil); err != nil {
				t.Fatal(err)
			}
		}

		// A message sent three minutes after the credit was given, at
		// the start of the tenth long poll, goes out at once.
		credited := time.Now()
		if err := rcv.IssueCredit(1); err != nil {
			t.Fatal(err)
		}
		got := receiveAsync(ctx, rcv)
		sent := credited.Add(9 * wait)
		sleepUntil(sent)
		if r, ok := receivedYet(got); ok {
			t.Fatalf("received %v before anything was sent", r)
		}
		send("late")
		synctest.Wait()
		r, ok := receivedYet(got)
		if !ok || r.err != nil || string(r.msg.GetData()) != "late" {
			t.Fatalf("a message sent to a waiting receiver: %v (answered: %v); want it at once", r.err, ok)
		}
		b.mu.Lock()
		at, waits := b.at, b.waits
		b.mu.Unlock()
		if len(at) != 10 {
			t.Fatalf("%d long polls in %v of waits of %v, at %v; want 10", len(at), sent.Sub(credited), wait, at)
		}
		for i := range at {
			if at[i] != credited.Add(time.Duration(i)*wait) || waits[i] != wait {
				t.Fatalf("long poll %d asked %v after the credit, to wait %v; want at %v, for %v", i, at[i].Sub(credited), waits[i], time.Duration(i)*wait, wait)
			}
		}
		if err := rcv.AcceptMessage(ctx, r.msg); err != nil {
			t.Fatal(err)
		}

		// Credit given now starts a long poll; a drain asked during it
		// is answered at once.
		polled := time.Now()
		if err := rcv.IssueCredit(3); err != nil {
			t.Fatal(err)
		}
		sleepUntil(polled.Add(wait / 4))
		drained := make(chan error, 1)
		go func() { drained <- rcv.DrainCredit(ctx, nil) }()
		synctest.Wait()
		select {
		case err := <-drained:
			if err != nil {
				t.Fatalf("drain: %v", err)
			}
		default:
			t.Fatal("a drain is not answered when it is asked")
		}

		// Without credit, a message waits for it (the long poll that
		// took it gives it back).
		send("after the drain")
		sleepUntil(time.Now().Add(time.Minute))
		if m := rcv.Prefetched(); m != nil {
			t.Fatalf("received %q on a drained link", m.GetData())
		}
		if err := rcv.IssueCredit(1); err != nil {
			t.Fatal(err)
		}
		got = receiveAsync(ctx, rcv)
		synctest.Wait()
		if r, ok := receivedYet(got); !ok || r.err != nil || string(r.msg.GetData()) != "after the drain" {
			t.Fatalf("receive once credit returned: %v (answered: %v); want the message at once", r.err, ok)
		}
	})
}

// lostSession is a session backend whose session "s" holds one message.
// The session's lock is lost lostAfter the client's complete of that
// message reached the partition, and the complete takes settleTook to
// answer whatever its context says, as a partition leader that stalls.
type lostSession struct {
	*lateSessions
	lostAfter, settleTook time.Duration

	once   sync.Once
	lost   chan struct{} // closed lostAfter the complete arrived
	served bool          // the message was handed out (under mu)
}

func newLostSession(lostAfter, settleTook time.Duration) *lostSession {
	return &lostSession{lateSessions: newLateSessions(0, "s"), lostAfter: lostAfter, settleTook: settleTook, lost: make(chan struct{})}
}

func (b *lostSession) Receive(ctx context.Context, _ *placementpb.Entity, req *partitionpb.ReceiveRequest) (*partitionpb.Result, error) {
	b.mu.Lock()
	first := !b.served && req.MaxCount > 0
	b.served = b.served || first
	b.mu.Unlock()
	if first {
		m := &partitionpb.Message{
			SequenceNumber: 1, SessionId: "s", Bare: dataBody("m"),
			LockToken:     append([]byte{0, 0}, bytes.Repeat([]byte{9}, partitionpb.LockTokenBytes-2)...), // partition 0
			LockedUntilMs: time.Now().Add(time.Minute).UnixMilli(),
		}
		return &partitionpb.Result{Messages: []*partitionpb.Message{m}}, nil
	}
	select {
	case <-b.lost:
		return &partitionpb.Result{Code: partitionpb.ResultCode_RESULT_SESSION_LOCK_LOST, Description: "the session lock expired"}, nil
	case <-time.After(time.Duration(req.WaitMs) * time.Millisecond):
		return &partitionpb.Result{}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (b *lostSession) Settle(context.Context, *placementpb.Entity, *partitionpb.Settle) (*partitionpb.Result, error) {
	b.once.Do(func() { time.AfterFunc(b.lostAfter, func() { close(b.lost) }) })
	time.Sleep(b.settleTook)
	return &partitionpb.Result{}, nil
}

// TestSessionLostAnswersSettlesFirstInVirtualTime: a session receiver
// whose lock is lost answers the dispositions still on their way to the
// partition before it detaches the link with session-lock-lost, so that
// a complete the partition applied is not failed at the client. It waits
// for them as long as a partition request may take (the front-end's
// sendTimeout, 30 s), and no longer: a partition that does not answer
// does not hold the link.
func TestSessionLostAnswersSettlesFirstInVirtualTime(t *testing.T) {
	const (
		lostAfter   = 5 * time.Second
		settleBound = 30 * time.Second // frontend's sendTimeout
	)
	for _, tc := range []struct {
		name       string
		settleTook time.Duration
		accepted   bool          // the client's complete succeeds
		detach     time.Duration // after the complete, when the link is detached
	}{
		{"settle answers", 10 * time.Second, true, 10 * time.Second},
		{"settle stalls", 2 * time.Minute, false, lostAfter + settleBound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := newLostSession(lostAfter, tc.settleTook)
				f := serveInMemory(t, frontend.Config{Backend: b, Rules: devRules(t)})
				ctx := t.Context()
				s, err := plainConn(t, f).NewSession(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				rcv, err := s.NewReceiver(ctx, "sq", &goamqp.ReceiverOptions{
					Credit:         -1,
					SettlementMode: goamqp.ReceiverSettleModeSecond.Ptr(),
					Filters:        []goamqp.LinkFilter{goamqp.NewLinkFilter("com.microsoft:session-filter", 0x137000000C, "s")},
				})
				if err != nil {
					t.Fatal(err)
				}
				if err := rcv.IssueCredit(2); err != nil {
					t.Fatal(err)
				}
				m, err := rcv.Receive(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				completed := time.Now()
				accepted := make(chan error, 1)
				go func() { accepted <- rcv.AcceptMessage(ctx, m) }()
				ended := receiveAsync(ctx, rcv)

				sleepUntil(completed.Add(tc.detach - time.Millisecond))
				if r, ok := receivedYet(ended); ok {
					t.Fatalf("the link ended before %v after the complete: %v", tc.detach, r.err)
				}
				select {
				case err := <-accepted:
					t.Fatalf("the complete was answered before %v after it was sent: %v", tc.detach, err)
				default:
				}
				sleepUntil(completed.Add(tc.detach))
				r, ok := receivedYet(ended)
				if !ok {
					t.Fatalf("the link is still attached %v after the complete", tc.detach)
				}
				if cond, _ := amqpCondition(r.err); cond != "com.microsoft:session-lock-lost" {
					t.Fatalf("the link ended with %v; want a detach with session-lock-lost", r.err)
				}
				select {
				case err := <-accepted:
					if (err == nil) != tc.accepted {
						t.Fatalf("the complete: %v; want success %v", err, tc.accepted)
					}
				default:
					t.Fatal("the complete is not answered when the link was detached")
				}
			})
		})
	}
}
