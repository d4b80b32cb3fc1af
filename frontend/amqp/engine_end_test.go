package amqp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"testing"
	"time"
)

// ---------------------------------------------------------------------------
// Ending sessions and connections.

func TestEnginePeerClose(t *testing.T) {
	env := startEngine(t, nil, nil)
	c := env.dialOpen()
	conn := env.conn()
	c.begin(0)
	c.attachSender(0, 0, "in", true)
	c.attachReceiver(0, 1, "out")
	c.send(0, engCloseBody)
	c.expectClose("")
	select {
	case <-conn.Done():
	case <-time.After(engTimeout):
		t.Fatal("Conn.Done not closed after the peer's close")
	}
	if err := env.closedWith(); err != nil {
		t.Errorf("ConnHandler.Closed(%v), want nil", err)
	}
	d := env.h.detachedLinks()
	if len(d) != 2 {
		t.Fatalf("Detached for %d links, want 2", len(d))
	}
	for _, e := range d {
		if !errors.Is(e.err, ErrLinkClosed) {
			t.Errorf("Detached(%s, %v), want ErrLinkClosed", e.link, e.err)
		}
	}
}

func TestEngineSessionEndWithAttachedLinks(t *testing.T) {
	// The Azure SDKs end sessions without detaching their links first.
	env := startEngine(t, nil, nil)
	c := env.dialOpen()
	env.conn()
	c.begin(0)
	c.begin(1)
	c.attachSender(0, 0, "a", true)
	c.attachReceiver(0, 1, "b")
	c.attachSender(0, 2, "c", true)
	c.attachSender(1, 0, "other-session", true)
	c.send(0, engEndBody)
	c.expectEnd(0, "")
	engWaitFor(t, "Detached for the session's links", func() bool { return len(env.h.detachedLinks()) == 3 })
	var names []string
	for _, d := range env.h.detachedLinks() {
		names = append(names, d.link)
		if !errors.Is(d.err, ErrLinkClosed) {
			t.Errorf("Detached(%s, %v), want ErrLinkClosed", d.link, d.err)
		}
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"a", "b", "c"}) {
		t.Errorf("Detached for %v, want a b c", names)
	}
	// The channel can be reused at once, with the same handles.
	c.begin(0)
	c.attachSender(0, 0, "a2", true)
	c.transfer(0, engMsgTransfer(0, 0), engDataSection("after"))
	c.readDispositions(1)
	// The other session was not touched.
	c.transfer(1, engMsgTransfer(0, 0), engDataSection("other"))
	c.readDispositions(1)
	if n := len(env.h.detachedLinks()); n != 3 {
		t.Errorf("%d links detached, want 3", n)
	}
}

func TestEngineLinkLimitAfterSessionEnd(t *testing.T) {
	// Attach maxLinksPerConn links over sessions that end without
	// detaching them, then one more: it must be accepted, since no link is
	// attached any more.
	env := startEngine(t, nil, nil)
	c := env.dialOpen()
	env.conn()
	const perSession = handleMax + 1
	frames := make(chan engFrame, 64)
	readErr := make(chan error, 1)
	go func() {
		// Drain the replies concurrently so that neither side blocks.
		defer close(frames)
		for {
			c.nc.SetReadDeadline(time.Now().Add(2 * engTimeout))
			f, err := c.fr.next()
			if err != nil {
				readErr <- err
				return
			}
			r, err := engDecodeFrame(f)
			if err != nil {
				readErr <- err
				return
			}
			if r.code == descAttach || r.code == descFlow || r.code == descBegin {
				continue
			}
			frames <- r
		}
	}()
	for s := 0; s < maxLinksPerConn/perSession; s++ {
		var b []byte
		b = append(b, engFrameBytes(frameTypeAMQP, 0, (&Begin{IncomingWindow: 10, OutgoingWindow: 10}).append)...)
		for h := range uint32(perSession) {
			a := engReceiverAttach(h, fmt.Sprintf("s%d-l%d", s, h))
			b = append(b, engFrameBytes(frameTypeAMQP, 0, a.append)...)
		}
		b = append(b, engFrameBytes(frameTypeAMQP, 0, engEndBody)...)
		c.write(b)
		select {
		case f, ok := <-frames:
			if !ok {
				t.Fatalf("reader stopped: %v", <-readErr)
			}
			if f.code != descEnd || f.err != nil {
				t.Fatalf("got %v, want end", f)
			}
		case <-time.After(2 * engTimeout):
			t.Fatal("no end")
		}
	}
	engWaitFor(t, "Detached for every link", func() bool { return len(env.h.detachedLinks()) == maxLinksPerConn })
	c.send(0, (&Begin{IncomingWindow: 10, OutgoingWindow: 10}).append)
	a := engReceiverAttach(0, "one-more")
	c.send(0, a.append)
	select {
	case f, ok := <-frames:
		if !ok {
			t.Fatalf("reader stopped: %v", <-readErr)
		}
		t.Fatalf("got %v, want the link accepted", f)
	case <-time.After(200 * time.Millisecond):
	}
	if n := env.h.attachCount(); n != maxLinksPerConn+1 {
		t.Fatalf("handler Attach called %d times, want %d", n, maxLinksPerConn+1)
	}
}

