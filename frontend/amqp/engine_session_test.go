package amqp

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"testing"
)

// ---------------------------------------------------------------------------
// Sessions and links.

func TestEngineFrameWithoutSession(t *testing.T) {
	// Spec 2.7 names no condition for a frame on a channel that has no
	// session; amqp:illegal-state ("a frame that is not permitted in the
	// current state") fits. (qpid-proton answers amqp:not-allowed.)
	env := startEngine(t, nil, nil)
	cases := []struct {
		name string
		body func([]byte) []byte
	}{
		{"attach", func(b []byte) []byte { a := engSenderAttach(0, "x"); return a.append(b) }},
		{"flow", (&Flow{IncomingWindow: 10, OutgoingWindow: 10}).append},
		{"transfer", func(b []byte) []byte { t := engMsgTransfer(0, 0); return t.append(b) }},
		{"disposition", (&Disposition{Role: RoleReceiver, First: 0, Settled: true, State: Accepted{}}).append},
		{"detach", (&Detach{Handle: 0, Closed: true}).append},
		{"end", engEndBody},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := env.with(t)
			c := env.dialOpen()
			env.conn()
			c.begin(0) // a session on another channel changes nothing
			c.send(5, tc.body)
			c.expectClose(ErrCondIllegalState)
			env.closedWith()
		})
	}
	t.Run("begin beyond channel-max", func(t *testing.T) {
		env := env.with(t)
		c := env.dialOpen()
		env.conn()
		c.send(1024, (&Begin{IncomingWindow: 10, OutgoingWindow: 10}).append)
		c.expectClose(ErrCondFramingError)
		env.closedWith()
	})
	t.Run("attach beyond channel-max", func(t *testing.T) {
		env := env.with(t)
		c := env.dialOpen()
		env.conn()
		a := engSenderAttach(0, "x")
		c.send(2000, a.append)
		c.expectClose(ErrCondFramingError)
	})
	t.Run("begin with remote-channel", func(t *testing.T) {
		env := env.with(t)
		c := env.dialOpen()
		env.conn()
		c.send(0, (&Begin{RemoteChannel: 0, HasRemoteChannel: true, IncomingWindow: 10, OutgoingWindow: 10}).append)
		c.expectClose(ErrCondNotAllowed)
		env.closedWith()
	})
	t.Run("begin on a busy channel", func(t *testing.T) {
		env := env.with(t)
		c := env.dialOpen()
		env.conn()
		c.begin(2)
		c.send(2, (&Begin{IncomingWindow: 10, OutgoingWindow: 10}).append)
		c.expectClose(ErrCondIllegalState)
		env.closedWith()
	})
}

func TestEngineUnattachedHandle(t *testing.T) {
	env := startEngine(t, nil, nil)
	cases := []struct {
		name string
		body func([]byte) []byte
	}{
		{"transfer", func(b []byte) []byte { t := engMsgTransfer(7, 0); return append(t.append(b), engDataSection("hi")...) }},
		{"flow", (&Flow{HasNextIncomingID: true, IncomingWindow: 10, OutgoingWindow: 10, Handle: 7, HasHandle: true, DeliveryCount: 0, HasDeliveryCount: true, LinkCredit: 5, HasLinkCredit: true}).append},
		{"detach", (&Detach{Handle: 7, Closed: true}).append},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := env.with(t)
			c := env.dialOpen()
			env.conn()
			c.begin(1)
			c.attachSender(1, 0, "live-"+tc.name, true) // another handle is attached
			c.send(1, tc.body)
			c.expectEnd(1, ErrCondUnattachedHandle)
			engWaitFor(t, "Detached for the live link", func() bool { return len(env.h.detachedLinks()) > 0 })
			// Frames in flight before our end are ignored.
			c.send(1, (&Flow{IncomingWindow: 10, OutgoingWindow: 10, Echo: true}).append)
			c.send(1, engEndBody)
			// The channel is free again at once.
			c.begin(1)
			c.sessionEcho(1)
			c.send(0, engCloseBody)
			c.expectClose("")
		})
	}
	t.Run("disposition for unknown deliveries is ignored", func(t *testing.T) {
		env := env.with(t)
		// Disposition carries delivery ids, not a handle; spec 2.7.6 gives
		// no error for ids the receiver does not know.
		c := env.dialOpen()
		env.conn()
		c.begin(0)
		c.send(0, (&Disposition{Role: RoleReceiver, First: 100, Last: 110, HasLast: true, Settled: true, State: Accepted{}}).append)
		c.send(0, (&Disposition{Role: RoleSender, First: 3, Settled: true}).append)
		c.sessionEcho(0)
	})
	t.Run("attach beyond handle-max", func(t *testing.T) {
		env := env.with(t)
		c := env.dialOpen()
		env.conn()
		b := c.begin(0)
		a := engSenderAttach(b.HandleMax+1, "too-high")
		c.send(0, a.append)
		c.expectClose(ErrCondFramingError)
	})
}

