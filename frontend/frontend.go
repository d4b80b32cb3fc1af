// Package frontend serves Azure Service Bus over AMQP 1.0: $cbs, the
// $management node, senders and receivers of queues, on the engine in
// frontend/amqp. It keeps no durable state: every message and lock lives in
// a partition group, reached through a Backend.
package frontend

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/quorumbus/quorumbus/frontend/amqp"
	"github.com/quorumbus/quorumbus/placement/credits"
	"github.com/quorumbus/quorumbus/placement/sas"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// Config configures a Server. The zero value (with a Backend) is usable.
type Config struct {
	Backend Backend
	// Rules are the authorization rules that tokens put on $cbs and SASL
	// PLAIN logins are checked against. Required: a front-end without
	// rules would let nobody in.
	Rules RuleSource
	// ClaimTimeout bounds how long a connection may stay open before it
	// presents its first valid claim (a token on $cbs); until then it may
	// attach only $cbs links. Default 60s.
	ClaimTimeout time.Duration
	Logger       *slog.Logger
	// ContainerID is announced in the AMQP open frame. Default "quorumbus".
	ContainerID string
	// ReceiveWait bounds one long-poll of a partition for a receiver with
	// credit. Default 5s.
	ReceiveWait time.Duration
	// SendBatch caps how many messages of one link go into one partition
	// request. Default 256.
	SendBatch int
	// SendBatchBytes caps the bytes of messages one link packs into one
	// partition request: the transfer that reaches it is the last. A
	// storage node takes requests of up to 4 MiB in one Raft entry and
	// stages larger ones in pieces, which costs a round trip each.
	// Default 1 MiB.
	SendBatchBytes int
	// MaxConnections bounds the AMQP connections served at once; past it
	// a client is refused with amqp:resource-limit-exceeded. Default
	// 5000, Service Bus's limit of AMQP connections per namespace
	// (Standard tier); negative means no limit.
	MaxConnections int
	// MaxConnPartialBytes and MaxPartialBytes bound the bytes held in
	// unfinished (multi-frame) incoming messages per connection and over
	// the whole front-end (amqp.Server). Defaults 256 MiB, which admits two
	// 100 MB messages per connection, and 1 GiB.
	MaxConnPartialBytes int64
	MaxPartialBytes     int64
	// ThrottleCredits is the namespace's credit budget a second
	// (throttle.go): a message sent, received, peeked or scheduled costs
	// 1, a rule operation 10. Zero or negative: no throttling. Service
	// Bus Standard gives 1000.
	ThrottleCredits int64
	// ThrottleShare returns the part of the budget this front-end
	// spends, in (0, 1], among the namespace's live front-ends and
	// gateways (placement/credits.Spenders); nil: all of it.
	ThrottleShare func() float64
	// MaxPendingSends is resource-based throttling (throttle.go): a send
	// or schedule that would make the messages pending (queued by links,
	// in flight to the partitions) more than this is refused with
	// server-busy. Zero or negative: no bound.
	MaxPendingSends int
	// AllowNoSASL serves peers that skip the SASL layer (an AMQP header
	// first) as SASL ANONYMOUS ones: they get nothing until they put a
	// token on $cbs, within ClaimTimeout. The JavaScript SDK connects so
	// when its connection string carries a SharedAccessSignature (it
	// sends SASL only with a key name), and Service Bus serves it. Off:
	// such peers are refused.
	AllowNoSASL bool
	// SessionAcceptWait is how long an accept-next session receiver waits
	// for a session when the client names no com.microsoft:timeout.
	// Default DefaultSessionAcceptWait.
	SessionAcceptWait time.Duration
	// PeekMaxBytes bounds the messages of one peek's answer
	// (com.microsoft:peek-message): a partition stops before the message
	// that would take them past it, and answers one larger message alone,
	// so a client paging on from the last number gets fewer messages a
	// page, never none. Default DefaultPeekMaxBytes; a storage node caps
	// it at 8 MiB (partition.MaxPeekBytes), and one that predates the
	// bound answers up to that.
	PeekMaxBytes int
}

// DefaultPeekMaxBytes is Config.PeekMaxBytes's default. A peek's answer
// is one AMQP message on the management reply link, which the Go and
// JavaScript SDKs take whatever its size (their go-amqp and rhea
// receivers announce no max-message-size there), and the front-end holds
// it about three times while
// it answers (the partition's answer, each message encoded, the response
// encoded): 4 MiB makes that 12 MiB a peek in flight, small beside the
// 1 GiB budget of incoming messages (docs/operations.md, "Memory"), and
// it is what one Raft entry of sends holds, so a page still carries
// dozens of messages at the Standard tier's 256 KB.
const DefaultPeekMaxBytes = 4 << 20

