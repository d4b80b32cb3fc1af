package amqp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Handler accepts connections. OpenConn is called once the peer's open
// frame has arrived; it returns the ConnHandler that serves the
// connection's links, or an error (an *Error chooses the condition) to
// refuse the connection.
type Handler interface {
	OpenConn(c *Conn) (ConnHandler, error)
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(c *Conn) (ConnHandler, error)

func (f HandlerFunc) OpenConn(c *Conn) (ConnHandler, error) { return f(c) }

// ConnHandler serves the links of one connection. The engine calls it from
// the connection's reading goroutine, one call at a time, so its methods
// must not block on other connections or on the network; long work goes
// elsewhere and reports back through the Link methods, which any goroutine
// may call.
type ConnHandler interface {
	// Attach is called when the peer attaches a link. It returns the
	// handler for the link (a MessageHandler when the peer sends, a
	// SenderHandler when the peer receives), or an error to refuse it.
	Attach(l *Link) (LinkHandler, error)
	// Closed is called once when the connection is gone; err is nil for an
	// orderly close.
	Closed(err error)
}

// LinkHandler is the common part of the link handlers.
type LinkHandler interface {
	// Detached is called once when the link ends: detached by the peer (err
	// is the peer's error, or nil), or because its session or connection
	// ended (err says why).
	Detached(l *Link, err error)
}

// MessageHandler serves a link on which the peer sends messages.
type MessageHandler interface {
	LinkHandler
	// Message is called for each complete message. The Delivery and its
	// byte slices are valid only until Message returns. Unless the peer
	// sent it settled, the handler must eventually settle it with
	// l.Settle(d.ID, outcome), from any goroutine.
	Message(l *Link, d *Delivery)
}

// SenderHandler serves a link on which the peer receives messages.
type SenderHandler interface {
	LinkHandler
	// Flow is called when the peer changes the link's credit: credit is
	// what the handler may now send with l.Send; with drain set the peer
	// asks to use it up or give it back with l.Drain. The call comes after
	// the engine released the connection, so a Send on another goroutine
	// may already have used some of that credit: a handler that sends
	// from elsewhere reads l.SendState rather than keeping these values.
	Flow(l *Link, credit uint32, drain bool)
	// Disposition is called when the peer reports the state of an unsettled
	// delivery. With settled false (receiver settle mode second) the
	// handler confirms by calling l.Settle.
	Disposition(l *Link, deliveryID uint32, state DeliveryState, settled bool)
}

// Delivery is one complete message received on a link.
type Delivery struct {
	ID      uint32
	Tag     []byte
	Format  uint32 // message format; 0 is a plain message, 0x80013700 a Service Bus batch
	Settled bool   // the peer settled it before sending (at-most-once)
	Payload []byte // the encoded message sections
}

// Server is an AMQP 1.0 listener. The zero value, given a Handler, serves
// with the defaults below.
type Server struct {
	Handler Handler

	// ContainerID is sent in our open frame. Default "quorumbus".
	ContainerID string
	// MaxFrameSize is the largest frame we accept. Default 65536.
	MaxFrameSize uint32
	// ChannelMax is the highest session channel we allow. Default 1023.
	ChannelMax uint16
	// IdleTimeout closes a connection that sends nothing for this long; we
	// announce it so that peers send keep-alives. Default 60s.
	IdleTimeout time.Duration
	// MaxMessageSize is the default largest message a link accepts. Default
	// 1 MiB; a ConnHandler may set another per link.
	MaxMessageSize uint64
	// SessionWindow is the incoming window of every session, in transfer
	// frames. Default 5000.
	SessionWindow uint32
	// LinkCredit is the default credit window of links on which the peer
	// sends. Default 1000.
	LinkCredit uint32
	// SASL authenticates connections. nil offers ANONYMOUS only.
	SASL Authenticator
	// RequireSASL refuses peers that skip the SASL layer.
	RequireSASL bool
	// WriteTimeout bounds one write to a peer that does not read. Default 30s.
	WriteTimeout time.Duration
	// Logger receives connection-level events. Default slog.Default().
	Logger *slog.Logger

	// MaxConnections bounds the connections served at once, so that
	// descriptors and memory run out for new peers before they do for the
	// ones being served. A connection past it is refused: it gets our
	// open and a close with amqp:resource-limit-exceeded. Zero means no
	// limit (like net/http); the process's descriptor limit then bounds
	// it, and Serve rides out running out of descriptors by retrying.
	MaxConnections int
	// MaxConnPartialBytes bounds the bytes one connection holds in
	// unfinished incoming messages (multi-frame transfers being
	// reassembled), over all its links. Default 256 MiB: two messages of
	// the largest size Service Bus allows (100 MB) in flight at once.
	MaxConnPartialBytes int64
	// MaxPartialBytes bounds the same bytes over every connection of the
	// server. Default 1 GiB. A transfer that would take a connection or
	// the server past its budget detaches its link with
	// amqp:resource-limit-exceeded and frees what the link held.
	MaxPartialBytes int64

	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	conns     map[*Conn]struct{}
	refusing  int // connections being refused politely
	shutdown  bool
	closed    chan struct{} // closed by Shutdown; wakes accept back-offs
	wg        sync.WaitGroup

	partial         atomic.Int64 // bytes of unfinished incoming messages, all connections
	refusedConns    atomic.Uint64
	partialRefusals atomic.Uint64
	acceptRetries   atomic.Uint64
}

// ErrServerClosed is returned by Serve after Shutdown.
var ErrServerClosed = errors.New("amqp: server closed")

// Stats is a snapshot of a Server's counters, for metrics and readiness.
type Stats struct {
	Listeners       int    // Serve loops accepting connections
	Conns           int    // connections being served
	RefusedConns    uint64 // connections refused because MaxConnections was reached
	AcceptRetries   uint64 // temporary accept errors (out of descriptors, ...) retried
	PartialBytes    int64  // bytes held in unfinished incoming messages
	PartialRefusals uint64 // links detached because a partial-bytes budget was exceeded
}

// Stats returns the server's counters.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	st := Stats{Listeners: len(s.listeners), Conns: len(s.conns)}
	s.mu.Unlock()
	st.RefusedConns = s.refusedConns.Load()
	st.AcceptRetries = s.acceptRetries.Load()
	st.PartialBytes = s.partial.Load()
	st.PartialRefusals = s.partialRefusals.Load()
	return st
}