func TestEngineHandleInUse(t *testing.T) {
	env := startEngine(t, nil, nil)
	c := env.dialOpen()
	env.conn()
	c.begin(0)
	c.attachSender(0, 0, "first", true)
	a := engSenderAttach(0, "second")
	c.send(0, a.append)
	c.expectEnd(0, ErrCondHandleInUse)
	engWaitFor(t, "Detached for the first link", func() bool { return len(env.h.detachedLinks()) == 1 })
	if d := env.h.detachedLinks()[0]; d.link != "first" || !errors.Is(d.err, ErrLinkClosed) {
		t.Errorf("Detached(%q, %v), want first with ErrLinkClosed", d.link, d.err)
	}
	if n := env.h.attachCount(); n != 1 {
		t.Errorf("handler Attach called %d times, want 1 (the duplicate must not reach it)", n)
	}
	c.send(0, engEndBody)
	c.begin(0)
	c.attachSender(0, 0, "again", true)
}

func TestEngineSessionWindow(t *testing.T) {
	// The server announces incoming-window W and re-opens it (a session
	// flow) as soon as half of it is used, at receipt. A transfer beyond
	// the advertised window would end the session with
	// amqp:session:window-violation, but the window is re-advertised before
	// it can reach zero, so even a peer that sends 5W transfers without
	// reading never exceeds what the server advertised: the check in
	// onTransfer cannot fire. This test pins that behaviour: no violation,
	// every message delivered, and the window re-opened by flows.
	const w = 4
	const n = 5 * w
	env := startEngine(t, &Server{SessionWindow: w, LinkCredit: 100}, nil)
	c := env.dialOpen()
	env.conn()
	b := c.begin(0)
	if b.IncomingWindow != w {
		t.Fatalf("begin incoming-window %d, want %d", b.IncomingWindow, w)
	}
	c.attachSender(0, 0, "fast", true)
	var burst []byte
	for i := range uint32(n) {
		burst = append(burst, engTransferBytes(0, engMsgTransfer(0, i), engDataSection("m"))...)
	}
	c.write(burst)
	var ds []*Disposition
	reopened := 0
	limit := uint32(w) // transfer ids below this are within the advertised window
	for len(engCoverage(ds)) < n {
		f := c.next()
		switch f.code {
		case descDisposition:
			ds = append(ds, f.disp)
		case descFlow:
			if !f.flow.HasHandle {
				if f.flow.IncomingWindow != w || !f.flow.HasNextIncomingID {
					t.Fatalf("window flow %+v, want incoming-window %d with next-incoming-id", f.flow, w)
				}
				l := f.flow.NextIncomingID + f.flow.IncomingWindow
				if l < limit {
					t.Fatalf("window flow %+v shrinks the advertised limit from %d to %d", f.flow, limit, l)
				}
				limit = l
				reopened++
			}
		default:
			t.Fatalf("got %v while sending within the re-opened window", f)
		}
	}
	if reopened == 0 || limit < n {
		t.Errorf("the server re-opened its window %d times up to transfer-id %d, want past %d", reopened, limit, n)
	}
	if got := len(env.h.messages()); got != n {
		t.Errorf("%d messages delivered, want %d", got, n)
	}
	c.sessionEcho(0)
}

