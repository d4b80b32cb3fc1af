// Package agent keeps a storage node in line with the cluster's routing
// table: it watches the table that placement publishes, opens every
// partition group the table places on the node and removes the groups
// moved off it, and reports every second which groups the node leads and
// whether they serve, and which of its groups have been without a leader
// for long, so that the table's leader hints and group health stay fresh.
// A replica without a leader that the group's leader no longer counts as
// a member it retires, so that it stops asking for votes before the table
// takes it off the node (membership.go).
//
// It talks to placement only through PlacementService (proto/placementpb),
// so node and placement still meet only through proto/ and cmd/
// (tests/arch): the process that wires them hands the agent the addresses
// of the placement members it may ask.
package agent

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"

	"github.com/quorumbus/quorumbus/node"
	"github.com/quorumbus/quorumbus/proto/placementpb"
	"github.com/quorumbus/quorumbus/proto/rpcnet"
)

// Node is what the agent uses of a storage node.
type Node interface {
	ID() string
	// Addr is the node's gRPC address, where its own placement member
	// serves too (one port per storage process).
	Addr() string
	EnsureGroup(id uint64, replicas []node.Peer) error
	RemoveGroup(id uint64) error
	Groups() []uint64
	Group(id uint64) (node.GroupStatus, error)
	// Retire closes a replica its group's leader no longer counts as a
	// member, keeping its data, until Unretire (node/retire.go).
	Retire(id uint64) error
	Unretire(id uint64)
	Retired() []uint64
}

var _ Node = (*node.Node)(nil)

// Defaults of Config.
const (
	DefaultReportInterval = time.Second
	// DefaultLeaderlessAfter is twice the node's default election
	// timeout: a replica whose leader died has seen an election that
	// could succeed, and most that split their vote, by then.
	DefaultLeaderlessAfter = 2 * node.DefaultElectionTimeout
	// watchBackoff and maxWatchBackoff pace the retries of a routing-table
	// stream that could not be opened or ended.
	watchBackoff    = 100 * time.Millisecond
	maxWatchBackoff = 2 * time.Second
	// reportTimeout bounds one ReportGroups call.
	reportTimeout = 2 * time.Second
)

// Config configures an Agent.
type Config struct {
	Node Node
	// Others returns the gRPC addresses of the other storage processes,
	// whose placement members serve the table while this node's own one
	// cannot (a node that joined later is no member of the meta group; a
	// member that heard from no meta leader for long, as one removed from
	// the group without knowing it). Called before every try, since the
	// member list changes; nil or empty: only the node's own member.
	Others func() []string
	// Creds is the cluster's mutual TLS the agent dials placement members
	// with; nil: plain text.
	Creds *rpcnet.Creds
	// ReportInterval is how often the agent reports the groups the node
	// leads; 0: DefaultReportInterval.
	ReportInterval time.Duration
	// LeaderlessAfter is how long a replica on the node must have known
	// no leader of its group before the agent reports the group without
	// one, so that placement marks it without quorum at once rather than
	// after its silence (placement's GroupSilence, counted again from
	// the start by a new meta leader); 0: DefaultLeaderlessAfter.
	LeaderlessAfter time.Duration
	Logger          *slog.Logger
}

// Validate reports what is missing from the config.
func (c Config) Validate() error {
	if c.Node == nil {
		return errors.New("agent: no node")
	}
	if c.ReportInterval < 0 {
		return errors.New("agent: negative report interval")
	}
	if c.LeaderlessAfter < 0 {
		return errors.New("agent: negative leaderless threshold")
	}
	return nil
}

// Agent runs a node's agent loop between Start and Close.
type Agent struct {
	cfg Config
	log *slog.Logger
	pc  *placementClients

	mu    sync.Mutex
	table bool // a routing table arrived
	any   bool // it has partition groups
	mine  []uint64
	// peers are the replicas of each group the latest table places on
	// this node (membership.go).
	peers map[uint64][]node.Peer
	// checking: a membership check runs (checkMembership); checks has
	// it, for Close to wait for.
	checking bool
	checks   sync.WaitGroup
	// other: the table comes from another node's placement member, on a
	// stream open now.
	other bool
	// born and version name the newest table applied (apply).
	born, version uint64

	cancel   context.CancelFunc
	done     chan struct{}
	stopOnce sync.Once
}

