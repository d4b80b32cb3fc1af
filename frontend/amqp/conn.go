package amqp

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"os"
	"sync"
	"time"
)

const (
	// writeHighWater pauses reading while this many bytes wait to be
	// written, so a peer that sends without reading cannot grow our
	// buffers without bound.
	writeHighWater = 4 << 20
	// maxLinksPerConn bounds the links one connection may hold.
	maxLinksPerConn = 16384
	// handleMax is the highest link handle a session allows.
	handleMax = 4095
)

// Conn is one AMQP connection. Its methods may be called from any
// goroutine.
type Conn struct {
	srv *Server
	nc  net.Conn
	log *slog.Logger
	fr  *frameReader

	// Set during the handshake, read-only afterwards.
	remoteOpen   Open
	identity     string
	mechanism    Symbol // the SASL mechanism; empty without a SASL layer
	principal    any    // from a PrincipalAuthenticator
	handler      ConnHandler
	peerMaxFrame uint32
	peerIdle     time.Duration

	mu        sync.Mutex
	drained   sync.Cond // signalled when the writer empties wbuf
	wbuf      []byte    // frames waiting for the writer
	wake      chan struct{}
	sessions  map[uint16]*Session // by the peer's channel, which we mirror
	dispRuns  []*Session          // sessions holding a disposition run
	linkCount int
	open      bool // the handshake is over and the writer runs
	closing   bool // our close frame is queued; no more frames after it
	writeErr  error
	done      chan struct{}

	delivery Delivery // scratch handed to MessageHandler.Message
	dec      decoder  // decodes the frame being dispatched

	refusal *Error // set for a connection refused at the open: the handler never sees it
	partial int64  // bytes its links hold in unfinished messages; guarded by mu
}

func newConn(s *Server, nc net.Conn) *Conn {
	c := &Conn{
		srv:      s,
		nc:       nc,
		log:      s.logger().With("remote", nc.RemoteAddr().String()),
		wake:     make(chan struct{}, 1),
		sessions: make(map[uint16]*Session),
		done:     make(chan struct{}),
	}
	c.drained.L = &c.mu
	return c
}

// Open returns the peer's open frame.
func (c *Conn) Open() *Open { return &c.remoteOpen }

// Identity is who SASL authenticated ("anonymous" for ANONYMOUS).
func (c *Conn) Identity() string { return c.identity }

// Mechanism is the SASL mechanism the peer authenticated with (empty when
// it skipped the SASL layer).
func (c *Conn) Mechanism() Symbol { return c.mechanism }

// Principal is what a PrincipalAuthenticator returned for this
// connection, or nil.
func (c *Conn) Principal() any { return c.principal }

// RemoteAddr is the peer's network address.
func (c *Conn) RemoteAddr() net.Addr { return c.nc.RemoteAddr() }

// Done is closed once the connection is finished.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Close closes the connection with an optional error for the peer.
func (c *Conn) Close(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.open {
		// Still in the handshake: there is no writer to send a close
		// frame, so cut the connection instead of waiting for the peer.
		c.closing = true
		c.nc.Close()
		return
	}
	c.closeLocked(asError(err))
}

// closeLocked queues our close frame; the writer closes the socket once it
// is written.
func (c *Conn) closeLocked(e *Error) {
	if c.closing {
		return
	}
	c.flushRunsLocked()
	b, start := appendFrameHeader(c.wbuf, frameTypeAMQP, 0)
	c.wbuf = finishFrame(appendErrorOnly(b, descClose, e), start)
	c.closing = true
	c.signal()
}

func (c *Conn) signal() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// serve runs the connection to its end on the calling goroutine.
func (c *Conn) serve() {
	defer c.nc.Close()
	c.fr = newFrameReader(c.nc, c.srv.maxFrameSize())
	c.nc.SetDeadline(time.Now().Add(c.srv.idleTimeout()))
	if err := c.handshake(); err != nil {
		c.log.Debug("amqp handshake failed", "err", err)
		return
	}
	c.nc.SetDeadline(time.Time{})

	c.mu.Lock()
	c.open = true
	closed := c.closing
	c.mu.Unlock()
	if closed {
		return // Shutdown came during the handshake
	}
	writerDone := make(chan struct{})
	go func() { defer close(writerDone); c.writeLoop() }()

	err := c.readLoop()
	c.teardown(err)
	<-writerDone
}