func TestEngineTransferWithoutCredit(t *testing.T) {
	t.Run("credit window 0", func(t *testing.T) {
		h := newEngHandler()
		h.creditWindow = ptr[uint32](0)
		env := startEngine(t, nil, h)
		c := env.dialOpen()
		env.conn()
		c.begin(0)
		c.attachSender(0, 0, "nocredit", false)
		c.transfer(0, engMsgTransfer(0, 0), engDataSection("x"))
		d := c.expect(descDetach)
		if d.detach.Handle != 0 || !d.detach.Closed {
			t.Fatalf("detach %+v, want handle 0 closed", d.detach)
		}
		engCheckCond(t, "detach", d.detach.Error, ErrCondTransferLimitExceeded)
		// A transfer in flight before our detach reached the peer is
		// dropped quietly.
		c.transfer(0, engMsgTransfer(0, 1), engDataSection("y"))
		c.send(0, (&Detach{Handle: 0, Closed: true}).append)
		c.sessionEcho(0) // no detach reply: ours went first
		if m := env.h.messages(); len(m) != 0 {
			t.Errorf("messages delivered without credit: %v", m)
		}
		engWaitFor(t, "Detached", func() bool { return len(env.h.detachedLinks()) == 1 })
	})
	t.Run("more than the credit", func(t *testing.T) {
		h := newEngHandler()
		h.noSettle = true
		env := startEngine(t, &Server{LinkCredit: 2}, h)
		c := env.dialOpen()
		env.conn()
		c.begin(0)
		_, f := c.attachSender(0, 0, "over", true)
		if f.LinkCredit != 2 {
			t.Fatalf("credit %d, want 2", f.LinkCredit)
		}
		var b []byte
		for i := range uint32(3) {
			b = append(b, engTransferBytes(0, engMsgTransfer(0, i), engDataSection("m"))...)
		}
		c.write(b)
		d := c.expect(descDetach)
		engCheckCond(t, "detach", d.detach.Error, ErrCondTransferLimitExceeded)
		if !d.detach.Closed {
			t.Error("detach not closed")
		}
		if m := env.h.messages(); len(m) != 2 {
			t.Errorf("%d messages delivered, want the 2 within credit", len(m))
		}
		c.send(0, (&Detach{Handle: 0, Closed: true}).append)
		c.sessionEcho(0)
	})
}

func TestEngineMessageSizeExceeded(t *testing.T) {
	for _, tc := range []struct {
		name   string
		frames []int
	}{
		{"multi-frame", []int{600, 600, 600}},
		{"single frame", []int{1001}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := startEngine(t, &Server{MaxMessageSize: 1000}, nil)
			c := env.dialOpen()
			env.conn()
			c.begin(0)
			a, _ := c.attachSender(0, 0, "big", true)
			if a.MaxMessageSize != 1000 {
				t.Fatalf("attach reply max-message-size %d, want 1000", a.MaxMessageSize)
			}
			var b []byte
			for i, size := range tc.frames {
				tr := Transfer{Handle: 0, More: i < len(tc.frames)-1}
				if i == 0 {
					tr = engMsgTransfer(0, 0)
					tr.More = len(tc.frames) > 1
				}
				b = append(b, engTransferBytes(0, tr, bytes.Repeat([]byte{'x'}, size))...)
			}
			c.write(b)
			d := c.expect(descDetach)
			if d.detach.Handle != 0 || !d.detach.Closed {
				t.Fatalf("detach %+v, want handle 0 closed", d.detach)
			}
			engCheckCond(t, "detach", d.detach.Error, ErrCondMessageSizeExceeded)
			c.send(0, (&Detach{Handle: 0, Closed: true}).append)

			// The session and connection still work.
			c.attachSender(0, 1, "small", true)
			c.transfer(0, engMsgTransfer(1, 1), engDataSection("fits"))
			ds := c.readDispositions(1)
			if cov := engCoverage(ds); cov[1] != 1 || len(cov) != 1 {
				t.Fatalf("dispositions cover %v, want only delivery 1", cov)
			}
			msgs := env.h.messages()
			if len(msgs) != 1 || msgs[0].link != "small" || !bytes.Equal(msgs[0].payload, engDataSection("fits")) {
				t.Fatalf("messages %+v, want only the small one", msgs)
			}
		})
	}
}