// New checks the config and returns an agent; Start runs it.
func New(cfg Config) (*Agent, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.ReportInterval == 0 {
		cfg.ReportInterval = DefaultReportInterval
	}
	if cfg.LeaderlessAfter == 0 {
		cfg.LeaderlessAfter = DefaultLeaderlessAfter
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Agent{
		cfg:  cfg,
		log:  cfg.Logger,
		pc:   &placementClients{own: cfg.Node.Addr(), others: cfg.Others, creds: cfg.Creds, conns: map[string]*grpc.ClientConn{}},
		done: make(chan struct{}),
	}, nil
}

// Start runs the agent in the background until ctx ends or Close.
func (a *Agent) Start(ctx context.Context) {
	ctx, a.cancel = context.WithCancel(ctx)
	go func() {
		defer close(a.done)
		defer a.pc.close()
		defer a.checks.Wait() // before the connections close
		reported := make(chan struct{})
		go func() {
			defer close(reported)
			a.report(ctx)
		}()
		a.watch(ctx)
		<-reported
	}()
}

// Close stops the agent and waits for it; calling it again, or without
// Start, does nothing.
func (a *Agent) Close() error {
	a.stopOnce.Do(func() {
		if a.cancel != nil {
			a.cancel()
			<-a.done
		}
	})
	return nil
}

// HasTable reports whether a routing table arrived.
func (a *Agent) HasTable() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.table
}

// FromOther reports whether another node's placement member serves the
// table now, on an open stream.
func (a *Agent) FromOther() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.other
}

// Placed returns the groups the latest table places on this node, or why
// it cannot tell: no table yet, or a cluster with no groups yet (placement
// creates them once enough storage nodes are alive), which cannot serve an
// entity either.
func (a *Agent) Placed() (mine []uint64, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case !a.table:
		return nil, errors.New("no routing table yet")
	case !a.any:
		return nil, errors.New("the cluster has no partition groups yet (waiting for enough storage nodes)")
	}
	return slices.Clone(a.mine), nil
}

func (a *Agent) servedByOther(other bool) {
	a.mu.Lock()
	a.other = other
	a.mu.Unlock()
}

func (a *Agent) placed(t *placementpb.RoutingTable, mine []uint64, peers map[uint64][]node.Peer) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.table, a.any, a.mine, a.peers = true, len(t.Groups) > 0, mine, peers
}

// watch follows the routing table from this node's own placement member,
// or, while that one cannot serve it, from another storage member's, and
// applies every table it receives.
//
// It asks for changes rather than whole tables: a change holds every
// group and node, all the agent reads, so any message, a whole table or a
// change, is the latest word on them and none depends on an earlier one.
// A new stream starts with a whole table (after_version 0), so that a
// member that serves it says so at once (FromOther).
func (a *Agent) watch(ctx context.Context) {
	backoff := watchBackoff
	for attempt := 0; ctx.Err() == nil; attempt++ {
		client, own, err := a.pc.client(attempt)
		if err == nil {
			var stream grpc.ServerStreamingClient[placementpb.RoutingTable]
			stream, err = client.WatchRoutes(ctx, &placementpb.WatchRoutesRequest{Changes: true})
			for err == nil {
				var t *placementpb.RoutingTable
				if t, err = stream.Recv(); err != nil {
					break
				}
				backoff, attempt = watchBackoff, 0
				a.servedByOther(!own)
				a.apply(t)
			}
			a.servedByOther(false)
		}
		if err != nil {
			a.log.Debug("routing table watch", "err", err)
		}
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
		}
		backoff = min(2*backoff, maxWatchBackoff)
	}
}