// refuse answers the handshake of a connection the server will not serve
// (it gets our open, then a close carrying e) and closes it. The peer has
// refuseTimeout for the whole exchange.
func (c *Conn) refuse(e *Error) {
	defer c.nc.Close()
	c.refusal = e
	c.fr = newFrameReader(c.nc, c.srv.maxFrameSize())
	c.nc.SetDeadline(time.Now().Add(min(refuseTimeout, c.srv.idleTimeout())))
	err := c.handshake()
	c.log.Debug("amqp connection refused", "reason", e, "err", err)
	// Let the peer read our close before the socket goes: closing with its
	// pipelined frames unread would reset the connection, and a reset may
	// discard the close before the peer reads it.
	if tc, ok := c.nc.(interface{ CloseWrite() error }); ok && tc.CloseWrite() == nil {
		io.Copy(io.Discard, io.LimitReader(c.nc, 1<<20))
	}
}

// handshake negotiates the protocol headers, SASL and the open frames. On
// return without error the connection is open and the handler chosen.
func (c *Conn) handshake() error {
	hdr, err := c.fr.protoHeader()
	if err != nil {
		return err
	}
	switch hdr {
	case protoHeaderSASL:
		if err := c.negotiateSASL(); err != nil {
			return err
		}
		if hdr, err = c.fr.protoHeader(); err != nil {
			return err
		}
		if hdr != protoHeaderAMQP {
			c.nc.Write(protoHeaderAMQP[:])
			return fmt.Errorf("amqp: unexpected protocol header % x after SASL", hdr)
		}
	case protoHeaderAMQP:
		if c.srv.RequireSASL {
			c.nc.Write(protoHeaderSASL[:])
			return errors.New("amqp: peer skipped the required SASL layer")
		}
		c.identity = "anonymous"
	default:
		// Answer with the header we do speak, then close (spec 2.2).
		want := protoHeaderAMQP
		if c.srv.RequireSASL {
			want = protoHeaderSASL
		}
		c.nc.Write(want[:])
		return fmt.Errorf("amqp: unsupported protocol header % x", hdr)
	}
	if _, err := c.nc.Write(protoHeaderAMQP[:]); err != nil {
		return err
	}

	f, err := c.fr.next()
	var framing *Error
	if err != nil && !errors.As(err, &framing) {
		return err // the peer went away
	}
	// A malformed first frame still gets our open and a close saying why.
	var code uint64
	var d decoder
	if err == nil {
		code, d, err = framePerformative(f.body)
	}
	if err == nil && (f.typ != frameTypeAMQP || code != descOpen) {
		err = framingErrorf("the first frame must be open")
	}
	if err == nil {
		err = c.remoteOpen.decode(&d)
	}
	if err == nil && c.remoteOpen.MaxFrameSize < minMaxFrameSize {
		err = Errorf(ErrCondInvalidField, "max-frame-size %d is below the minimum %d", c.remoteOpen.MaxFrameSize, minMaxFrameSize)
	}
	c.peerMaxFrame = c.remoteOpen.MaxFrameSize
	c.peerIdle = time.Duration(c.remoteOpen.IdleTimeout) * time.Millisecond

	our := Open{
		ContainerID:  c.srv.ContainerID,
		MaxFrameSize: c.srv.maxFrameSize(),
		ChannelMax:   c.srv.channelMax(),
		IdleTimeout:  uint32(c.srv.idleTimeout() / time.Millisecond),
	}
	if our.ContainerID == "" {
		our.ContainerID = "quorumbus"
	}
	b, start := appendFrameHeader(nil, frameTypeAMQP, 0)
	b = finishFrame(our.append(b), start)
	if err == nil && c.refusal != nil {
		err = c.refusal
	}
	if err == nil {
		c.handler, err = c.srv.Handler.OpenConn(c)
	}
	if err != nil {
		// The spec wants an open before the close that refuses the
		// connection.
		b2, start := appendFrameHeader(b, frameTypeAMQP, 0)
		b = finishFrame(appendErrorOnly(b2, descClose, asError(err)), start)
		c.nc.Write(b)
		return err
	}
	_, err = c.nc.Write(b)
	return err
}