func TestEngineAbortedTransfer(t *testing.T) {
	env := startEngine(t, nil, nil)
	c := env.dialOpen()
	env.conn()
	c.begin(0)
	c.attachSender(0, 0, "abort", true)

	first := engMsgTransfer(0, 0)
	first.More = true
	var b []byte
	b = append(b, engTransferBytes(0, first, bytes.Repeat([]byte{'a'}, 100))...)
	b = append(b, engTransferBytes(0, Transfer{Handle: 0, More: true}, bytes.Repeat([]byte{'b'}, 100))...)
	b = append(b, engTransferBytes(0, Transfer{Handle: 0, Aborted: true}, nil)...)
	// A single-frame message, then a two-frame one.
	b = append(b, engTransferBytes(0, engMsgTransfer(0, 1), engDataSection("one"))...)
	two := engMsgTransfer(0, 2)
	two.More = true
	msg2 := engDataSection("two-frames")
	b = append(b, engTransferBytes(0, two, msg2[:5])...)
	b = append(b, engTransferBytes(0, Transfer{Handle: 0}, msg2[5:])...)
	c.write(b)

	ds := c.readDispositions(2)
	cov := engCoverage(ds)
	if len(cov) != 2 || cov[1] != 1 || cov[2] != 1 {
		t.Fatalf("dispositions cover %v, want deliveries 1 and 2 once each", cov)
	}
	msgs := env.h.messages()
	if len(msgs) != 2 {
		t.Fatalf("%d messages, want 2: %+v", len(msgs), msgs)
	}
	if msgs[0].id != 1 || !bytes.Equal(msgs[0].payload, engDataSection("one")) {
		t.Errorf("first message %+v", msgs[0])
	}
	if msgs[1].id != 2 || !bytes.Equal(msgs[1].payload, msg2) || string(msgs[1].tag) != "tag2" {
		t.Errorf("second message %+v", msgs[1])
	}
	c.sessionEcho(0)
}

func TestEngineSettleModesEchoed(t *testing.T) {
	env := startEngine(t, nil, nil)
	c := env.dialOpen()
	env.conn()
	c.begin(0)
	snd := []*uint8{nil, ptr(SenderSettleUnsettled), ptr(SenderSettleSettled), ptr(SenderSettleMixed)}
	rcv := []*uint8{nil, ptr(ReceiverSettleFirst), ptr(ReceiverSettleSecond)}
	show := func(p *uint8) string {
		if p == nil {
			return "absent"
		}
		return fmt.Sprint(*p)
	}
	same := func(a, b *uint8) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }
	handle := uint32(0)
	for _, role := range []Role{RoleSender, RoleReceiver} {
		for _, s := range snd {
			for _, r := range rcv {
				name := fmt.Sprintf("%v/snd=%s/rcv=%s", role, show(s), show(r))
				t.Run(name, func(t *testing.T) {
					c := c.with(t)
					a := engSenderAttach(handle, name)
					if role == RoleReceiver {
						a = engReceiverAttach(handle, name)
					}
					a.SndSettleMode, a.RcvSettleMode = s, r
					c.send(0, a.append)
					f := c.expect(descAttach)
					if f.attach.Handle != handle {
						t.Fatalf("reply for handle %d, want %d", f.attach.Handle, handle)
					}
					if !same(f.attach.SndSettleMode, s) || !same(f.attach.RcvSettleMode, r) {
						t.Errorf("reply snd=%s rcv=%s, want snd=%s rcv=%s",
							show(f.attach.SndSettleMode), show(f.attach.RcvSettleMode), show(s), show(r))
					}
					if engFieldPresent(t, f.body, 3) != (s != nil) || engFieldPresent(t, f.body, 4) != (r != nil) {
						t.Errorf("field presence on the wire differs from the request")
					}
					if role == RoleSender {
						c.expect(descFlow)
					}
				})
				handle++
			}
		}
	}
}