// Listening reports whether a Serve loop is accepting connections: false
// before Serve, after Shutdown, and once every listener has failed for
// good. A listener riding out accept errors (out of descriptors) still
// listens: Stats().AcceptRetries tells how often that happened.
func (s *Server) Listening() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.listeners) > 0 && !s.shutdown
}

func (s *Server) maxFrameSize() uint32 {
	if s.MaxFrameSize == 0 {
		return 65536
	}
	return max(s.MaxFrameSize, minMaxFrameSize)
}

func (s *Server) channelMax() uint16 {
	if s.ChannelMax == 0 {
		return 1023
	}
	return s.ChannelMax
}

func (s *Server) idleTimeout() time.Duration {
	if s.IdleTimeout == 0 {
		return 60 * time.Second
	}
	return s.IdleTimeout
}

func (s *Server) maxMessageSize() uint64 {
	if s.MaxMessageSize == 0 {
		return 1 << 20
	}
	return s.MaxMessageSize
}

func (s *Server) sessionWindow() uint32 {
	if s.SessionWindow == 0 {
		return 5000
	}
	return s.SessionWindow
}

func (s *Server) linkCredit() uint32 {
	if s.LinkCredit == 0 {
		return 1000
	}
	return s.LinkCredit
}

func (s *Server) writeTimeout() time.Duration {
	if s.WriteTimeout == 0 {
		return 30 * time.Second
	}
	return s.WriteTimeout
}

func (s *Server) maxConnPartialBytes() int64 {
	if s.MaxConnPartialBytes == 0 {
		return 256 << 20
	}
	return s.MaxConnPartialBytes
}

func (s *Server) maxPartialBytes() int64 {
	if s.MaxPartialBytes == 0 {
		return 1 << 30
	}
	return s.MaxPartialBytes
}

func (s *Server) logger() *slog.Logger {
	if s.Logger == nil {
		return slog.Default()
	}
	return s.Logger
}

func (s *Server) sasl() Authenticator {
	if s.SASL == nil {
		return SASL{Anonymous: true}
	}
	return s.SASL
}