func (c *Conn) negotiateSASL() error {
	auth := c.srv.sasl()
	b := append([]byte(nil), protoHeaderSASL[:]...)
	b, start := appendFrameHeader(b, frameTypeSASL, 0)
	mechs := saslMechanisms{Mechanisms: auth.Mechanisms()}
	b = finishFrame(mechs.append(b), start)
	if _, err := c.nc.Write(b); err != nil {
		return err
	}
	f, err := c.fr.next()
	if err != nil {
		return err
	}
	code, d, err := framePerformative(f.body)
	if err == nil && (f.typ != frameTypeSASL || code != descSASLInit) {
		err = framingErrorf("expected sasl-init")
	}
	var init saslInit
	if err == nil {
		err = init.decode(&d)
	}
	outcome := saslOutcome{Code: saslOK}
	if err != nil {
		outcome.Code = saslSysPerm
	} else {
		if pa, ok := auth.(PrincipalAuthenticator); ok {
			c.identity, c.principal, err = pa.AuthenticatePrincipal(init.Mechanism, init.InitialResponse, init.Hostname)
		} else {
			c.identity, err = auth.Authenticate(init.Mechanism, init.InitialResponse, init.Hostname)
		}
		if err != nil {
			outcome.Code = saslAuth
		} else {
			c.mechanism = init.Mechanism
		}
	}
	b, start = appendFrameHeader(nil, frameTypeSASL, 0)
	b = finishFrame(outcome.append(b), start)
	if _, werr := c.nc.Write(b); werr != nil && err == nil {
		err = werr
	}
	return err
}

// readLoop reads and dispatches frames until the connection ends. It
// returns nil for an orderly close by the peer.
func (c *Conn) readLoop() error {
	idle := c.srv.idleTimeout()
	for {
		c.mu.Lock()
		for len(c.wbuf) > writeHighWater && c.writeErr == nil {
			c.drained.Wait()
		}
		werr := c.writeErr
		c.mu.Unlock()
		if werr != nil {
			return werr
		}
		c.nc.SetReadDeadline(time.Now().Add(idle))
		f, err := c.fr.next()
		if err != nil {
			var e *Error
			switch {
			case errors.As(err, &e):
				c.Close(e)
			case errors.Is(err, os.ErrDeadlineExceeded):
				c.Close(Errorf(ErrCondResourceLimitExceeded, "idle timeout: nothing received for %v", idle))
			}
			return err
		}
		if len(f.body) == 0 {
			continue // keep-alive
		}
		peerClosed, err := c.dispatch(f)
		if err != nil {
			c.Close(err)
			return err
		}
		if peerClosed {
			return nil
		}
	}
}

// dispatch handles one frame. A returned error closes the connection.
func (c *Conn) dispatch(f frame) (peerClosed bool, err error) {
	if f.typ != frameTypeAMQP {
		return false, framingErrorf("SASL frame after the SASL layer")
	}
	// The decoder lives in the Conn: handing a pointer to a local one down
	// the dispatch path would cost a heap allocation per frame.
	c.dec = decoder{b: f.body}
	d := &c.dec
	code, err := d.performative()
	if err != nil {
		return false, err
	}
	if f.channel > c.srv.channelMax() {
		// Spec 2.7.1: a channel above channel-max is a framing error.
		return false, framingErrorf("channel %d exceeds channel-max %d", f.channel, c.srv.channelMax())
	}
	switch code {
	case descBegin:
		return false, c.onBegin(f.channel, d)
	case descClose:
		e, err := decodeErrorOnly(d)
		if err != nil {
			return false, err
		}
		if e != nil {
			c.log.Debug("peer closed the connection with an error", "err", e)
		}
		c.Close(nil)
		return true, nil
	case descOpen:
		return false, Errorf(ErrCondIllegalState, "open received on an open connection")
	case descAttach, descFlow, descTransfer, descDisposition, descDetach, descEnd:
		c.mu.Lock()
		s := c.sessions[f.channel]
		c.mu.Unlock()
		if s == nil {
			return false, Errorf(ErrCondIllegalState, "frame on channel %d, which has no session", f.channel)
		}
		return false, s.dispatch(code, d, f.body)
	}
	return false, Errorf(ErrCondDecodeError, "unknown performative 0x%x", code)
}