func TestEngineShutdown(t *testing.T) {
	env := startEngine(t, nil, nil)
	c := env.dialOpen()
	conn := env.conn()
	c.begin(0)
	c.attachSender(0, 0, "in", true)
	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), engTimeout)
		defer cancel()
		shut <- env.srv.Shutdown(ctx)
	}()
	f := c.expect(descClose)
	engCheckCond(t, "close", f.err, ErrCondConnectionForced)
	c.send(0, engCloseBody)
	c.expectEOF()
	if err := <-shut; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	select {
	case <-conn.Done():
	default:
		t.Error("Conn.Done not closed after Shutdown returned")
	}
	engWaitFor(t, "Detached", func() bool { return len(env.h.detachedLinks()) == 1 })
	// New connections are refused.
	nc, err := net.DialTimeout("tcp", env.addr, engTimeout)
	if err == nil {
		nc.SetReadDeadline(time.Now().Add(engTimeout))
		if n, _ := nc.Read(make([]byte, 1)); n != 0 {
			t.Error("a connection after Shutdown got data")
		}
		nc.Close()
	}
}

func TestEngineShutdownDuringHandshake(t *testing.T) {
	env := startEngine(t, nil, nil)
	c := env.dial()
	c.write(protoHeaderAMQP[:1]) // connected, handshake incomplete
	time.Sleep(50 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := env.srv.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown with a connection in the handshake: %v", err)
	}
	c.expectEOF()
}

// ---------------------------------------------------------------------------
// Peer-controlled values that the engine echoes.

func TestEngineEchoedSourceDefaultOutcome(t *testing.T) {
	// The attach reply echoes the peer's source, and Source.append encodes
	// default-outcome with appendValueMust, which panics on a value the
	// encoder refuses: a panic on the connection goroutine would take the
	// whole process down. So every value the decoder accepts must encode;
	// check that first so that a regression fails here instead of crashing
	// the test binary.
	d := decoder{b: engOddArrayBytes}
	v, err := d.value()
	if err != nil {
		t.Fatalf("decoding % x: %v", engOddArrayBytes, err)
	}
	if _, err := appendValue(nil, v); err != nil {
		t.Fatalf("engine bug: %#v decodes but does not encode (%v): echoing it as a source default-outcome panics the server", v, err)
	}
	env := startEngine(t, nil, nil)
	c := env.dialOpen()
	env.conn()
	c.begin(0)
	// The client's own encoder would panic on this value too, so the
	// attach is encoded by hand. default-outcome is the source's 9th field:
	// array8, size 4, count 1, element constructor list8, element: size 1,
	// count 0 (an empty list in its 8-bit form).
	c.send(0, func(b []byte) []byte {
		b, f := beginFields(b, descAttach)
		b = appendString(b, "odd-source")
		f.field(b, false)
		b = appendUint(b, 0)
		f.field(b, false)
		b = appendBool(b, bool(RoleSender))
		f.field(b, false)
		for range 2 {
			b = appendNull(b)
			f.field(b, false)
		}
		b, sf := beginFields(b, descSource)
		for range 8 {
			b = appendNull(b)
			sf.field(b, false)
		}
		b = append(b, engOddArrayBytes...)
		sf.field(b, false)
		b = sf.end(b)
		f.field(b, false)
		b = (&Target{Address: "queue"}).append(b)
		f.field(b, false)
		return f.end(b)
	})
	// Echoing the source faithfully or refusing the link are both fine;
	// crashing is not.
	for {
		f := c.next()
		switch f.code {
		case descAttach:
			return
		case descClose:
			if f.err == nil {
				t.Fatal("close without error")
			}
			return
		case descFlow:
		default:
			t.Fatalf("got %v", f)
		}
	}
}

// engOddArrayBytes is array8 [list8 ()]: a value the decoder accepts and
// the encoder cannot write back.
var engOddArrayBytes = []byte{codeArray8, 4, 1, codeList8, 1, 0}
