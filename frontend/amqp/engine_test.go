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
	"strings"
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
	s.h.mu.Unlock()
}

// ---------------------------------------------------------------------------
// Server under test.

type engEnv struct {
	t    *testing.T
	srv  *Server
	h    *engHandler
	addr string
}

func startEngine(t *testing.T, srv *Server, h *engHandler) *engEnv {
	t.Helper()
	if srv == nil {
		srv = &Server{}
	}
	if h == nil {
		h = newEngHandler()
	}
	srv.Handler = h
	if srv.Logger == nil {
		srv.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
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

// skipTo reads frames until one with the given performative, skipping
// flows and dispositions; any other frame fails the test.
func (c *engConn) skipTo(code uint64) engFrame {
	c.t.Helper()
	for {
		f := c.next()
		if f.code == code {
			return f
		}
		if f.code != descFlow && f.code != descDisposition {
			c.t.Fatalf("got %v while waiting for %s", f, engPerfName(code))
		}
	}
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

func engDataSection(s string) []byte { return appendBinary(appendDescriptor(nil, descData), []byte(s)) }

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

// ---------------------------------------------------------------------------
// Protocol headers and SASL.

func TestEngineProtocolHeaderSASLAnonymous(t *testing.T) {
	env := startEngine(t, nil, nil)
	c := env.dial()
	c.write(protoHeaderSASL[:])
	c.expectHeader(protoHeaderSASL)
	m := c.expect(descSASLMechanisms)
	if m.typ != frameTypeSASL {
		t.Fatalf("sasl-mechanisms in a frame of type %d, want SASL", m.typ)
	}
	if !slices.Contains(m.mechs, "ANONYMOUS") {
		t.Fatalf("mechanisms %v lack ANONYMOUS", m.mechs)
	}
	c.write(engFrameBytes(frameTypeSASL, 0, (&saslInit{Mechanism: "ANONYMOUS", InitialResponse: []byte("trace@example")}).append))
	o := c.expect(descSASLOutcome)
	if o.typ != frameTypeSASL || o.outcome.Code != saslOK {
		t.Fatalf("sasl-outcome code %d (frame type %d), want 0", o.outcome.Code, o.typ)
	}
	open := c.open(engClientOpen())
	if open.open.ContainerID != "quorumbus" || open.open.MaxFrameSize != 65536 || open.open.IdleTimeout != 60000 {
		t.Errorf("server open %+v, want the defaults", open.open)
	}
	if id := env.conn().Identity(); id != "anonymous" {
		t.Errorf("Identity() = %q, want anonymous", id)
	}
	c.sessionEchoAfterBegin(0)
}

// sessionEchoAfterBegin begins a session and proves it works.
func (c *engConn) sessionEchoAfterBegin(ch uint16) {
	c.t.Helper()
	c.begin(ch)
	c.sessionEcho(ch)
}

func TestEngineProtocolHeaderSASLPipelined(t *testing.T) {
	// A client may send the SASL header, its sasl-init, the AMQP header and
	// its open without waiting (spec 5.3.2 allows pipelining).
	env := startEngine(t, nil, nil)
	c := env.dial()
	var b []byte
	b = append(b, protoHeaderSASL[:]...)
	b = append(b, engFrameBytes(frameTypeSASL, 0, (&saslInit{Mechanism: "ANONYMOUS"}).append)...)
	b = append(b, protoHeaderAMQP[:]...)
	o := engClientOpen()
	b = append(b, engFrameBytes(frameTypeAMQP, 0, o.append)...)
	c.write(b)
	c.expectHeader(protoHeaderSASL)
	c.expect(descSASLMechanisms)
	if f := c.expect(descSASLOutcome); f.outcome.Code != saslOK {
		t.Fatalf("outcome %d", f.outcome.Code)
	}
	c.expectHeader(protoHeaderAMQP)
	c.expect(descOpen)
	c.sessionEchoAfterBegin(3)
}

func TestEngineProtocolHeaderPlainAMQP(t *testing.T) {
	env := startEngine(t, nil, nil)
	c := env.dialOpen()
	if id := env.conn().Identity(); id != "anonymous" {
		t.Errorf("Identity() = %q, want anonymous", id)
	}
	c.sessionEchoAfterBegin(0)
}

func TestEngineProtocolHeaderRequireSASL(t *testing.T) {
	env := startEngine(t, &Server{RequireSASL: true}, nil)

	t.Run("plain AMQP header refused", func(t *testing.T) {
		env := env.with(t)
		c := env.dial()
		c.write(protoHeaderAMQP[:])
		c.expectHeader(protoHeaderSASL)
		c.expectEOF()
		env.noOpenConn()
	})
	t.Run("SASL accepted", func(t *testing.T) {
		env := env.with(t)
		c := env.dial()
		c.write(protoHeaderSASL[:])
		c.expectHeader(protoHeaderSASL)
		c.expect(descSASLMechanisms)
		c.write(engFrameBytes(frameTypeSASL, 0, (&saslInit{Mechanism: "ANONYMOUS"}).append))
		if f := c.expect(descSASLOutcome); f.outcome.Code != saslOK {
			t.Fatalf("outcome %d", f.outcome.Code)
		}
		c.open(engClientOpen())
		env.conn()
	})
}

func TestEngineProtocolHeaderUnsupported(t *testing.T) {
	headers := []struct {
		name string
		hdr  string
	}{
		{"HTTP", "HTTP/1.1"},
		{"protocol id 9", "AMQP\x09\x01\x00\x00"},
		{"version 1.1", "AMQP\x00\x01\x01\x00"},
		{"revision 1.0.1", "AMQP\x00\x01\x00\x01"},
		{"AMQP 0-9-1", "AMQP\x00\x00\x09\x01"},
		{"AMQP 0-10", "AMQP\x01\x01\x00\x0a"},
		{"TLS", "AMQP\x02\x01\x00\x00"},
		{"zeros", "\x00\x00\x00\x00\x00\x00\x00\x00"},
	}
	for _, requireSASL := range []bool{false, true} {
		env := startEngine(t, &Server{RequireSASL: requireSASL}, nil)
		want := protoHeaderAMQP
		if requireSASL {
			want = protoHeaderSASL
		}
		for _, h := range headers {
			t.Run(fmt.Sprintf("%s/requireSASL=%v", h.name, requireSASL), func(t *testing.T) {
				env := env.with(t)
				c := env.dial()
				c.write([]byte(h.hdr))
				c.expectHeader(want)
				c.expectEOF()
				env.noOpenConn()
			})
		}
	}
}

func TestEngineProtocolHeaderAfterSASL(t *testing.T) {
	// After a successful SASL exchange the next header must be AMQP; a
	// second SASL header is answered with the AMQP header and the end.
	env := startEngine(t, nil, nil)
	c := env.dial()
	var b []byte
	b = append(b, protoHeaderSASL[:]...)
	b = append(b, engFrameBytes(frameTypeSASL, 0, (&saslInit{Mechanism: "ANONYMOUS"}).append)...)
	b = append(b, protoHeaderSASL[:]...)
	c.write(b)
	c.expectHeader(protoHeaderSASL)
	c.expect(descSASLMechanisms)
	c.expect(descSASLOutcome)
	c.expectHeader(protoHeaderAMQP)
	c.expectEOF()
	env.noOpenConn()
}

func TestEngineSASLPlain(t *testing.T) {
	authz := make(chan string, 16)
	srv := &Server{SASL: SASL{Plain: func(authzid, user, pass string) error {
		authz <- authzid
		if user == "alice" && pass == "s3cret" {
			return nil
		}
		return ErrAuthFailed
	}}}
	env := startEngine(t, srv, nil)

	cases := []struct {
		name     string
		mech     Symbol
		resp     string
		nilResp  bool
		ok       bool
		wantCode uint8 // when !ok; 0 means any non-zero code
		authzid  string
	}{
		{name: "right credentials", mech: "PLAIN", resp: "\x00alice\x00s3cret", ok: true},
		{name: "with authzid", mech: "PLAIN", resp: "admin\x00alice\x00s3cret", ok: true, authzid: "admin"},
		{name: "wrong password", mech: "PLAIN", resp: "\x00alice\x00wrong", wantCode: saslAuth},
		{name: "unknown user", mech: "PLAIN", resp: "\x00bob\x00s3cret", wantCode: saslAuth},
		{name: "empty user", mech: "PLAIN", resp: "\x00\x00s3cret", wantCode: saslAuth},
		{name: "no separators", mech: "PLAIN", resp: "alice", wantCode: saslAuth},
		{name: "no initial response", mech: "PLAIN", nilResp: true, wantCode: saslAuth},
		{name: "unknown mechanism", mech: "SCRAM-SHA-256", resp: "n,,n=alice,r=abc"},
		{name: "ANONYMOUS not offered", mech: "ANONYMOUS"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := env.with(t)
			for len(authz) > 0 {
				<-authz
			}
			c := env.dial()
			c.write(protoHeaderSASL[:])
			c.expectHeader(protoHeaderSASL)
			m := c.expect(descSASLMechanisms)
			if !slices.Equal(m.mechs, []Symbol{"PLAIN"}) {
				t.Fatalf("mechanisms %v, want [PLAIN]", m.mechs)
			}
			init := saslInit{Mechanism: tc.mech}
			if !tc.nilResp {
				init.InitialResponse = []byte(tc.resp)
			}
			c.write(engFrameBytes(frameTypeSASL, 0, init.append))
			o := c.expect(descSASLOutcome)
			if tc.ok {
				if o.outcome.Code != saslOK {
					t.Fatalf("outcome code %d, want 0", o.outcome.Code)
				}
				c.open(engClientOpen())
				if id := env.conn().Identity(); id != "alice" {
					t.Errorf("Identity() = %q, want alice", id)
				}
				if got := <-authz; got != tc.authzid {
					t.Errorf("authzid %q, want %q", got, tc.authzid)
				}
				c.sessionEchoAfterBegin(0)
				return
			}
			switch {
			case o.outcome.Code == saslOK:
				t.Fatalf("outcome code 0 for bad credentials")
			case tc.wantCode != 0 && o.outcome.Code != tc.wantCode:
				t.Fatalf("outcome code %d, want %d", o.outcome.Code, tc.wantCode)
			}
			c.expectEOF()
			env.noOpenConn()
		})
	}
}

func TestEngineSASLBadInit(t *testing.T) {
	env := startEngine(t, nil, nil)
	cases := []struct {
		name  string
		frame []byte
	}{
		{"AMQP frame instead of sasl-init", engFrameBytes(frameTypeAMQP, 0, (&saslInit{Mechanism: "ANONYMOUS"}).append)},
		{"sasl-init without mechanism", engFrameBytes(frameTypeSASL, 0, func(b []byte) []byte {
			return append(appendDescriptor(b, descSASLInit), codeList0)
		})},
		{"garbage body", engFrameBytes(frameTypeSASL, 0, func(b []byte) []byte { return append(b, 0xde, 0xad, 0xbe, 0xef) })},
		{"open instead of sasl-init", engFrameBytes(frameTypeSASL, 0, func(b []byte) []byte { o := engClientOpen(); return o.append(b) })},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := env.with(t)
			c := env.dial()
			c.write(append(protoHeaderSASL[:], tc.frame...))
			c.expectHeader(protoHeaderSASL)
			c.expect(descSASLMechanisms)
			o := c.expect(descSASLOutcome)
			if o.outcome.Code == saslOK {
				t.Fatalf("outcome code 0 for a bad sasl-init")
			}
			c.expectEOF()
			env.noOpenConn()
		})
	}
}

