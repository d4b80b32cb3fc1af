package amqp

// Engine tests that speak raw AMQP frames to a real Server over TCP and
// check that bad input ends in the error the spec names (never a panic, a
// hang or unbounded memory), and that the protocol-header and SASL
// negotiation behave per spec. Every read has a deadline, so a server that
// does not answer fails the test instead of hanging it.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"
)

const engTimeout = 5 * time.Second

// ---------------------------------------------------------------------------
// Test handler: accepts connections and links, records what happens.

type engMessage struct {
	link    string
	id      uint32
	tag     []byte
	payload []byte
	settled bool
}

type engDetach struct {
	link string
	err  error
}

type engSenderDisp struct {
	link    string
	id      uint32
	state   DeliveryState
	settled bool
}

type engHandler struct {
	openErr      error                              // OpenConn refuses with it
	attachHook   func(l *Link) (LinkHandler, error) // replaces the default Attach when set
	refuse       func(l *Link) error                // a non-nil result refuses the link
	creditWindow *uint32                            // SetCreditWindow in Attach
	noSettle     bool                               // leave received messages unsettled
	sendPayload  []byte                             // links where the peer receives send this per credit
	confirm      bool                               // settle the peer's unsettled dispositions of what we sent

	conns  chan *Conn
	closed chan error

	mu       sync.Mutex
	attached []string
	msgs     []engMessage
	detached []engDetach
	sdisps   []engSenderDisp
	flows    int
}

func newEngHandler() *engHandler {
	return &engHandler{conns: make(chan *Conn, 16), closed: make(chan error, 16)}
}

func (h *engHandler) OpenConn(c *Conn) (ConnHandler, error) {
	select {
	case h.conns <- c:
	default:
	}
	if h.openErr != nil {
		return nil, h.openErr
	}
	return h, nil
}

func (h *engHandler) Closed(err error) {
	select {
	case h.closed <- err:
	default:
	}
}

func (h *engHandler) Attach(l *Link) (LinkHandler, error) {
	h.mu.Lock()
	h.attached = append(h.attached, l.Name())
	hook, refuse := h.attachHook, h.refuse
	h.mu.Unlock()
	if hook != nil {
		return hook(l)
	}
	if refuse != nil {
		if err := refuse(l); err != nil {
			return nil, err
		}
	}
	if l.PeerRole() == RoleSender {
		if h.creditWindow != nil {
			l.SetCreditWindow(*h.creditWindow)
		}
		return engRecvLink{h}, nil
	}
	return engSendLink{h}, nil
}

func (h *engHandler) recordDetach(l *Link, err error) {
	h.mu.Lock()
	h.detached = append(h.detached, engDetach{l.Name(), err})
	h.mu.Unlock()
}

func (h *engHandler) messages() []engMessage {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.msgs)
}

func (h *engHandler) detachedLinks() []engDetach {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.detached)
}

func (h *engHandler) attachCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.attached)
}

// engRecvLink serves links on which the peer sends.
type engRecvLink struct{ h *engHandler }

func (r engRecvLink) Detached(l *Link, err error) { r.h.recordDetach(l, err) }

func (r engRecvLink) Message(l *Link, d *Delivery) {
	r.h.mu.Lock()
	r.h.msgs = append(r.h.msgs, engMessage{
		link: l.Name(), id: d.ID, tag: bytes.Clone(d.Tag), payload: bytes.Clone(d.Payload), settled: d.Settled,
	})
	r.h.mu.Unlock()
	if !d.Settled && !r.h.noSettle {
		l.Settle(d.ID, Accepted{})
	}
}

// engSendLink serves links on which the peer receives: it sends
// sendPayload once per credit granted.
type engSendLink struct{ h *engHandler }

func (s engSendLink) Detached(l *Link, err error) { s.h.recordDetach(l, err) }

func (s engSendLink) Flow(l *Link, credit uint32, drain bool) {
	s.h.mu.Lock()
	s.h.flows++
	s.h.mu.Unlock()
	if s.h.sendPayload == nil {
		return
	}
	for i := uint32(0); i < credit; i++ {
		if _, err := l.Send([]byte(fmt.Sprintf("t%d", i)), s.h.sendPayload, false); err != nil {
			return
		}
	}
}