func (c *Config) validate() error {
	if c.Backend == nil {
		return errors.New("frontend: Config.Backend is nil")
	}
	if c.Rules == nil {
		return errors.New("frontend: Config.Rules is nil; give the front-end at least one authorization rule")
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.ClaimTimeout == 0 {
		c.ClaimTimeout = 60 * time.Second
	}
	if c.ContainerID == "" {
		c.ContainerID = "quorumbus"
	}
	if c.SessionAcceptWait == 0 {
		c.SessionAcceptWait = DefaultSessionAcceptWait
	}
	if c.ReceiveWait == 0 {
		c.ReceiveWait = 5 * time.Second
	}
	if c.SendBatch == 0 {
		c.SendBatch = 256
	}
	if c.SendBatchBytes == 0 {
		c.SendBatchBytes = 1 << 20
	}
	if c.PeekMaxBytes <= 0 {
		c.PeekMaxBytes = DefaultPeekMaxBytes
	}
	if c.MaxConnections == 0 {
		c.MaxConnections = 5000
	}
	if c.MaxConnections < 0 {
		c.MaxConnections = 0 // the engine's "no limit"
	}
	if c.MaxConnPartialBytes < 0 || c.MaxPartialBytes < 0 {
		return errors.New("frontend: partial-bytes budgets must not be negative")
	}
	return nil
}

// Server is the Service Bus front-end: an AMQP listener.
type Server struct {
	cfg      Config
	amqp     *amqp.Server
	throttle *throttle // nil: no throttling
	counters counters  // metrics.go
	// unkeyed are the cursors of unkeyed sends, by entity (unkeyed.go);
	// rotations the receivers' pass rotations (pass.go).
	unkeyed   entityShared[unkeyedCursor]
	rotations entityShared[passRotation]
}

// New validates cfg and builds a Server.
func New(cfg Config) (*Server, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, throttle: newThrottle(cfg.ThrottleCredits, cfg.ThrottleShare, cfg.MaxPendingSends)}
	s.amqp = &amqp.Server{
		Handler:     s,
		ContainerID: cfg.ContainerID,
		// Service Bus allows messages up to 100 MB on entities that say so;
		// each link announces its entity's own limit.
		MaxMessageSize:      100 << 20,
		SASL:                saslLogin{rules: cfg.Rules, log: cfg.Logger.Debug},
		RequireSASL:         !cfg.AllowNoSASL,
		Logger:              cfg.Logger,
		MaxConnections:      cfg.MaxConnections,
		MaxConnPartialBytes: cfg.MaxConnPartialBytes,
		MaxPartialBytes:     cfg.MaxPartialBytes,
	}
	return s, nil
}

// Serve accepts AMQP connections on l. It returns amqp.ErrServerClosed
// after Shutdown, and an error when l fails for good; errors that pass,
// such as running out of descriptors, it rides out.
func (s *Server) Serve(l net.Listener) error { return s.amqp.Serve(l) }

// Listening reports whether Serve is accepting connections.
func (s *Server) Listening() bool { return s.amqp.Listening() }

// Stats returns the AMQP listener's counters: connections served and
// refused, accept errors retried, bytes held in unfinished messages.
func (s *Server) Stats() amqp.Stats { return s.amqp.Stats() }

// Throttled returns how many requests were throttled, per entity (sends
// and management operations refused with server-busy, receives made to
// wait).
func (s *Server) Throttled() map[string]uint64 { return s.throttle.counts() }

// Credits is the front-end's share of the namespace's credits, for a
// process that serves the admin API beside it to spend from (dev mode's
// gateway): one budget, and its throttled requests counted in Throttled.
func (s *Server) Credits() *credits.Bucket { return s.throttle.credits }

// PendingSends is the front-end's pending work that MaxPendingSends
// bounds: messages links have queued or sent to partitions, and scheduled
// ones, not yet stored or refused.
func (s *Server) PendingSends() int64 { return s.throttle.pending.Load() }

// Shutdown closes every connection and waits for them or for ctx.
func (s *Server) Shutdown(ctx context.Context) error { return s.amqp.Shutdown(ctx) }

// OpenConn implements amqp.Handler.
func (s *Server) OpenConn(c *amqp.Conn) (amqp.ConnHandler, error) {
	s.counters.connsOpened.Add(1)
	cn := &conn{srv: s, amqp: c, log: s.cfg.Logger.With("remote", c.RemoteAddr().String())}
	cn.auth = newAuthz(cn, s.cfg.ClaimTimeout)
	return cn, nil
}

// conn is the state of one client connection. The engine calls its methods
// from the connection's reading goroutine only, so it needs no lock.
type conn struct {
	srv     *Server
	amqp    *amqp.Conn
	log     *slog.Logger
	replies replyLinks
	auth    *authz
	cbs     int // $cbs links attached
	// sessionLocks are the session locks of the connection's session
	// receivers, for the session's $management operations.
	sessionLocks sessionRegistry
}