func TestEngineAttachReplyFields(t *testing.T) {
	env := startEngine(t, &Server{MaxMessageSize: 123456}, nil)
	c := env.dialOpen()
	env.conn()
	c.begin(0)

	t.Run("peer sender", func(t *testing.T) {
		c := c.with(t)
		a := engSenderAttach(0, "in")
		c.send(0, a.append)
		f := c.expect(descAttach)
		c.expect(descFlow)
		if f.attach.Role != RoleReceiver {
			t.Errorf("reply role %v, want receiver", f.attach.Role)
		}
		if f.attach.MaxMessageSize != 123456 || !engFieldPresent(t, f.body, 10) {
			t.Errorf("reply max-message-size %d, want 123456", f.attach.MaxMessageSize)
		}
		if engFieldPresent(t, f.body, 9) {
			t.Errorf("receiver attach carries initial-delivery-count")
		}
		if f.attach.Source == nil || f.attach.Source.Address != "client" || f.attach.Target == nil || f.attach.Target.Address != "queue" {
			t.Errorf("terminus not echoed: source %+v target %+v", f.attach.Source, f.attach.Target)
		}
	})
	t.Run("peer receiver", func(t *testing.T) {
		c := c.with(t)
		a := engReceiverAttach(1, "out")
		c.send(0, a.append)
		f := c.expect(descAttach)
		if f.attach.Role != RoleSender {
			t.Errorf("reply role %v, want sender", f.attach.Role)
		}
		if !engFieldPresent(t, f.body, 9) || f.attach.InitialDeliveryCount != 0 {
			t.Errorf("sender attach must carry initial-delivery-count 0 (present %v, value %d)",
				engFieldPresent(t, f.body, 9), f.attach.InitialDeliveryCount)
		}
		if f.attach.Source == nil || f.attach.Source.Address != "queue" {
			t.Errorf("source not echoed: %+v", f.attach.Source)
		}
	})
}

func TestEngineRefusedLink(t *testing.T) {
	h := newEngHandler()
	h.refuse = func(l *Link) error {
		switch l.Name() {
		case "missing-out", "missing-in":
			return Errorf(ErrCondNotFound, "no such queue")
		case "broken":
			return errors.New("disk on fire")
		}
		return nil
	}
	env := startEngine(t, nil, h)
	c := env.dialOpen()
	env.conn()
	c.begin(0)
	cases := []struct {
		name string
		role Role
		want Symbol
	}{
		{"missing-in", RoleSender, ErrCondNotFound},
		{"missing-out", RoleReceiver, ErrCondNotFound},
		{"broken", RoleSender, ErrCondInternalError},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := c.with(t)
			handle := uint32(i)
			a := engSenderAttach(handle, tc.name)
			if tc.role == RoleReceiver {
				a = engReceiverAttach(handle, tc.name)
			}
			c.send(0, a.append)
			f := c.expect(descAttach)
			if tc.role == RoleSender {
				if f.attach.Target != nil || f.attach.Source == nil {
					t.Errorf("refusal of a peer sender: source %+v target %+v, want the target null", f.attach.Source, f.attach.Target)
				}
			} else if f.attach.Source != nil || f.attach.Target == nil {
				t.Errorf("refusal of a peer receiver: source %+v target %+v, want the source null", f.attach.Source, f.attach.Target)
			}
			d := c.expect(descDetach)
			if d.detach.Handle != handle || !d.detach.Closed {
				t.Fatalf("detach %+v, want handle %d closed", d.detach, handle)
			}
			engCheckCond(t, "detach", d.detach.Error, tc.want)
			// Our detach completes it without a reply; the handle is free.
			c.send(0, (&Detach{Handle: handle, Closed: true}).append)
			c.sessionEcho(0)
		})
	}
	t.Run("handle reusable", func(t *testing.T) {
		c := c.with(t)
		c.attachSender(0, 0, "fine", true)
	})
	t.Run("handler of the wrong kind", func(t *testing.T) {
		c := c.with(t)
		h.mu.Lock()
		h.attachHook = func(l *Link) (LinkHandler, error) { return engSendLink{h}, nil } // cannot take messages
		h.mu.Unlock()
		defer func() { h.mu.Lock(); h.attachHook = nil; h.mu.Unlock() }()
		a := engSenderAttach(9, "wrong-kind")
		c.send(0, a.append)
		if f := c.expect(descAttach); f.attach.Target != nil {
			t.Errorf("target %+v, want null", f.attach.Target)
		}
		d := c.expect(descDetach)
		engCheckCond(t, "detach", d.detach.Error, ErrCondNotImplemented)
	})
}