func (s engSendLink) Disposition(l *Link, id uint32, state DeliveryState, settled bool) {
	s.h.mu.Lock()
	s.h.sdisps = append(s.h.sdisps, engSenderDisp{l.Name(), id, state, settled})
	confirm := s.h.confirm
	s.h.mu.Unlock()
	if confirm && !settled {
		_ = l.Settle(id, Accepted{})
	}
}

// ---------------------------------------------------------------------------
// Server under test.

type engEnv struct {
	t    *testing.T
	srv  *Server
	h    *engHandler
	addr string
}

// engLogger discards what a server logs.
func engLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func startEngine(t *testing.T, srv *Server, h *engHandler) *engEnv {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return startEngineOn(t, srv, h, l)
}

// startEngineOn serves l; the test's cleanup shuts the server down.
func startEngineOn(t *testing.T, srv *Server, h *engHandler, l net.Listener) *engEnv {
	t.Helper()
	if srv == nil {
		srv = &Server{}
	}
	if h == nil {
		h = newEngHandler()
	}
	srv.Handler = h
	if srv.Logger == nil {
		srv.Logger = engLogger()
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), engTimeout)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		select {
		case err := <-served:
			if !errors.Is(err, ErrServerClosed) {
				t.Errorf("Serve returned %v, want ErrServerClosed", err)
			}
		case <-time.After(engTimeout):
			t.Errorf("Serve did not return after Shutdown")
		}
	})
	return &engEnv{t: t, srv: srv, h: h, addr: l.Addr().String()}
}

// with returns the environment for a subtest: failures go to t.
func (e *engEnv) with(t *testing.T) *engEnv {
	e2 := *e
	e2.t = t
	return &e2
}

// conn waits for the *Conn the handler saw in OpenConn.
func (e *engEnv) conn() *Conn {
	e.t.Helper()
	select {
	case c := <-e.h.conns:
		return c
	case <-time.After(engTimeout):
		e.t.Fatal("OpenConn was not called")
		return nil
	}
}

func (e *engEnv) noOpenConn() {
	e.t.Helper()
	select {
	case <-e.h.conns:
		e.t.Fatal("OpenConn was called for a connection that should not have opened")
	default:
	}
}

// closedWith waits for ConnHandler.Closed and returns its error.
func (e *engEnv) closedWith() error {
	e.t.Helper()
	select {
	case err := <-e.h.closed:
		return err
	case <-time.After(engTimeout):
		e.t.Fatal("ConnHandler.Closed was not called")
		return nil
	}
}

func engWaitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(engTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// ---------------------------------------------------------------------------
// Raw client.

type engConn struct {
	t  *testing.T
	nc net.Conn
	fr *frameReader
}

// with returns the connection for a subtest: failures go to t.
func (c *engConn) with(t *testing.T) *engConn {
	c2 := *c
	c2.t = t
	return &c2
}

// engFrame is one frame read from the server, decoded.
type engFrame struct {
	typ      byte
	ch       uint16
	code     uint64
	body     []byte // a copy of the frame body
	payload  []byte // transfer payload
	open     *Open
	begin    *Begin
	attach   *Attach
	flow     *Flow
	transfer *Transfer
	disp     *Disposition
	detach   *Detach
	err      *Error // end and close
	mechs    []Symbol
	outcome  *saslOutcome
}

func engPerfName(code uint64) string {
	switch code {
	case descOpen:
		return "open"
	case descBegin:
		return "begin"
	case descAttach:
		return "attach"
	case descFlow:
		return "flow"
	case descTransfer:
		return "transfer"
	case descDisposition:
		return "disposition"
	case descDetach:
		return "detach"
	case descEnd:
		return "end"
	case descClose:
		return "close"
	case descSASLMechanisms:
		return "sasl-mechanisms"
	case descSASLInit:
		return "sasl-init"
	case descSASLOutcome:
		return "sasl-outcome"
	}
	return fmt.Sprintf("performative 0x%x", code)
}

func (f engFrame) String() string {
	s := fmt.Sprintf("%s on channel %d", engPerfName(f.code), f.ch)
	switch {
	case f.err != nil:
		s += fmt.Sprintf(" (error %v)", f.err)
	case f.detach != nil:
		s += fmt.Sprintf(" (handle %d closed=%v error %v)", f.detach.Handle, f.detach.Closed, f.detach.Error)
	case f.attach != nil:
		s += fmt.Sprintf(" (handle %d %q)", f.attach.Handle, f.attach.Name)
	case f.flow != nil && f.flow.HasHandle:
		s += fmt.Sprintf(" (handle %d credit %d)", f.flow.Handle, f.flow.LinkCredit)
	}
	return s
}

func engDecodeFrame(f frame) (engFrame, error) {
	r := engFrame{typ: f.typ, ch: f.channel, body: bytes.Clone(f.body)}
	code, d, err := framePerformative(r.body)
	if err != nil {
		return r, err
	}
	r.code = code
	switch code {
	case descOpen:
		r.open = new(Open)
		err = r.open.decode(&d)
	case descBegin:
		r.begin = new(Begin)
		err = r.begin.decode(&d)
	case descAttach:
		r.attach = new(Attach)
		err = r.attach.decode(&d)
	case descFlow:
		r.flow = new(Flow)
		err = r.flow.decode(&d)
	case descTransfer:
		r.transfer = new(Transfer)
		err = r.transfer.decode(&d)
		r.payload = r.body[d.off:]
	case descDisposition:
		r.disp = new(Disposition)
		err = r.disp.decode(&d)
	case descDetach:
		r.detach = new(Detach)
		err = r.detach.decode(&d)
	case descEnd, descClose:
		r.err, err = decodeErrorOnly(&d)
	case descSASLMechanisms:
		var m saslMechanisms
		err = m.decode(&d)
		r.mechs = m.Mechanisms
	case descSASLOutcome:
		r.outcome = new(saslOutcome)
		err = r.outcome.decode(&d)
	default:
		err = fmt.Errorf("unexpected performative 0x%x", code)
	}
	return r, err
}

func (e *engEnv) dial() *engConn {
	e.t.Helper()
	nc, err := net.DialTimeout("tcp", e.addr, engTimeout)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { nc.Close() })
	return &engConn{t: e.t, nc: nc, fr: newFrameReader(nc, 1<<20)}
}

// engClientOpen is the open frame our raw client sends by default.
func engClientOpen() Open {
	return Open{ContainerID: "raw-client", MaxFrameSize: 65536, ChannelMax: 65535}
}

// dialOpen connects and exchanges AMQP headers and open frames.
func (e *engEnv) dialOpen() *engConn {
	e.t.Helper()
	c := e.dial()
	c.open(engClientOpen())
	return c
}