// Serve accepts connections on l until Shutdown is called, when it
// returns ErrServerClosed, or until l fails for good (closed by someone
// else, or an error that retrying cannot cure), when it returns that
// error. Errors that pass (out of descriptors or buffers, an aborted
// handshake, a timeout) are retried after a back-off of 5 ms doubling to
// 1 s, as net/http does, and logged at most once per acceptLogInterval.
func (s *Server) Serve(l net.Listener) error {
	if s.Handler == nil {
		return errors.New("amqp: Server.Handler is nil")
	}
	s.mu.Lock()
	if s.shutdown {
		s.mu.Unlock()
		return ErrServerClosed
	}
	if s.listeners == nil {
		s.listeners = make(map[net.Listener]struct{})
	}
	s.listeners[l] = struct{}{}
	closed := s.closedLocked()
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, l)
		s.mu.Unlock()
	}()

	var backoff time.Duration
	var lastLog time.Time
	var unlogged int
	for {
		nc, err := l.Accept()
		if err != nil {
			select {
			case <-closed:
				return ErrServerClosed
			default:
			}
			if !temporaryAcceptError(err) {
				s.logger().Error("amqp listener failed; no more connections are accepted", "addr", l.Addr().String(), "err", err)
				return fmt.Errorf("amqp: accept: %w", err)
			}
			s.acceptRetries.Add(1)
			unlogged++
			if now := time.Now(); now.Sub(lastLog) >= acceptLogInterval {
				s.logger().Warn("amqp accept failed; retrying", "addr", l.Addr().String(), "err", err, "failures", unlogged)
				lastLog, unlogged = now, 0
			}
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
			case <-closed:
				t.Stop()
				return ErrServerClosed
			}
			continue
		}
		backoff = 0
		s.ServeConn(nc)
	}
}

// acceptLogInterval rate-limits the log of retried accept errors: a
// listener out of descriptors fails every back-off period.
const acceptLogInterval = 10 * time.Second

// temporaryAcceptError reports whether an accept error may pass: the
// process or system is out of descriptors or memory for the moment, or one
// peer's connection failed before we took it.
func temporaryAcceptError(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	for _, errno := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM, syscall.ECONNABORTED, syscall.ECONNRESET, syscall.EINTR} {
		if errors.Is(err, errno) {
			return true
		}
	}
	return false
}

func (s *Server) closedLocked() chan struct{} {
	if s.closed == nil {
		s.closed = make(chan struct{})
	}
	return s.closed
}

// maxRefusing bounds the refused connections that get a polite answer at
// once; past it a refused connection is closed at once, so that refusing
// cannot hold the descriptors the limit is there to save.
const maxRefusing = 64

// refuseTimeout is how long a refused peer has to send its protocol
// header (and SASL and open frames) before its connection is cut.
const refuseTimeout = 2 * time.Second

// ServeConn serves one already accepted connection in a new goroutine.
// Past MaxConnections it refuses the connection instead.
func (s *Server) ServeConn(nc net.Conn) {
	c := newConn(s, nc)
	s.mu.Lock()
	if s.shutdown {
		s.mu.Unlock()
		nc.Close()
		return
	}
	if s.MaxConnections > 0 && len(s.conns) >= s.MaxConnections {
		s.refusedConns.Add(1)
		if s.refusing >= maxRefusing {
			s.mu.Unlock()
			nc.Close()
			return
		}
		s.refusing++
		s.wg.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.wg.Done()
			c.refuse(Errorf(ErrCondResourceLimitExceeded, "connection limit reached: %d connections", s.MaxConnections))
			s.mu.Lock()
			s.refusing--
			s.mu.Unlock()
		}()
		return
	}
	if s.conns == nil {
		s.conns = make(map[*Conn]struct{})
	}
	s.conns[c] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		c.serve()
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
	}()
}

// Shutdown stops accepting connections, closes every open connection with
// amqp:connection:forced, and waits for them to finish or for ctx to end.
// Connections being refused (MaxConnections) end within refuseTimeout.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	if !s.shutdown {
		close(s.closedLocked())
	}
	s.shutdown = true
	for l := range s.listeners {
		l.Close()
	}
	conns := make([]*Conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.Close(&Error{Condition: ErrCondConnectionForced, Description: "server shutting down"})
	}
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