// teardown ends every link and session after the connection stopped.
func (c *Conn) teardown(cause error) {
	c.mu.Lock()
	if cause != nil && !c.closing {
		c.closeLocked(asError(cause))
	}
	var ended []*Link
	for _, s := range c.sessions {
		ended = s.detachAllLocked(ended)
	}
	c.sessions = map[uint16]*Session{}
	c.mu.Unlock()
	linkErr := fmt.Errorf("%w: connection closed", ErrLinkClosed)
	if cause != nil && !errors.Is(cause, io.EOF) {
		linkErr = fmt.Errorf("%w: connection failed: %v", ErrLinkClosed, cause)
	}
	for _, l := range ended {
		l.handler.Detached(l, linkErr)
	}
	if c.handler != nil {
		if errors.Is(cause, io.EOF) {
			cause = nil
		}
		c.handler.Closed(cause)
	}
	close(c.done)
}

// writeLoop writes queued frames, batching whatever accumulated while the
// previous write was in flight into one system call, and sends keep-alive
// frames when the peer asked for them.
func (c *Conn) writeLoop() {
	var keepAliveC <-chan time.Time
	interval := time.Duration(math.MaxInt64)
	if c.peerIdle > 0 {
		interval = c.peerIdle / 2
		t := time.NewTicker(interval)
		defer t.Stop()
		keepAliveC = t.C
	}
	var spare []byte
	lastWrite := time.Now()
	for {
		select {
		case <-c.wake:
		case <-keepAliveC:
			if time.Since(lastWrite) < interval/2 {
				continue
			}
			c.mu.Lock()
			if !c.closing {
				c.wbuf = append(c.wbuf, keepAlive...)
			}
			c.mu.Unlock()
		case <-c.done:
			// The reader finished: write what is left (our close frame,
			// typically) and stop.
			c.mu.Lock()
			c.flushRunsLocked()
			buf := c.wbuf
			c.wbuf = nil
			c.mu.Unlock()
			if len(buf) > 0 {
				c.nc.SetWriteDeadline(time.Now().Add(c.srv.writeTimeout()))
				c.nc.Write(buf)
			}
			return
		}
		c.mu.Lock()
		c.flushRunsLocked()
		buf := c.wbuf
		c.wbuf = spare[:0]
		closing := c.closing
		c.mu.Unlock()

		if len(buf) > 0 {
			c.nc.SetWriteDeadline(time.Now().Add(c.srv.writeTimeout()))
			_, err := c.nc.Write(buf)
			lastWrite = time.Now()
			if err != nil {
				c.mu.Lock()
				c.writeErr = err
				c.drained.Broadcast()
				c.mu.Unlock()
				c.nc.Close()
				return
			}
		}
		if cap(buf) <= writeHighWater {
			spare = buf
		} else {
			spare = nil // let a burst's buffer go
		}
		c.mu.Lock()
		c.drained.Broadcast()
		more := len(c.wbuf) > 0
		c.mu.Unlock()
		if closing {
			if !more {
				c.closeWrite()
				return
			}
		}
		if more {
			c.signal()
		}
	}
}

// closeWrite ends our side after our close frame went out. The reader sees
// the peer's close (or EOF) and finishes the connection.
func (c *Conn) closeWrite() {
	if tc, ok := c.nc.(interface{ CloseWrite() error }); ok {
		tc.CloseWrite()
	}
	// Give the peer a moment to answer our close, then cut it off.
	time.AfterFunc(2*time.Second, func() { c.nc.Close() })
}

// writeFrameLocked queues one AMQP frame whose body is produced by body.
func (c *Conn) writeFrameLocked(channel uint16, body func([]byte) []byte) {
	if c.closing {
		return
	}
	c.flushRunsLocked()
	b, start := appendFrameHeader(c.wbuf, frameTypeAMQP, channel)
	c.wbuf = finishFrame(body(b), start)
	c.signal()
}

// flushRunsLocked writes the disposition runs that sessions accumulated.
func (c *Conn) flushRunsLocked() {
	for _, s := range c.dispRuns {
		if !s.run.active {
			continue
		}
		s.run.active = false
		d := Disposition{Role: s.run.role, First: s.run.first, Last: s.run.last, HasLast: true, Settled: s.run.settled, State: s.run.state}
		b, start := appendFrameHeader(c.wbuf, frameTypeAMQP, s.channel)
		c.wbuf = finishFrame(d.append(b), start)
	}
	c.dispRuns = c.dispRuns[:0]
}
