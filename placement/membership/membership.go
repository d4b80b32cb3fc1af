// Package membership tells every quorumbus process which others are alive,
// through hashicorp/memberlist gossip. Each process announces its node id,
// role, gRPC address and zone, and joins the cluster through seed
// addresses; the placement service reads the live members to learn of
// storage nodes, and front-ends and gateways to find placement.
package membership

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
	"google.golang.org/protobuf/proto"

	"github.com/quorumbus/quorumbus/placement/internal/logbridge"
	pb "github.com/quorumbus/quorumbus/proto/placementpb"
)

// Role says what a process does.
type Role string

const (
	RoleStorage  Role = "storage"
	RoleFrontend Role = "frontend"
	RoleGateway  Role = "gateway"
)

// Member is a live process as its gossip describes it.
type Member struct {
	NodeID   string
	Role     Role
	GRPCAddr string
	Zone     string
}

var (
	ErrInvalidConfig = errors.New("membership: invalid config")
	ErrMeta          = errors.New("membership: bad member metadata")
)

const metaFormat byte = 1

// EncodeMeta is the metadata a member gossips: a format byte, then protobuf.
func EncodeMeta(m Member) ([]byte, error) {
	return proto.MarshalOptions{}.MarshalAppend([]byte{metaFormat}, &pb.MemberMeta{
		NodeId: m.NodeID, Role: string(m.Role), GrpcAddr: m.GRPCAddr, Zone: m.Zone,
	})
}

// DecodeMeta reads what EncodeMeta wrote.
func DecodeMeta(data []byte) (Member, error) {
	if len(data) == 0 || data[0] != metaFormat {
		return Member{}, fmt.Errorf("%w: no format byte %d", ErrMeta, metaFormat)
	}
	var m pb.MemberMeta
	if err := proto.Unmarshal(data[1:], &m); err != nil {
		return Member{}, fmt.Errorf("%w: %v", ErrMeta, err)
	}
	if m.NodeId == "" {
		return Member{}, fmt.Errorf("%w: no node id", ErrMeta)
	}
	return Member{NodeID: m.NodeId, Role: Role(m.Role), GRPCAddr: m.GrpcAddr, Zone: m.Zone}, nil
}

// Config describes this process to the others and says how to find them.
type Config struct {
	NodeID   string // unique in the cluster; memberlist's node name
	Role     Role
	GRPCAddr string // where this process serves gRPC
	Zone     string // failure domain; replicas of a group spread over zones

	// BindAddr is the gossip address (UDP and TCP), "host:port"; port 0
	// picks a free one (see Addr). Default "0.0.0.0:7946".
	BindAddr string
	// AdvertiseAddr is the gossip address others reach this process at,
	// "host:port"; empty lets memberlist derive it from BindAddr.
	AdvertiseAddr string
	// Seeds are gossip addresses of members to join through. Empty starts a
	// cluster of one that others join.
	Seeds []string
	// Network picks memberlist's timing profile: "lan" (default), "wan",
	// or "local" (loopback: dev mode and tests; fast failure detection).
	Network string
	// RejoinInterval is how often a process that sees no other member
	// tries its seeds again. Default 10 s.
	RejoinInterval time.Duration
	// Keys encrypt and authenticate gossip (memberlist's keyring, AES-GCM):
	// the first encrypts what this process sends, any of them opens what
	// it receives, and a message none opens is dropped, so a process
	// without a key of the cluster cannot join or be heard. Each is 16,
	// 24 or 32 bytes. Empty: gossip in clear text. SetKeys changes them
	// while running (a rotation).
	Keys   [][]byte
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.BindAddr == "" {
		c.BindAddr = "0.0.0.0:7946"
	}
	if c.Network == "" {
		c.Network = "lan"
	}
	if c.RejoinInterval == 0 {
		c.RejoinInterval = 10 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Validate reports whether the config (with defaults) can start.
func (c Config) Validate() error {
	c = c.withDefaults()
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...)
	}
	switch {
	case c.NodeID == "":
		return bad("NodeID is required")
	case c.Role == "":
		return bad("Role is required")
	case c.Network != "lan" && c.Network != "wan" && c.Network != "local":
		return bad("Network %q is not lan, wan or local", c.Network)
	case c.RejoinInterval < 0:
		return bad("RejoinInterval %v is negative", c.RejoinInterval)
	}
	if _, _, err := splitHostPort(c.BindAddr); err != nil {
		return bad("BindAddr: %v", err)
	}
	if c.AdvertiseAddr != "" {
		if _, _, err := splitHostPort(c.AdvertiseAddr); err != nil {
			return bad("AdvertiseAddr: %v", err)
		}
	}
	for i, k := range c.Keys {
		if err := memberlist.ValidateKey(k); err != nil {
			return bad("gossip key %d: %v", i+1, err)
		}
	}
	meta, err := EncodeMeta(c.self())
	if err != nil {
		return bad("metadata: %v", err)
	}
	if len(meta) > memberlist.MetaMaxSize {
		return bad("metadata of %d bytes, memberlist carries at most %d", len(meta), memberlist.MetaMaxSize)
	}
	return nil
}