func TestEngineDispositionCoalescing(t *testing.T) {
	const n = 10
	env := startEngine(t, nil, nil)
	c := env.dialOpen()
	env.conn()
	c.begin(0)
	c.attachSender(0, 0, "batch", true)
	var b []byte
	for i := range uint32(n) {
		b = append(b, engTransferBytes(0, engMsgTransfer(0, i), engDataSection(fmt.Sprint(i)))...)
	}
	c.write(b)
	ds := c.readDispositions(n)
	cov := engCoverage(ds)
	for id := range uint32(n) {
		if cov[id] != 1 {
			t.Errorf("delivery %d covered by %d dispositions, want 1", id, cov[id])
		}
	}
	if len(cov) != n {
		t.Errorf("dispositions cover %v, want exactly 0..%d", cov, n-1)
	}
	for _, d := range ds {
		if d.Role != RoleReceiver || !d.Settled {
			t.Errorf("disposition %+v, want role receiver and settled", d)
		}
		if _, ok := d.State.(Accepted); !ok {
			t.Errorf("disposition state %#v, want accepted", d.State)
		}
	}
	t.Logf("%d transfers settled by %d disposition frames", n, len(ds))
	if len(ds) >= n {
		t.Errorf("%d disposition frames for %d settlements: not coalesced", len(ds), n)
	}
	c.sessionEcho(0)
}

// TestEngineSenderDispositionRunsCapped: the settlements of deliveries the
// server sent coalesce, but into runs of at most maxSenderRun ids (see
// there); the peer's one disposition of all of them is answered in full.
func TestEngineSenderDispositionRunsCapped(t *testing.T) {
	const n = 3*maxSenderRun + 5
	h := newEngHandler()
	h.sendPayload = engDataSection("x")
	h.confirm = true
	env := startEngine(t, nil, h)
	c := env.dialOpen()
	env.conn()
	c.begin(0)
	c.attachReceiver(0, 0, "out")
	c.send(0, (&Flow{HasNextIncomingID: true, IncomingWindow: 1000, OutgoingWindow: 1000,
		Handle: 0, HasHandle: true, DeliveryCount: 0, HasDeliveryCount: true, LinkCredit: n, HasLinkCredit: true}).append)
	for range n {
		if f := c.expect(descTransfer); f.transfer.More || f.transfer.Settled {
			t.Fatalf("transfer %+v, want one frame, unsettled", f.transfer)
		}
	}
	c.send(0, (&Disposition{Role: RoleReceiver, First: 0, Last: n - 1, HasLast: true, State: Accepted{}}).append)
	ds := c.readDispositions(n)
	cov := engCoverage(ds)
	for id := range uint32(n) {
		if cov[id] != 1 {
			t.Errorf("delivery %d covered by %d dispositions, want 1", id, cov[id])
		}
	}
	for _, d := range ds {
		if d.Role != RoleSender || !d.Settled {
			t.Errorf("disposition %+v, want role sender and settled", d)
		}
		if d.HasLast && d.Last-d.First+1 > maxSenderRun {
			t.Errorf("disposition of %d..%d: more than %d ids", d.First, d.Last, maxSenderRun)
		}
	}
	// How many runs go out depends on when the writer flushes; fewer frames
	// than settlements shows that they coalesce at all.
	if len(ds) >= n {
		t.Errorf("%d disposition frames for %d settlements: runs not coalesced", len(ds), n)
	}
	c.sessionEcho(0)
}