// ---------------------------------------------------------------------------
// The open exchange.

func TestEngineFirstFrameNotOpen(t *testing.T) {
	env := startEngine(t, nil, nil)
	cases := []struct {
		name  string
		frame []byte
		want  Symbol
	}{
		{"begin", engFrameBytes(frameTypeAMQP, 0, (&Begin{IncomingWindow: 10, OutgoingWindow: 10}).append), ErrCondFramingError},
		{"close", engFrameBytes(frameTypeAMQP, 0, engCloseBody), ErrCondFramingError},
		{"open in a SASL frame", engFrameBytes(frameTypeSASL, 0, func(b []byte) []byte { o := engClientOpen(); return o.append(b) }), ErrCondFramingError},
		{"body not described", engFrameBytes(frameTypeAMQP, 0, func(b []byte) []byte { return append(b, codeList0) }), ErrCondDecodeError},
		{"open without container-id", engFrameBytes(frameTypeAMQP, 0, func(b []byte) []byte {
			return append(appendDescriptor(b, descOpen), codeList0)
		}), ErrCondDecodeError},
		{"empty frame", []byte{0, 0, 0, 8, 2, 0, 0, 0}, "*"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := env.with(t)
			c := env.dial()
			c.write(append(protoHeaderAMQP[:], tc.frame...))
			c.expectHeader(protoHeaderAMQP)
			c.expect(descOpen) // spec 2.4.1: open before the close that refuses
			c.expectClose(tc.want)
			env.noOpenConn()
		})
	}
	t.Run("malformed frame header", func(t *testing.T) {
		env := env.with(t)
		c := env.dial()
		c.write(append(protoHeaderAMQP[:], 0, 0, 0, 4, 2, 0, 0, 0))
		c.expectHeader(protoHeaderAMQP)
		c.expect(descOpen)
		c.expectClose(ErrCondFramingError)
	})
}

