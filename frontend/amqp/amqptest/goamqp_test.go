package amqptest_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"

	"github.com/quorumbus/quorumbus/frontend/amqp"
	"github.com/quorumbus/quorumbus/frontend/amqp/amqptest"
)

// These tests drive the engine with github.com/Azure/go-amqp, the client
// the official Azure Service Bus Go SDK is built on.

func dial(t testing.TB, addr string, opts *goamqp.ConnOptions) *goamqp.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if opts == nil {
		opts = &goamqp.ConnOptions{SASLType: goamqp.SASLTypeAnonymous()}
	}
	c, err := goamqp.Dial(ctx, "amqp://"+addr, opts)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func session(t testing.TB, c *goamqp.Conn) *goamqp.Session {
	t.Helper()
	s, err := c.NewSession(ctxT(t), nil)
	if err != nil {
		t.Fatalf("new session: %v", err)
	}
	return s
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestSendReceivePeekLock(t *testing.T) {
	b, addr := amqptest.Start(t, nil)
	c := dial(t, addr, nil)
	s := session(t, c)
	ctx := ctxT(t)

	snd, err := s.NewSender(ctx, "q1", nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		msg := goamqp.NewMessage([]byte(fmt.Sprintf("hello %d", i)))
		msg.ApplicationProperties = map[string]any{"i": int64(i)}
		if err := snd.Send(ctx, msg, nil); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	if n := b.Len("q1"); n != 10 {
		t.Fatalf("queue holds %d messages, want 10", n)
	}

	rcv, err := s.NewReceiver(ctx, "q1", &goamqp.ReceiverOptions{SettlementMode: goamqp.ReceiverSettleModeSecond.Ptr(), Credit: 3})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		m, err := rcv.Receive(ctx, nil)
		if err != nil {
			t.Fatalf("receive %d: %v", i, err)
		}
		if want := fmt.Sprintf("hello %d", i); string(m.GetData()) != want {
			t.Fatalf("message %d: got %q, want %q", i, m.GetData(), want)
		}
		if m.ApplicationProperties["i"] != int64(i) {
			t.Fatalf("message %d: application properties %v", i, m.ApplicationProperties)
		}
		if err := rcv.AcceptMessage(ctx, m); err != nil {
			t.Fatalf("accept %d: %v", i, err)
		}
	}
	if n := b.Len("q1"); n != 0 {
		t.Fatalf("queue holds %d messages after accepting all, want 0", n)
	}
	if err := rcv.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := snd.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestReleasedMessageComesBack(t *testing.T) {
	b, addr := amqptest.Start(t, nil)
	b.Put("q", []byte{0x00, 0x53, 0x77, 0xa1, 0x01, 'x'}) // amqp-value "x"
	c := dial(t, addr, nil)
	s := session(t, c)
	ctx := ctxT(t)
	rcv, err := s.NewReceiver(ctx, "q", &goamqp.ReceiverOptions{SettlementMode: goamqp.ReceiverSettleModeSecond.Ptr(), Credit: 1})
	if err != nil {
		t.Fatal(err)
	}
	m, err := rcv.Receive(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if m.Value != "x" {
		t.Fatalf("value %v", m.Value)
	}
	if err := rcv.ReleaseMessage(ctx, m); err != nil {
		t.Fatal(err)
	}
	m, err = rcv.Receive(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := rcv.AcceptMessage(ctx, m); err != nil {
		t.Fatal(err)
	}
	if n := b.Len("q"); n != 0 {
		t.Fatalf("%d left", n)
	}
}

func TestReceiveAndDeletePresettled(t *testing.T) {
	b, addr := amqptest.Start(t, nil)
	c := dial(t, addr, nil)
	s := session(t, c)
	ctx := ctxT(t)
	// A pre-settled (fire-and-forget) sender.
	snd, err := s.NewSender(ctx, "rd", &goamqp.SenderOptions{SettlementMode: goamqp.SenderSettleModeSettled.Ptr()})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		if err := snd.Send(ctx, goamqp.NewMessage([]byte{byte(i)}), nil); err != nil {
			t.Fatal(err)
		}
	}
	rcv, err := s.NewReceiver(ctx, "rd", &goamqp.ReceiverOptions{SettlementMode: goamqp.ReceiverSettleModeFirst.Ptr(), RequestedSenderSettleMode: goamqp.SenderSettleModeSettled.Ptr(), Credit: 10})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		m, err := rcv.Receive(ctx, nil)
		if err != nil {
			t.Fatalf("receive %d: %v", i, err)
		}
		if m.GetData()[0] != byte(i) {
			t.Fatalf("message %d out of order: %v", i, m.GetData())
		}
	}
	if n := b.Len("rd"); n != 0 {
		t.Fatalf("%d left", n)
	}
}

func TestLargeMultiFrameMessages(t *testing.T) {
	_, addr := amqptest.Start(t, &amqp.Server{MaxMessageSize: 16 << 20})
	c := dial(t, addr, nil)
	s := session(t, c)
	ctx := ctxT(t)
	snd, err := s.NewSender(ctx, "big", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := snd.MaxMessageSize(); got != 16<<20 {
		t.Fatalf("max-message-size %d announced, want %d", got, 16<<20)
	}
	payload := make([]byte, 10<<20)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	for range 2 {
		if err := snd.Send(ctx, goamqp.NewMessage(payload), nil); err != nil {
			t.Fatal(err)
		}
	}
	rcv, err := s.NewReceiver(ctx, "big", &goamqp.ReceiverOptions{MaxMessageSize: 32 << 20})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		m, err := rcv.Receive(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(m.GetData(), payload) {
			t.Fatal("10 MB message corrupted")
		}
		if err := rcv.AcceptMessage(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
}

func TestOversizedMessageRefused(t *testing.T) {
	b, addr := amqptest.Start(t, &amqp.Server{MaxMessageSize: 64 << 10})
	c := dial(t, addr, nil)
	s := session(t, c)
	ctx := ctxT(t)
	snd, err := s.NewSender(ctx, "small", nil)
	if err != nil {
		t.Fatal(err)
	}
	// go-amqp checks the announced limit itself, so the engine's own check
	// is exercised by a multi-frame message that lies within go-amqp's
	// view: see the raw-frame tests. Here: the client refuses before sending.
	err = snd.Send(ctx, goamqp.NewMessage(make([]byte, 100<<10)), nil)
	if err == nil {
		t.Fatal("a 100 KiB message on a 64 KiB link was accepted")
	}
	// The link still works.
	if err := snd.Send(ctx, goamqp.NewMessage([]byte("ok")), nil); err != nil {
		t.Fatal(err)
	}
	if b.Len("small") != 1 {
		t.Fatal("small message missing")
	}
}

func TestDrain(t *testing.T) {
	b, addr := amqptest.Start(t, nil)
	b.Put("d", []byte{0x00, 0x53, 0x77, 0x41})
	c := dial(t, addr, nil)
	s := session(t, c)
	ctx := ctxT(t)
	rcv, err := s.NewReceiver(ctx, "d", &goamqp.ReceiverOptions{Credit: -1})
	if err != nil {
		t.Fatal(err)
	}
	if err := rcv.IssueCredit(5); err != nil {
		t.Fatal(err)
	}
	m, err := rcv.Receive(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := rcv.AcceptMessage(ctx, m); err != nil {
		t.Fatal(err)
	}
	// The remaining 4 credits are drained back: the queue is empty.
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := rcv.DrainCredit(dctx, nil); err != nil {
		t.Fatalf("drain: %v", err)
	}
}

func TestManyLinksOnManySessions(t *testing.T) {
	b, addr := amqptest.Start(t, nil)
	c := dial(t, addr, nil)
	ctx := ctxT(t)
	const sessions, links, msgs = 8, 8, 20
	var wg sync.WaitGroup
	errs := make(chan error, sessions*links)
	for si := range sessions {
		s := session(t, c)
		for li := range links {
			wg.Add(1)
			go func() {
				defer wg.Done()
				addr := fmt.Sprintf("s%d-l%d", si, li)
				snd, err := s.NewSender(ctx, addr, nil)
				if err != nil {
					errs <- err
					return
				}
				for i := range msgs {
					if err := snd.Send(ctx, goamqp.NewMessage([]byte{byte(i)}), nil); err != nil {
						errs <- err
						return
					}
				}
				rcv, err := s.NewReceiver(ctx, addr, nil)
				if err != nil {
					errs <- err
					return
				}
				for i := range msgs {
					m, err := rcv.Receive(ctx, nil)
					if err != nil {
						errs <- err
						return
					}
					if m.GetData()[0] != byte(i) {
						errs <- fmt.Errorf("%s: message %d out of order", addr, i)
						return
					}
					if err := rcv.AcceptMessage(ctx, m); err != nil {
						errs <- err
						return
					}
				}
				errs <- errors.Join(snd.Close(ctx), rcv.Close(ctx))
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for si := range sessions {
		for li := range links {
			if n := b.Len(fmt.Sprintf("s%d-l%d", si, li)); n != 0 {
				t.Fatalf("s%d-l%d holds %d", si, li, n)
			}
		}
	}
}

func TestRefusedLink(t *testing.T) {
	srv := &amqp.Server{Handler: &amqptest.Broker{Refuse: func(addr string) error {
		if addr == "nope" {
			return amqp.Errorf(amqp.ErrCondNotFound, "no entity named %s", addr)
		}
		return nil
	}}}
	_, addr := amqptest.Start(t, srv)
	c := dial(t, addr, nil)
	s := session(t, c)
	ctx := ctxT(t)
	for _, attach := range []func() error{
		func() error { _, err := s.NewSender(ctx, "nope", nil); return err },
		func() error { _, err := s.NewReceiver(ctx, "nope", nil); return err },
	} {
		err := attach()
		var ae *goamqp.Error
		if !errors.As(err, &ae) || ae.Condition != goamqp.ErrCondNotFound {
			t.Fatalf("refused attach returned %v, want amqp:not-found", err)
		}
	}
	// The session is still usable.
	snd, err := s.NewSender(ctx, "yes", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := snd.Send(ctx, goamqp.NewMessage([]byte("ok")), nil); err != nil {
		t.Fatal(err)
	}
}

func TestIdleKeepAlive(t *testing.T) {
	if testing.Short() {
		t.Skip("waits several seconds")
	}
	// The server closes connections silent for 1.5 s; go-amqp sends
	// keep-alives at half our idle-time-out, so the connection survives a
	// 4 s pause. The client asks for the same from us (IdleTimeout 2 s):
	// our keep-alives keep its reader from timing out.
	_, addr := amqptest.Start(t, &amqp.Server{IdleTimeout: 1500 * time.Millisecond})
	c := dial(t, addr, &goamqp.ConnOptions{SASLType: goamqp.SASLTypeAnonymous(), IdleTimeout: 2 * time.Second})
	s := session(t, c)
	ctx := ctxT(t)
	snd, err := s.NewSender(ctx, "ka", nil)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(4 * time.Second)
	if err := snd.Send(ctx, goamqp.NewMessage([]byte("still here")), nil); err != nil {
		t.Fatalf("send after idle pause: %v", err)
	}
}

func TestIdleTimeoutClosesSilentPeer(t *testing.T) {
	_, addr := amqptest.Start(t, &amqp.Server{IdleTimeout: 300 * time.Millisecond})
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	// Say nothing after the header: the server must give up on us.
	nc.Write([]byte("AMQP\x00\x01\x00\x00"))
	nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 1024)
	for {
		if _, err := nc.Read(buf); err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatal("the server kept a silent connection open")
			}
			return
		}
	}
}

func TestAbruptDisconnect(t *testing.T) {
	b, addr := amqptest.Start(t, nil)
	b.Put("abrupt", []byte{0x00, 0x53, 0x77, 0x41})
	ctx := ctxT(t)
	for range 5 {
		c := dial(t, addr, nil)
		s := session(t, c)
		rcv, err := s.NewReceiver(ctx, "abrupt", &goamqp.ReceiverOptions{SettlementMode: goamqp.ReceiverSettleModeSecond.Ptr(), Credit: 1})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := rcv.Receive(ctx, nil); err != nil {
			t.Fatal(err)
		}
		// Drop the TCP connection with the message unsettled.
		c.Close()
	}
	// The unsettled message went back to the queue every time.
	deadline := time.Now().Add(10 * time.Second)
	for b.Len("abrupt") != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("queue holds %d after abrupt disconnects, want 1", b.Len("abrupt"))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestPipelinedSends(t *testing.T) {
	b, addr := amqptest.Start(t, nil)
	c := dial(t, addr, nil)
	s := session(t, c)
	ctx := ctxT(t)
	snd, err := s.NewSender(ctx, "pipe", nil)
	if err != nil {
		t.Fatal(err)
	}
	const n = 5000
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	payload := make([]byte, 1024)
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 16 {
				if err := snd.Send(ctx, goamqp.NewMessage(payload), nil); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if got := b.Len("pipe"); got != n {
		t.Fatalf("queue holds %d, want %d", got, n)
	}
}