func (c *conn) Closed(error) {
	c.srv.counters.connsClosed.Add(1)
	c.auth.close()
}

// Attach routes a link by its address: $cbs, <entity>/$management, or an
// entity (optionally its /$DeadLetterQueue). Every link but $cbs's needs a
// claim that covers its address, checked before the entity is looked up
// so that a client without one learns nothing, not even whether the
// entity exists.
func (c *conn) Attach(l *amqp.Link) (amqp.LinkHandler, error) {
	h, err := c.attach(l)
	if err != nil {
		c.auth.forget(l) // admitted, then refused for another reason
		return nil, err
	}
	if c.auth.watching(l) {
		return c.auth.watched(l, h), nil
	}
	return h, nil
}

func (c *conn) attach(l *amqp.Link) (amqp.LinkHandler, error) {
	a := l.Attach()
	if a.Role == amqp.RoleSender {
		if a.Target == nil {
			return nil, amqp.Errorf(amqp.ErrCondInvalidField, "a sending link needs a target")
		}
		addr := a.Target.Address
		switch {
		case strings.EqualFold(addr, cbsNode):
			if err := c.admitCBS(); err != nil {
				return nil, err
			}
			l.SetMaxMessageSize(maxCBSMessageSize)
			return &rpcLink{c: c, node: cbsNode, serve: c.serveCBS, cbs: true}, nil
		case hasSuffixFold(addr, "/"+managementNode):
			if err := c.auth.admit(l, linkNeed{path: addr, rights: sas.Listen | sas.Send | sas.Manage, anyRight: true}); err != nil {
				return nil, err
			}
			entity := addr[:len(addr)-len(managementNode)-1]
			return &rpcLink{c: c, node: addr, serve: func(r *rpcRequest) { c.serveManagement(entity, r) }}, nil
		}
		if err := c.auth.admit(l, linkNeed{path: addr, rights: sas.Send}); err != nil {
			return nil, err
		}
		e, sub, err := c.lookup(addr)
		if err != nil {
			return nil, err
		}
		if sub != "" || e.Kind == placementpb.EntityKind_ENTITY_KIND_SUBSCRIPTION {
			return nil, amqp.Errorf(amqp.ErrCondNotAllowed, "cannot send to %s", addr)
		}
		return c.newSender(l, e)
	}
	if a.Source == nil {
		return nil, amqp.Errorf(amqp.ErrCondInvalidField, "a receiving link needs a source")
	}
	addr := a.Source.Address
	if strings.EqualFold(addr, cbsNode) {
		if err := c.admitCBS(); err != nil {
			return nil, err
		}
		rl := &replyLink{c: c, link: l, cbs: true}
		c.replies.add(rl)
		return rl, nil
	}
	if hasSuffixFold(addr, "/"+managementNode) {
		if err := c.auth.admit(l, linkNeed{path: addr, rights: sas.Listen | sas.Send | sas.Manage, anyRight: true}); err != nil {
			return nil, err
		}
		rl := &replyLink{c: c, link: l}
		c.replies.add(rl)
		return rl, nil
	}
	if err := c.auth.admit(l, linkNeed{path: addr, rights: sas.Listen}); err != nil {
		return nil, err
	}
	e, sub, err := c.lookup(addr)
	if err != nil {
		return nil, err
	}
	if e.Kind == placementpb.EntityKind_ENTITY_KIND_TOPIC {
		// A topic keeps no messages: they are in its subscriptions.
		return nil, amqp.Errorf(amqp.ErrCondNotAllowed, "cannot receive from topic %s: receive from one of its subscriptions, %s/Subscriptions/<name>", addr, addr)
	}
	return c.newReceiver(l, e, sub)
}

// admitCBS bounds the $cbs links of a connection: a client needs two at a
// time (the Go SDK ends their session after each put-token, which detaches
// them), so more is a client that holds links it does not use.
func (c *conn) admitCBS() error {
	if c.cbs >= maxCBSLinks {
		return amqp.Errorf(amqp.ErrCondResourceLimitExceeded, "a connection may hold at most %d $cbs links", maxCBSLinks)
	}
	c.cbs++
	return nil
}

// lookup resolves an entity address. The dead-letter sub-queue is addressed
// as <entity>/$DeadLetterQueue.
func (c *conn) lookup(addr string) (*placementpb.Entity, string, error) {
	name, sub := addr, ""
	if i := strings.LastIndex(addr, "/"); i >= 0 && strings.EqualFold(addr[i+1:], "$DeadLetterQueue") {
		name, sub = addr[:i], "$DeadLetterQueue"
	}
	e, err := c.srv.cfg.Backend.Entity(name)
	if err != nil {
		return nil, "", errFailure(err).amqpError(name)
	}
	return e, sub, nil
}

func hasSuffixFold(s, suffix string) bool {
	return len(s) >= len(suffix) && strings.EqualFold(s[len(s)-len(suffix):], suffix)
}