// apply opens the groups the table (or change: it lists every group and
// node too) places on this node and removes those it lists elsewhere.
//
// A table older than one applied is skipped: a member behind the catalog
// (the stream moved to another member) may serve one, and it would undo
// the moves since, removing a replica the group now counts as a voter.
// Versions compare only within one catalog's birth.
func (a *Agent) apply(t *placementpb.RoutingTable) {
	a.mu.Lock()
	applied := a.version
	stale := applied != 0 && t.CatalogBornMs == a.born && t.Version < applied
	if !stale {
		a.born, a.version = t.CatalogBornMs, t.Version
	}
	a.mu.Unlock()
	if stale {
		a.log.Info("skipping a routing table older than the one applied", "version", t.Version, "applied", applied)
		return
	}
	n := a.cfg.Node
	addrs := make(map[string]string, len(t.Nodes))
	for _, nd := range t.Nodes {
		addrs[nd.Id] = nd.GrpcAddr
	}
	var placed []uint64
	replicas := map[uint64][]node.Peer{}
	defer func() { a.placed(t, placed, replicas) }()
	listed := map[uint64]bool{}
	for _, g := range t.Groups {
		var peers []node.Peer
		mine := false
		for _, r := range g.Replicas {
			peers = append(peers, node.Peer{ID: r.NodeId, Addr: addrs[r.NodeId], Joined: r.Joined})
			mine = mine || r.NodeId == n.ID()
		}
		listed[g.Id] = true
		if !mine {
			continue
		}
		placed = append(placed, g.Id)
		replicas[g.Id] = peers
		// The node records and logs a group that fails to open (when
		// the reason changes) and retries it with backoff; every
		// routing table would repeat it here.
		if err := n.EnsureGroup(g.Id, peers); err != nil {
			a.log.Debug("open group", "group", g.Id, "err", err)
		}
	}
	// A group the table lists without this node was moved off it (the
	// move is recorded done only once the group's configuration no longer
	// has this replica): its data goes. A group the table does not list
	// at all is left alone; the table may be one of a catalog that lost
	// it, which is not this node's to judge.
	for _, id := range append(n.Groups(), n.Retired()...) {
		if listed[id] && !slices.Contains(placed, id) {
			a.log.Info("removing a group moved off this node", "group", id)
			if err := n.RemoveGroup(id); err != nil {
				a.log.Warn("remove group", "group", id, "err", err)
			}
		}
	}
}

// report tells placement, every ReportInterval, which groups this node
// leads and whether each serves, and which of its replicas have known no
// leader for LeaderlessAfter, through its own member or, when that fails,
// another.
func (a *Agent) report(ctx context.Context) {
	n := a.cfg.Node
	t := time.NewTicker(a.cfg.ReportInterval)
	defer t.Stop()
	attempt := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		req := &placementpb.ReportGroupsRequest{NodeId: n.ID()}
		now := time.Now()
		var leaderless []uint64
		for _, id := range n.Groups() {
			st, err := n.Group(id)
			switch {
			case err != nil:
			case st.State == raft.Leader:
				req.Groups = append(req.Groups, &placementpb.GroupReport{GroupId: id, LeaderId: n.ID(), HasQuorum: st.Serving})
			case st.Err == nil && st.State != raft.Shutdown && !st.LeaderlessSince.IsZero() && now.Sub(st.LeaderlessSince) >= a.cfg.LeaderlessAfter:
				req.Groups = append(req.Groups, &placementpb.GroupReport{GroupId: id, LeaderlessMs: uint64(now.Sub(st.LeaderlessSince).Milliseconds())})
				if st.Voter {
					// Maybe removed without hearing of it; a learner
					// waits for the leader that added it.
					leaderless = append(leaderless, id)
				}
			}
		}
		a.startMembershipCheck(ctx, leaderless)
		client, _, err := a.pc.client(attempt)
		if err == nil {
			cctx, cancel := context.WithTimeout(ctx, reportTimeout)
			_, err = client.ReportGroups(cctx, req)
			cancel()
		}
		if err != nil && ctx.Err() == nil {
			a.log.Debug("report groups", "err", err)
			attempt++ // the next report tries the next member
		}
	}
}

// placementClients reaches a placement member: this node's own first,
// then the other storage members in turn.
type placementClients struct {
	own    string
	others func() []string
	creds  *rpcnet.Creds
	mu     sync.Mutex
	conns  map[string]*grpc.ClientConn
}

// client returns the client of the attempt-th candidate, and whether it
// is this node's own member.
func (pc *placementClients) client(attempt int) (_ placementpb.PlacementServiceClient, own bool, _ error) {
	addrs := []string{pc.own}
	if pc.others != nil {
		for _, addr := range pc.others() {
			if addr != "" && addr != pc.own {
				addrs = append(addrs, addr)
			}
		}
	}
	addr := addrs[attempt%len(addrs)]
	own = addr == pc.own
	cc, err := pc.conn(addr)
	if err != nil {
		return nil, own, err
	}
	return placementpb.NewPlacementServiceClient(cc), own, nil
}

// conn returns the connection to a storage process's gRPC port, dialled
// once.
func (pc *placementClients) conn(addr string) (*grpc.ClientConn, error) {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	cc := pc.conns[addr]
	if cc == nil {
		var err error
		if cc, err = rpcnet.Dial(addr, pc.creds); err != nil {
			return nil, err
		}
		pc.conns[addr] = cc
	}
	return cc, nil
}

func (pc *placementClients) close() {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	for _, cc := range pc.conns {
		cc.Close()
	}
}
