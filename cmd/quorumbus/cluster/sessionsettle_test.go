package cluster

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"

	"github.com/quorumbus/quorumbus/frontend"
	"github.com/quorumbus/quorumbus/frontend/routing"
	"github.com/quorumbus/quorumbus/placement/sas"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// lateSettles is a dev cluster's router as a second front-end's backend,
// with the answer of its first settle held back until release is closed:
// the settle is applied as always, only its answer comes late, as when
// the leader that committed it died and the front-end's retry under the
// same request id reaches the next leader after other requests did.
type lateSettles struct {
	*routing.Router
	applied, release, lost chan struct{}
	appliedOnce, lostOnce  sync.Once
	settleOnce             sync.Once
}

func (b *lateSettles) Settle(ctx context.Context, e *placementpb.Entity, s *partitionpb.Settle) (*partitionpb.Result, error) {
	res, err := b.Router.Settle(ctx, e, s)
	first := false
	b.settleOnce.Do(func() { first = true })
	if first {
		b.appliedOnce.Do(func() { close(b.applied) })
		select {
		case <-b.release:
		case <-ctx.Done():
		}
	}
	return res, err
}

// Receive notes when a receive finds the session lock gone.
func (b *lateSettles) Receive(ctx context.Context, e *placementpb.Entity, req *partitionpb.ReceiveRequest) (*partitionpb.Result, error) {
	res, err := b.Router.Receive(ctx, e, req)
	if res.GetCode() == partitionpb.ResultCode_RESULT_SESSION_LOCK_LOST {
		b.lostOnce.Do(func() { close(b.lost) })
	}
	return res, err
}

// TestSessionLostAnswersSettlesFirst: a session receiver completes a
// message while it holds the session; the complete is applied, but its
// answer is late, and meanwhile the session lock runs out and the
// receiver's next receive finds it lost. The front-end must answer the
// complete (accepted) before it detaches the link with session-lock-lost;
// the next holder of the session then gets the other message, and not
// the completed one. (Before, the detach failed the complete at the
// client although the message was gone: the chaos suite's "stranded"
// session message, docs/reliability.md.)
func TestSessionLostAnswersSettlesFirst(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a dev cluster")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dev, err := StartDev(ctx, DevOptions{
		DataDir: t.TempDir(), AMQPAddr: "127.0.0.1:0",
		Nodes: 1, NodePort: freeNodePort(t, 1), Groups: 1, CacheMB: 8, LogLevel: "error",
	})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	const queue = "held"
	props := &placementpb.QueueProperties{RequiresSession: true, LockDurationMs: 2_000}
	if err := CreateQueues(ctx, dev.NodeAddrs, dev.Creds, []QueueSpec{{Name: queue, Props: props}}, testLogger()); err != nil {
		t.Fatal(err)
	}
	waitReady(t, dev)

	b := &lateSettles{Router: dev.Router, applied: make(chan struct{}), release: make(chan struct{}), lost: make(chan struct{})}
	srv, err := frontend.New(frontend.Config{Backend: b, Rules: dev.Router, Logger: testLogger(), ReceiveWait: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ServeAMQP(srv, ln, testLogger())
	defer srv.Shutdown(context.Background())
	// Before the shutdown: a held settle would hold it up.
	defer func() {
		select {
		case <-b.release:
		default:
			close(b.release)
		}
	}()

	dial := func(addr string) *goamqp.Session {
		t.Helper()
		conn, err := goamqp.Dial(ctx, "amqp://"+addr, &goamqp.ConnOptions{SASLType: goamqp.SASLTypePlain(sas.DevKeyName, sas.DevKey)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		s, err := conn.NewSession(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	sess := dial(dev.AMQPAddr)
	snd, err := sess.NewSender(ctx, queue, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, body := range []string{"m1", "m2"} {
		sid := "s"
		m := goamqp.NewMessage([]byte(body))
		m.Properties = &goamqp.MessageProperties{GroupID: &sid}
		if err := snd.Send(ctx, m, nil); err != nil {
			t.Fatal(err)
		}
	}
	accept := func(s *goamqp.Session) *goamqp.Receiver {
		t.Helper()
		rcv, err := s.NewReceiver(ctx, queue, &goamqp.ReceiverOptions{
			Credit: 5, SettlementMode: goamqp.ReceiverSettleModeSecond.Ptr(),
			Filters: []goamqp.LinkFilter{goamqp.NewLinkFilter("com.microsoft:session-filter", 0x137000000C, "s")},
		})
		if err != nil {
			t.Fatal(err)
		}
		return rcv
	}
	rcv := accept(dial(ln.Addr().String()))
	var got []*goamqp.Message
	for len(got) < 2 {
		m, err := rcv.Receive(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, m)
	}
	if string(got[0].GetData()) != "m1" || string(got[1].GetData()) != "m2" {
		t.Fatalf("received %q, %q", got[0].GetData(), got[1].GetData())
	}
	completed := make(chan error, 1)
	go func() { completed <- rcv.AcceptMessage(ctx, got[0]) }()
	<-b.applied // m1 is completed in the partition; its answer waits
	select {
	case <-b.lost: // the lock ran out, and the pump's receive found it so
	case err := <-completed:
		t.Fatalf("the complete was answered (%v) before its settle was", err)
	case <-ctx.Done():
		t.Fatal("no receive found the session lock lost")
	}
	// The front-end has what it needs to detach now; it must not answer
	// the complete with the detach. (A moment for a wrong detach to
	// reach the client; the outcome below does not depend on it.)
	select {
	case err := <-completed:
		t.Fatalf("the complete was answered (%v) before its settle was", err)
	case <-time.After(500 * time.Millisecond):
	}
	close(b.release)
	if err := <-completed; err != nil {
		t.Fatalf("complete of m1, which the partition applied: %v", err)
	}
	// Then the link is detached with session-lock-lost.
	_, err = rcv.Receive(ctx, nil)
	var ae *goamqp.Error
	if !errors.As(err, &ae) || ae.Condition != "com.microsoft:session-lock-lost" {
		t.Fatalf("receive after the session lock ran out: %v, want session-lock-lost", err)
	}

	// The next holder gets m2, counted once, and no m1: a session's
	// messages come in order, so m1 would come first.
	next := accept(dial(dev.AMQPAddr))
	m, err := next.Receive(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if string(m.GetData()) != "m2" || m.Header == nil || m.Header.DeliveryCount != 1 {
		t.Fatalf("the next holder got %q (header %+v), want m2 delivered once before", m.GetData(), m.Header)
	}
}