func TestEngineOpenMaxFrameSize(t *testing.T) {
	env := startEngine(t, nil, nil)
	for _, size := range []uint32{0, 1, 511} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			env := env.with(t)
			c := env.dial()
			o := engClientOpen()
			o.MaxFrameSize = size
			c.open(o)
			c.expectClose(ErrCondInvalidField)
			env.noOpenConn()
		})
	}
	t.Run("512 accepted", func(t *testing.T) {
		env := env.with(t)
		c := env.dial()
		o := engClientOpen()
		o.MaxFrameSize = minMaxFrameSize
		c.open(o)
		env.conn()
		c.sessionEchoAfterBegin(0)
	})
}

func TestEngineOpenConnRefused(t *testing.T) {
	cases := []struct {
		name string
		err  error
		want Symbol
	}{
		{"amqp error", Errorf(ErrCondUnauthorizedAccess, "no entry for %s", "raw-client"), ErrCondUnauthorizedAccess},
		{"go error", errors.New("backend down"), ErrCondInternalError},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newEngHandler()
			h.openErr = tc.err
			env := startEngine(t, nil, h)
			c := env.dial()
			c.open(engClientOpen())
			e := c.expectClose(tc.want)
			if tc.want == ErrCondUnauthorizedAccess && e.Description != "no entry for raw-client" {
				t.Errorf("description %q", e.Description)
			}
		})
	}
}