func (c Config) self() Member {
	return Member{NodeID: c.NodeID, Role: c.Role, GRPCAddr: c.GRPCAddr, Zone: c.Zone}
}

func splitHostPort(addr string) (string, int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("bad port in %q", addr)
	}
	return host, port, nil
}

// Memberlist is this process's view of the cluster.
type Memberlist struct {
	cfg  Config
	log  *slog.Logger
	meta []byte

	mu      sync.Mutex
	list    *memberlist.Memberlist
	keyring *memberlist.Keyring // nil: gossip in clear text
	changed chan struct{}       // closed and replaced on every change

	cancel    context.CancelFunc
	done      chan struct{}
	closeOnce sync.Once
	closeErr  error
}

// New checks the config; Start joins the cluster.
func New(cfg Config) (*Memberlist, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	meta, err := EncodeMeta(cfg.self())
	if err != nil {
		return nil, err
	}
	return &Memberlist{
		cfg:     cfg,
		log:     cfg.Logger.With("component", "membership", "node", cfg.NodeID),
		meta:    meta,
		changed: make(chan struct{}),
	}, nil
}

// Start binds the gossip port and joins through the seeds. Failing to
// reach any seed is not an error: the process runs alone and keeps trying
// every RejoinInterval, as it does whenever it finds itself alone.
func (m *Memberlist) Start(ctx context.Context) error {
	var conf *memberlist.Config
	switch m.cfg.Network {
	case "local":
		conf = memberlist.DefaultLocalConfig()
	case "wan":
		conf = memberlist.DefaultWANConfig()
	default:
		conf = memberlist.DefaultLANConfig()
	}
	conf.Name = m.cfg.NodeID
	conf.BindAddr, conf.BindPort, _ = splitHostPort(m.cfg.BindAddr)
	conf.AdvertisePort = conf.BindPort
	if m.cfg.AdvertiseAddr != "" {
		conf.AdvertiseAddr, conf.AdvertisePort, _ = splitHostPort(m.cfg.AdvertiseAddr)
	}
	if len(m.cfg.Keys) > 0 {
		kr, err := memberlist.NewKeyring(m.cfg.Keys, m.cfg.Keys[0])
		if err != nil {
			return fmt.Errorf("membership: %w", err)
		}
		conf.Keyring = kr
		conf.GossipVerifyIncoming, conf.GossipVerifyOutgoing = true, true
	}
	conf.Delegate = delegate{m}
	conf.Events = events{m}
	conf.Logger = log.New(logbridge.Writer(m.log), "", 0)

	list, err := memberlist.Create(conf)
	if err != nil {
		return fmt.Errorf("membership: %w", err)
	}
	m.mu.Lock()
	m.list, m.keyring = list, conf.Keyring
	m.mu.Unlock()
	m.log.Info("gossiping", "addr", m.Addr(), "role", m.cfg.Role)

	m.join()
	loopCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	m.cancel, m.done = cancel, make(chan struct{})
	go m.rejoin(loopCtx)
	return nil
}

// ErrNoKeyring is returned by SetKeys on a process that gossips in clear
// text: encryption cannot be turned on while running, since the members
// that still gossip in clear text would no longer be heard.
var ErrNoKeyring = errors.New("membership: gossip is not encrypted (Config.Keys was empty at start)")