func (c *engConn) write(b []byte) {
	c.t.Helper()
	c.nc.SetWriteDeadline(time.Now().Add(engTimeout))
	if _, err := c.nc.Write(b); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

func engFrameBytes(typ byte, ch uint16, body func([]byte) []byte) []byte {
	b, start := appendFrameHeader(nil, typ, ch)
	return finishFrame(body(b), start)
}

func engTransferBytes(ch uint16, t Transfer, payload []byte) []byte {
	b, start := appendFrameHeader(nil, frameTypeAMQP, ch)
	b = t.append(b)
	b = append(b, payload...)
	return finishFrame(b, start)
}

func engEndBody(b []byte) []byte   { return appendErrorOnly(b, descEnd, nil) }
func engCloseBody(b []byte) []byte { return appendErrorOnly(b, descClose, nil) }

// send writes one AMQP frame.
func (c *engConn) send(ch uint16, body func([]byte) []byte) {
	c.t.Helper()
	c.write(engFrameBytes(frameTypeAMQP, ch, body))
}

func (c *engConn) transfer(ch uint16, t Transfer, payload []byte) {
	c.t.Helper()
	c.write(engTransferBytes(ch, t, payload))
}

func (c *engConn) readHeader() [8]byte {
	c.t.Helper()
	c.nc.SetReadDeadline(time.Now().Add(engTimeout))
	h, err := c.fr.protoHeader()
	if err != nil {
		c.t.Fatalf("reading the protocol header: %v", err)
	}
	return h
}

func (c *engConn) expectHeader(want [8]byte) {
	c.t.Helper()
	if got := c.readHeader(); got != want {
		c.t.Fatalf("server protocol header % x (%q), want % x", got, got[:], want)
	}
}

// next reads the next non-empty frame.
func (c *engConn) next() engFrame {
	c.t.Helper()
	for {
		c.nc.SetReadDeadline(time.Now().Add(engTimeout))
		f, err := c.fr.next()
		if err != nil {
			c.t.Fatalf("reading a frame from the server: %v", err)
		}
		if len(f.body) == 0 {
			continue // keep-alive
		}
		r, err := engDecodeFrame(f)
		if err != nil {
			c.t.Fatalf("decoding %s from the server: %v", engPerfName(r.code), err)
		}
		return r
	}
}

// expect reads the next frame and fails unless it is the given performative.
func (c *engConn) expect(code uint64) engFrame {
	c.t.Helper()
	f := c.next()
	if f.code != code {
		c.t.Fatalf("got %v, want %s", f, engPerfName(code))
	}
	return f
}

// expectEOF checks that the server closes the socket without sending more.
func (c *engConn) expectEOF() {
	c.t.Helper()
	for {
		c.nc.SetReadDeadline(time.Now().Add(engTimeout))
		f, err := c.fr.next()
		if err == nil {
			if len(f.body) == 0 {
				continue
			}
			r, _ := engDecodeFrame(f)
			c.t.Fatalf("expected the server to close the socket, got %v", r)
		}
		switch {
		case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNRESET):
			return
		case errors.Is(err, os.ErrDeadlineExceeded):
			c.t.Fatalf("the server did not close the socket within %v", engTimeout)
		default:
			c.t.Fatalf("reading after close: %v", err)
		}
	}
}

func engCheckCond(t *testing.T, what string, e *Error, want Symbol) {
	t.Helper()
	switch {
	case want == "*":
		if e == nil {
			t.Fatalf("%s carries no error, want one", what)
		}
	case want == "" && e != nil:
		t.Fatalf("%s carries error %v, want none", what, e)
	case want != "" && e == nil:
		t.Fatalf("%s carries no error, want %s", what, want)
	case want != "" && e.Condition != want:
		t.Fatalf("%s carries %v, want condition %s", what, e, want)
	}
}

// expectClose reads a close frame with the given condition ("" for none,
// "*" for any),
// then checks that the socket ends.
func (c *engConn) expectClose(want Symbol) *Error {
	c.t.Helper()
	f := c.expect(descClose)
	if f.ch != 0 {
		c.t.Errorf("close on channel %d, want 0", f.ch)
	}
	engCheckCond(c.t, "close", f.err, want)
	c.expectEOF()
	return f.err
}

// expectEnd reads an end frame on ch with the given condition.
func (c *engConn) expectEnd(ch uint16, want Symbol) *Error {
	c.t.Helper()
	f := c.expect(descEnd)
	if f.ch != ch {
		c.t.Fatalf("end on channel %d, want %d", f.ch, ch)
	}
	engCheckCond(c.t, "end", f.err, want)
	return f.err
}

func (c *engConn) open(o Open) engFrame {
	c.t.Helper()
	c.write(append(protoHeaderAMQP[:], engFrameBytes(frameTypeAMQP, 0, o.append)...))
	c.expectHeader(protoHeaderAMQP)
	return c.expect(descOpen)
}

func (c *engConn) begin(ch uint16) *Begin {
	c.t.Helper()
	c.send(ch, (&Begin{IncomingWindow: 5000, OutgoingWindow: 5000}).append)
	f := c.expect(descBegin)
	if f.ch != ch || !f.begin.HasRemoteChannel || f.begin.RemoteChannel != ch {
		c.t.Fatalf("begin reply on channel %d with remote-channel %d (set %v), want %d", f.ch, f.begin.RemoteChannel, f.begin.HasRemoteChannel, ch)
	}
	return f.begin
}

