package amqp

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
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

	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	conns     map[*Conn]struct{}
	shutdown  bool
	wg        sync.WaitGroup
}

// ErrServerClosed is returned by Serve after Shutdown.
var ErrServerClosed = errors.New("amqp: server closed")

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

// Serve accepts connections on l until l fails or Shutdown is called.
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
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, l)
		s.mu.Unlock()
	}()

	var backoff time.Duration
	for {
		nc, err := l.Accept()
		if err != nil {
			s.mu.Lock()
			down := s.shutdown
			s.mu.Unlock()
			if down {
				return ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				time.Sleep(backoff)
				continue
			}
			return err
		}
		backoff = 0
		s.ServeConn(nc)
	}
}

// ServeConn serves one already accepted connection in a new goroutine.
func (s *Server) ServeConn(nc net.Conn) {
	c := newConn(s, nc)
	s.mu.Lock()
	if s.shutdown {
		s.mu.Unlock()
		nc.Close()
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
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
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