// SetKeys replaces the gossip keys while running: keys[0] encrypts from
// now on, every one of keys opens, and keys no longer listed are dropped.
// A rotation gives every member the new key as a second key, then as the
// first, then drops the old one, each step on every member before the next
// (docs/security.md).
func (m *Memberlist) SetKeys(keys [][]byte) error {
	if len(keys) == 0 {
		return fmt.Errorf("%w: no gossip key", ErrInvalidConfig)
	}
	m.mu.Lock()
	ring := m.keyring
	m.mu.Unlock()
	if ring == nil {
		return ErrNoKeyring
	}
	for _, k := range keys {
		if err := ring.AddKey(k); err != nil {
			return fmt.Errorf("membership: %w", err)
		}
	}
	if err := ring.UseKey(keys[0]); err != nil {
		return fmt.Errorf("membership: %w", err)
	}
	for _, old := range ring.GetKeys() {
		if !slices.ContainsFunc(keys, func(k []byte) bool { return string(k) == string(old) }) {
			if err := ring.RemoveKey(old); err != nil {
				return fmt.Errorf("membership: %w", err)
			}
		}
	}
	return nil
}

func (m *Memberlist) join() {
	if len(m.cfg.Seeds) == 0 {
		return
	}
	n, err := m.list.Join(m.cfg.Seeds)
	if n == 0 {
		m.log.Warn("no seed answered; running alone for now", "seeds", strings.Join(m.cfg.Seeds, ","), "err", err)
	}
}

func (m *Memberlist) rejoin(ctx context.Context) {
	defer close(m.done)
	t := time.NewTicker(m.cfg.RejoinInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if m.list.NumMembers() <= 1 {
				m.join()
			}
		}
	}
}

// Addr is the gossip address this process is reached at: what other
// processes put in their Seeds.
//
// memberlist is called outside m.mu, as in Members: its own lock is held
// while it calls our notify (NotifyJoin), which takes m.mu, so holding
// m.mu while waiting for memberlist's lock deadlocks.
func (m *Memberlist) Addr() string {
	m.mu.Lock()
	list := m.list
	m.mu.Unlock()
	if list == nil {
		return ""
	}
	return list.LocalNode().Address()
}

// Members lists the live members, this process included, ordered by node
// id. Members whose metadata does not decode are left out.
func (m *Memberlist) Members() []Member {
	m.mu.Lock()
	list := m.list
	m.mu.Unlock()
	if list == nil {
		return []Member{m.cfg.self()}
	}
	var out []Member
	for _, n := range list.Members() {
		mem, err := DecodeMeta(n.Meta)
		if err != nil {
			m.log.Debug("ignoring a member", "name", n.Name, "err", err)
			continue
		}
		out = append(out, mem)
	}
	slices.SortFunc(out, func(a, b Member) int { return strings.Compare(a.NodeID, b.NodeID) })
	return out
}

// Changed returns a channel that is closed at the next change of the
// member list after the call (a join, a leave or failure, new metadata).
func (m *Memberlist) Changed() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.changed
}

func (m *Memberlist) notify() {
	m.mu.Lock()
	defer m.mu.Unlock()
	close(m.changed)
	m.changed = make(chan struct{})
}

// Close leaves the cluster, telling the others, and stops gossiping.
func (m *Memberlist) Close() error {
	m.closeOnce.Do(func() {
		m.mu.Lock()
		list := m.list
		m.mu.Unlock()
		if list == nil {
			return
		}
		m.cancel()
		<-m.done
		m.closeErr = errors.Join(list.Leave(time.Second), list.Shutdown())
	})
	return m.closeErr
}

type delegate struct{ m *Memberlist }

func (d delegate) NodeMeta(limit int) []byte {
	if len(d.m.meta) > limit {
		return nil // Validate checked it fits
	}
	return d.m.meta
}
func (delegate) NotifyMsg([]byte)                {}
func (delegate) GetBroadcasts(int, int) [][]byte { return nil }
func (delegate) LocalState(bool) []byte          { return nil }
func (delegate) MergeRemoteState([]byte, bool)   {}

type events struct{ m *Memberlist }

func (e events) NotifyJoin(n *memberlist.Node) {
	e.m.log.Debug("member joined", "name", n.Name)
	e.m.notify()
}
func (e events) NotifyLeave(n *memberlist.Node) {
	e.m.log.Debug("member left", "name", n.Name)
	e.m.notify()
}
func (e events) NotifyUpdate(n *memberlist.Node) { e.m.notify() }