func engSenderAttach(handle uint32, name string) Attach {
	return Attach{Name: name, Handle: handle, Role: RoleSender, Source: &Source{Address: "client"}, Target: &Target{Address: "queue"}}
}

func engReceiverAttach(handle uint32, name string) Attach {
	return Attach{Name: name, Handle: handle, Role: RoleReceiver, Source: &Source{Address: "queue"}, Target: &Target{Address: "client"}}
}

// attachSender attaches a link on which the client sends. With wantCredit
// it also reads the flow that grants credit and returns it.
func (c *engConn) attachSender(ch uint16, handle uint32, name string, wantCredit bool) (*Attach, *Flow) {
	c.t.Helper()
	a := engSenderAttach(handle, name)
	c.send(ch, a.append)
	r := c.expect(descAttach)
	if r.attach.Handle != handle || r.attach.Role != RoleReceiver || r.attach.Target == nil {
		c.t.Fatalf("attach reply %+v, want handle %d role receiver with a target", r.attach, handle)
	}
	if !wantCredit {
		return r.attach, nil
	}
	f := c.expect(descFlow)
	if !f.flow.HasHandle || f.flow.Handle != handle || f.flow.LinkCredit == 0 {
		c.t.Fatalf("flow after attach %+v, want credit for handle %d", f.flow, handle)
	}
	return r.attach, f.flow
}

// attachReceiver attaches a link on which the client receives.
func (c *engConn) attachReceiver(ch uint16, handle uint32, name string) *Attach {
	c.t.Helper()
	a := engReceiverAttach(handle, name)
	c.send(ch, a.append)
	r := c.expect(descAttach)
	if r.attach.Handle != handle || r.attach.Role != RoleSender || r.attach.Source == nil {
		c.t.Fatalf("attach reply %+v, want handle %d role sender with a source", r.attach, handle)
	}
	return r.attach
}

// sessionEcho sends a session flow with echo set and expects the server's
// flow back: a cheap way to prove the session and connection still work
// and that nothing else was sent before it.
func (c *engConn) sessionEcho(ch uint16) *Flow {
	c.t.Helper()
	c.send(ch, (&Flow{IncomingWindow: 5000, NextOutgoingID: 0, OutgoingWindow: 5000, Echo: true}).append)
	f := c.expect(descFlow)
	if f.ch != ch || f.flow.HasHandle {
		c.t.Fatalf("echo answered with %v, want a session flow on channel %d", f, ch)
	}
	return f.flow
}

func engMsgTransfer(handle, id uint32) Transfer {
	return Transfer{Handle: handle, DeliveryID: id, HasDeliveryID: true, DeliveryTag: []byte(fmt.Sprintf("tag%d", id)), HasMessageFormat: true}
}

func engDataSection(s string) []byte {
	return appendBinary(appendDescriptor(nil, SectionData), []byte(s))
}

// engCoverage counts, for every delivery id, how many disposition frames
// covered it.
func engCoverage(ds []*Disposition) map[uint32]int {
	cov := map[uint32]int{}
	for _, d := range ds {
		last := d.First
		if d.HasLast {
			last = d.Last
		}
		for id := d.First; ; id++ {
			cov[id]++
			if id == last {
				break
			}
		}
	}
	return cov
}

// readDispositions reads until the dispositions cover n distinct ids,
// failing on end or close. Flows are skipped.
func (c *engConn) readDispositions(n int) []*Disposition {
	c.t.Helper()
	var ds []*Disposition
	for len(engCoverage(ds)) < n {
		f := c.next()
		switch f.code {
		case descDisposition:
			ds = append(ds, f.disp)
		case descFlow:
		default:
			c.t.Fatalf("got %v while waiting for dispositions", f)
		}
	}
	return ds
}

// engFieldPresent reports whether field idx of the performative in body is
// present (not null and not trimmed off the end of the list).
func engFieldPresent(t *testing.T, body []byte, idx int) bool {
	t.Helper()
	_, d, err := framePerformative(body)
	if err != nil {
		t.Fatal(err)
	}
	f := d.openFields()
	for range idx {
		if f.next() {
			if err := d.skip(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if f.err != nil {
		t.Fatal(f.err)
	}
	return f.next()
}