func TestEngineSecondOpen(t *testing.T) {
	env := startEngine(t, nil, nil)
	c := env.dialOpen()
	o := engClientOpen()
	c.send(0, o.append)
	c.expectClose(ErrCondIllegalState)
	if err := env.closedWith(); err == nil {
		t.Error("Closed(nil) after a protocol error")
	}
}

// ---------------------------------------------------------------------------
// Malformed frames after the open exchange.

func TestEngineFramingErrors(t *testing.T) {
	env := startEngine(t, &Server{MaxFrameSize: 1024}, nil)
	cases := []struct {
		name  string
		frame []byte
	}{
		{"size 0", []byte{0, 0, 0, 0, 2, 0, 0, 0}},
		{"size 7", []byte{0, 0, 0, 7, 2, 0, 0, 0}},
		{"size above max-frame-size", []byte{0, 0, 4, 1, 2, 0, 0, 0}},
		{"size 4 GiB", []byte{0xff, 0xff, 0xff, 0xff, 2, 0, 0, 0}},
		{"doff 0", []byte{0, 0, 0, 8, 0, 0, 0, 0}},
		{"doff 1", []byte{0, 0, 0, 8, 1, 0, 0, 0}},
		{"doff beyond the frame", []byte{0, 0, 0, 8, 3, 0, 0, 0}},
		{"unknown frame type", []byte{0, 0, 0, 8, 2, 7, 0, 0}},
		{"SASL frame after open", engFrameBytes(frameTypeSASL, 0, (&saslInit{Mechanism: "ANONYMOUS"}).append)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := env.with(t)
			c := env.dialOpen()
			env.conn()
			c.write(tc.frame)
			c.expectClose(ErrCondFramingError)
			if err := env.closedWith(); err == nil {
				t.Error("ConnHandler.Closed(nil) after a framing error")
			}
		})
	}
	t.Run("extended header is skipped", func(t *testing.T) {
		env := env.with(t)
		c := env.dialOpen()
		env.conn()
		// doff 3: four bytes of extended header before the begin body.
		b := []byte{0, 0, 0, 0, 3, 0, 0, 0, 0xaa, 0xbb, 0xcc, 0xdd}
		b = (&Begin{IncomingWindow: 10, OutgoingWindow: 10}).append(b)
		b = finishFrame(b, 0)
		c.write(b)
		f := c.expect(descBegin)
		if !f.begin.HasRemoteChannel || f.begin.RemoteChannel != 0 {
			t.Fatalf("begin reply %+v", f.begin)
		}
	})
}