func TestEngineEcho(t *testing.T) {
	env := startEngine(t, &Server{LinkCredit: 7}, nil)
	c := env.dialOpen()
	env.conn()
	c.begin(0)
	c.attachReceiver(0, 0, "out")
	c.attachSender(0, 1, "in", true)

	t.Run("peer receiver", func(t *testing.T) {
		env := env.with(t)
		c := c.with(t)
		c.send(0, (&Flow{HasNextIncomingID: true, IncomingWindow: 100, OutgoingWindow: 100,
			Handle: 0, HasHandle: true, DeliveryCount: 0, HasDeliveryCount: true, LinkCredit: 5, HasLinkCredit: true, Echo: true}).append)
		f := c.expect(descFlow)
		if !f.flow.HasHandle || f.flow.Handle != 0 {
			t.Fatalf("echo answered with %v, want a flow for handle 0", f)
		}
		if f.flow.LinkCredit != 5 || f.flow.DeliveryCount != 0 || f.flow.Echo {
			t.Errorf("echoed flow %+v, want credit 5, delivery-count 0, no echo", f.flow)
		}
		engWaitFor(t, "SenderHandler.Flow", func() bool { env.h.mu.Lock(); defer env.h.mu.Unlock(); return env.h.flows == 1 })
	})
	t.Run("peer sender", func(t *testing.T) {
		c := c.with(t)
		c.send(0, (&Flow{HasNextIncomingID: true, IncomingWindow: 100, OutgoingWindow: 100,
			Handle: 1, HasHandle: true, DeliveryCount: 0, HasDeliveryCount: true, LinkCredit: 0, HasLinkCredit: true, Echo: true}).append)
		f := c.expect(descFlow)
		if !f.flow.HasHandle || f.flow.Handle != 1 || f.flow.LinkCredit != 7 {
			t.Fatalf("echo answered with %+v, want handle 1 with credit 7", f.flow)
		}
	})
	t.Run("session", func(t *testing.T) {
		c := c.with(t)
		f := c.sessionEcho(0)
		if f.IncomingWindow == 0 || !f.HasNextIncomingID {
			t.Errorf("session flow %+v", f)
		}
	})
}

func TestEngineSendToReceiver(t *testing.T) {
	// The SenderHandler sends one message per credit; the server splits
	// them into frames no larger than the peer's max-frame-size.
	h := newEngHandler()
	h.sendPayload = append(engDataSection(string(bytes.Repeat([]byte{'p'}, 1500))), engDataSection("end")...)
	env := startEngine(t, nil, h)
	c := env.dial()
	o := engClientOpen()
	o.MaxFrameSize = minMaxFrameSize
	c.open(o)
	env.conn()
	c.begin(0)
	c.attachReceiver(0, 0, "out")
	c.send(0, (&Flow{HasNextIncomingID: true, IncomingWindow: 100, OutgoingWindow: 100,
		Handle: 0, HasHandle: true, DeliveryCount: 0, HasDeliveryCount: true, LinkCredit: 2, HasLinkCredit: true}).append)
	got := map[uint32][]byte{}
	var order []uint32
	current, active := uint32(0), false
	for done := 0; done < 2; {
		f := c.expect(descTransfer)
		if size := len(f.body) + frameHeaderSize; size > minMaxFrameSize {
			t.Fatalf("transfer frame of %d bytes exceeds our max-frame-size %d", size, minMaxFrameSize)
		}
		if !active {
			if !f.transfer.HasDeliveryID || f.transfer.Settled {
				t.Fatalf("first transfer %+v, want a delivery-id, unsettled", f.transfer)
			}
			current, active = f.transfer.DeliveryID, true
			order = append(order, current)
		}
		got[current] = append(got[current], f.payload...)
		if !f.transfer.More {
			active = false
			done++
		}
	}
	if !slices.Equal(order, []uint32{0, 1}) {
		t.Fatalf("delivery ids %v, want [0 1]", order)
	}
	for id, p := range got {
		if !bytes.Equal(p, h.sendPayload) {
			t.Errorf("delivery %d reassembled to %d bytes, want %d", id, len(p), len(h.sendPayload))
		}
	}
	c.send(0, (&Disposition{Role: RoleReceiver, First: 0, Last: 1, HasLast: true, Settled: true, State: Accepted{}}).append)
	engWaitFor(t, "SenderHandler.Disposition", func() bool { h.mu.Lock(); defer h.mu.Unlock(); return len(h.sdisps) == 2 })
	h.mu.Lock()
	for _, d := range h.sdisps {
		if _, ok := d.state.(Accepted); !ok || !d.settled {
			t.Errorf("Disposition %+v, want accepted and settled", d)
		}
	}
	h.mu.Unlock()
}