// engNestedLists returns n lists nested in one another, list32 encoded.
func engNestedLists(n int) []byte {
	inner := []byte{codeList0}
	for range n {
		b := []byte{codeList32, 0, 0, 0, 0, 0, 0, 0, 1}
		engPutU32(b[1:], uint32(len(inner)+4))
		inner = append(b, inner...)
	}
	return inner
}

func engPutU32(b []byte, v uint32) {
	b[0], b[1], b[2], b[3] = byte(v>>24), byte(v>>16), byte(v>>8), byte(v)
}

// engAttachWithProperties encodes an attach whose properties field (the
// 14th) holds raw bytes.
func engAttachWithProperties(raw []byte) func([]byte) []byte {
	return func(b []byte) []byte {
		b, f := beginFields(b, descAttach)
		b = appendString(b, "bad")
		f.field(b, false)
		b = appendUint(b, 0)
		f.field(b, false)
		b = appendBool(b, false)
		f.field(b, false)
		for range 10 {
			b = appendNull(b)
			f.field(b, false)
		}
		b = append(b, raw...)
		f.field(b, false)
		return f.end(b)
	}
}

func TestEngineDecodeErrors(t *testing.T) {
	env := startEngine(t, nil, nil)
	raw := func(body ...byte) func([]byte) []byte {
		return func(b []byte) []byte { return append(b, body...) }
	}
	cases := []struct {
		name string
		ch   uint16
		body func([]byte) []byte
		why  string // in the close description: the intended check fired
	}{
		{"not described", 0, raw(codeList0), "described"},
		{"descriptor null", 0, raw(codeDescribed, codeNull, codeList0), "null"},
		{"descriptor is a string", 0, raw(codeDescribed, codeStr8, 1, 'x', codeList0), "string"},
		{"unknown performative", 0, raw(codeDescribed, codeSmallUlong, 0x99, codeList0), "0x99"},
		{"unknown symbolic descriptor", 0, func(b []byte) []byte {
			return append(appendSymbol(append(b, codeDescribed), "amqp:bogus:list"), codeList0)
		}, "amqp:bogus:list"},
		{"truncated descriptor", 0, raw(codeDescribed, codeUlong, 0, 0), "need 8 bytes"},
		{"truncated list", 0, raw(codeDescribed, codeSmallUlong, descBegin, codeList8, 50, 4, codeNull), "size 50"},
		{"list count beyond its bytes", 0, raw(codeDescribed, codeSmallUlong, descBegin, codeList32, 0, 0, 0, 8, 0x7f, 0xff, 0xff, 0xff, codeNull, codeNull, codeNull, codeNull), "count 2147483647"},
		{"list size beyond the frame", 0, raw(codeDescribed, codeSmallUlong, descBegin, codeList32, 0xff, 0xff, 0xff, 0xf0, 0, 0, 0, 3), "size 4294967280"},
		{"begin without mandatory fields", 0, raw(codeDescribed, codeSmallUlong, descBegin, codeList0), "next-outgoing-id"},
		{"begin with a string window", 0, func(b []byte) []byte {
			b, f := beginFields(b, descBegin)
			b = appendNull(b)
			f.field(b, false)
			b = appendUint(b, 0)
			f.field(b, false)
			b = appendString(b, "many")
			f.field(b, false)
			b = appendUint(b, 10)
			f.field(b, false)
			return f.end(b)
		}, "string"},
		{"attach with snd-settle-mode 3", 1, func(b []byte) []byte {
			a := engSenderAttach(0, "x")
			a.SndSettleMode = ptr[uint8](3)
			return a.append(b)
		}, "snd-settle-mode"},
		{"attach with rcv-settle-mode 2", 1, func(b []byte) []byte {
			a := engSenderAttach(0, "x")
			a.RcvSettleMode = ptr[uint8](2)
			return a.append(b)
		}, "rcv-settle-mode"},
		{"attach with a huge map count", 1, engAttachWithProperties([]byte{codeMap32, 0, 0, 0, 8, 0xff, 0xff, 0xff, 0xfe, codeNull, codeNull, codeNull, codeNull}), "count 4294967294"},
		{"attach with a huge array count", 1, engAttachWithProperties([]byte{codeArray32, 0, 0, 0, 9, 0xff, 0xff, 0xff, 0xff, codeNull, 0, 0, 0, 0}), "count 4294967295"},
		{"attach nested 100 deep", 1, engAttachWithProperties(engNestedLists(100)), "nested"},
		{"attach with a target where the source belongs", 1, func(b []byte) []byte {
			b, f := beginFields(b, descAttach)
			b = appendString(b, "x")
			f.field(b, false)
			b = appendUint(b, 0)
			f.field(b, false)
			b = appendBool(b, false)
			f.field(b, false)
			b = appendNull(b)
			f.field(b, false)
			b = appendNull(b)
			f.field(b, false)
			b = (&Target{Address: "q"}).append(b)
			f.field(b, false)
			return f.end(b)
		}, "source"},
		{"transfer with a 33-byte tag", 1, func(b []byte) []byte {
			t := engMsgTransfer(0, 0)
			t.DeliveryTag = bytes.Repeat([]byte{'x'}, 33)
			return t.append(b)
		}, "delivery-tag"},
		{"flow with an invalid boolean", 1, func(b []byte) []byte {
			b, f := beginFields(b, descFlow)
			for _, v := range []uint32{0, 10, 0, 10} {
				b = appendUint(b, v)
				f.field(b, false)
			}
			for range 4 {
				b = appendNull(b)
				f.field(b, false)
			}
			b = append(b, codeBool, 7) // drain
			f.field(b, false)
			return f.end(b)
		}, "boolean"},
		{"end with an error without condition", 1, func(b []byte) []byte {
			b, f := beginFields(b, descEnd)
			b = append(appendDescriptor(b, descError), codeList0)
			f.field(b, false)
			return f.end(b)
		}, "condition"},
		{"end with an invalid UTF-8 description", 1, func(b []byte) []byte {
			b, f := beginFields(b, descEnd)
			b2, ef := beginFields(b, descError)
			b2 = appendSymbol(b2, "amqp:internal-error")
			ef.field(b2, false)
			b2 = append(b2, codeStr8, 2, 0xff, 0xfe)
			ef.field(b2, false)
			b = ef.end(b2)
			f.field(b, false)
			return f.end(b)
		}, "UTF-8"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := env.with(t)
			c := env.dialOpen()
			env.conn()
			if tc.ch != 0 {
				c.begin(tc.ch)
			}
			c.send(tc.ch, tc.body)
			e := c.expectClose(ErrCondDecodeError)
			if !strings.Contains(e.Description, tc.why) {
				t.Errorf("close %v: the description does not mention %q, so another check fired", e, tc.why)
			}
			if err := env.closedWith(); err == nil {
				t.Error("ConnHandler.Closed(nil) after a decode error")
			}
		})
	}
}

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
