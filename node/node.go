// Package node is a quorumbus storage node. A node hosts many partition
// groups; each is one hashicorp/raft instance with its own log store
// (raft-wal or raft-boltdb), stable store, snapshot store and partition
// state machine, all in DataDir/groups/<id>/. All groups share the node's
// one gRPC port: Raft traffic travels through a raftmux.Mux, and the node
// serves PartitionService for the groups it leads, packing concurrent
// requests of a group into shared Raft entries (group commit).
package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"

	"github.com/quorumbus/quorumbus/node/raftmux"
	"github.com/quorumbus/quorumbus/partition"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// MetaGroup is the id of the placement service's catalog group. Its raft
// runs in placement, over RaftTransport(MetaGroup); EnsureGroup refuses it.
const MetaGroup uint64 = 0

// Peer is one replica of a group: a node's ID and gRPC address.
type Peer struct {
	ID   string
	Addr string
	// Joined: the replica was added to the running group by a move
	// (placementpb.Replica.joined). It never bootstraps the group, even
	// first in the list: the group exists, and a second bootstrap would
	// start a second history.
	Joined bool
}

// Node is a storage node.
type Node struct {
	cfg  Config
	log  *slog.Logger
	lis  net.Listener
	addr string
	srv  *grpc.Server
	svc  *service
	mux  *raftmux.Mux

	// openMachine opens a group's state machine, which reads message
	// bodies from the group's Raft log (partition.Options.Log); tests
	// replace it.
	openMachine func(dir string, logs raft.LogStore) (StateMachine, error)

	openMu sync.Mutex // serialises EnsureGroup, RemoveGroup, Start and Close

	// lock is the data directory's lock file, held until Close.
	lock *os.File

	// metaGuard answers the peers' GroupStatus for MetaGroup (metaguard.go).
	metaGuard atomic.Pointer[MetaGuard]

	mu     sync.RWMutex
	groups map[uint64]*group
	// retired are the replicas closed because their group's leader no
	// longer counts them as members (retire.go).
	retired map[uint64]bool
	// troubles are the groups that failed to open or stopped, with
	// when the node tries them again (supervise.go).
	troubles map[uint64]*trouble
	started  bool
	closed   bool

	stopSupervisor chan struct{}
	supervisorDone chan struct{}

	metrics *nodeMetrics // metrics.go

	forward forwardHolder // where forwarders send (forward.go); empty: none

	// sharedSlots are the entries in flight beyond one a group that the
	// groups this node leads share (propose.go).
	sharedSlots chan struct{}
}

// New returns a node that listens (on cfg.Listener, or on cfg.Addr) but
// does not serve until Start.
func New(cfg Config) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	if err := os.MkdirAll(filepath.Join(cfg.DataDir, "groups"), 0o750); err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	// The lock comes before the port: a second node on this directory
	// fails here, with a message, instead of holding a port it never
	// serves.
	lock, err := lockDataDir(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	lis := cfg.Listener
	if lis == nil {
		if lis, err = net.Listen("tcp", cfg.Addr); err != nil {
			lock.Close()
			return nil, fmt.Errorf("node: %w", err)
		}
	}
	log := cfg.Logger // the caller names the node in it (Config.Logger)
	mux, err := raftmux.New(raftmux.Config{Logger: log, Creds: cfg.Creds, DialOptions: cfg.PeerDialOptions})
	if err != nil {
		lis.Close()
		lock.Close()
		return nil, err
	}
	n := &Node{
		cfg:            cfg,
		log:            log,
		lis:            lis,
		addr:           cfg.AdvertiseAddr,
		srv:            grpc.NewServer(raftmux.ServerOptions(cfg.Creds)...),
		mux:            mux,
		lock:           lock,
		groups:         make(map[uint64]*group),
		troubles:       make(map[uint64]*trouble),
		retired:        make(map[uint64]bool),
		stopSupervisor: make(chan struct{}),
		supervisorDone: make(chan struct{}),
		metrics:        newNodeMetrics(),
		sharedSlots:    make(chan struct{}, sharedInFlight),
	}
	if n.addr == "" {
		n.addr = lis.Addr().String()
	}
	n.openMachine = func(dir string, logs raft.LogStore) (m StateMachine, err error) {
		// pebble panics when it cannot write its manifest, as on a
		// full disk. At open that is a failure of this group, which
		// the node retries, not of the process. What pebble opened
		// before it panicked may stay open.
		defer func() {
			if r := recover(); r != nil {
				m, err = nil, fmt.Errorf("opening the store panicked: %v", r)
			}
		}()
		return partition.Open(dir, partition.Options{CacheBytes: cfg.CacheBytes, Logger: log, Replica: cfg.ID, Log: entryData(logs)})
	}
	n.svc = &service{n: n}
	mux.Register(n.srv)
	partitionpb.RegisterPartitionServiceServer(n.srv, n.svc)
	partitionpb.RegisterGroupMembershipServer(n.srv, &membership{n: n})
	return n, nil
}

// PartitionService returns the service the node's port serves, for a
// front-end in the same process to call without gRPC in between
// (routing.Config.Local). A caller must not change a request while a call
// with it runs, nor after the call returned early on its context: the
// group's proposer may still be encoding it.
func (n *Node) PartitionService() partitionpb.PartitionServiceServer { return n.svc }

// ID returns the node's ID.
func (n *Node) ID() string { return n.cfg.ID }

// Addr returns the address peers and clients dial.
func (n *Node) Addr() string { return n.addr }

// Start serves gRPC and reopens every group found under DataDir, so that a
// restarted node rejoins its groups without waiting for placement. It
// returns once serving has begun; the node runs until Close.
func (n *Node) Start(ctx context.Context) error {
	n.openMu.Lock()
	defer n.openMu.Unlock()
	n.mu.Lock()
	if n.closed || n.started {
		n.mu.Unlock()
		return errors.New("node: Start after Start or Close")
	}
	n.started = true
	n.mu.Unlock()
	go n.superviseGroups()
	go n.watchReach()
	go func() {
		if err := n.srv.Serve(n.lis); err != nil {
			n.log.Error("gRPC server stopped", "err", err)
		}
	}()
	ids, err := n.groupsOnDisk()
	if err != nil {
		return err
	}
	for _, id := range ids {
		if err := ctx.Err(); err != nil {
			return err
		}
		// A group that fails to open is logged and recorded by
		// ensureGroup, and retried by the supervisor.
		_ = n.ensureGroup(id, nil)
	}
	n.log.Info("node serving", "addr", n.addr, "groups", len(ids))
	return nil
}

func (n *Node) groupsDir() string { return filepath.Join(n.cfg.DataDir, "groups") }

func (n *Node) groupDir(id uint64) string {
	return filepath.Join(n.groupsDir(), strconv.FormatUint(id, 10))
}

func (n *Node) groupsOnDisk() ([]uint64, error) {
	entries, err := os.ReadDir(n.groupsDir())
	if err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	var ids []uint64
	for _, e := range entries {
		if id, err := strconv.ParseUint(e.Name(), 10, 64); err == nil && e.IsDir() && id != MetaGroup {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// Close stops every group and the server. Groups are not handed over: to
// the other replicas this looks like a crash, followed by an election.
func (n *Node) Close() error { return n.shut(cleanShutdown) }

// shut is Close, or a crash for tests (export_test.go).
func (n *Node) shut(how shutdown) error {
	// The supervisor reopens groups under openMu: stop it first.
	n.mu.Lock()
	started := n.started
	select {
	case <-n.stopSupervisor:
	default:
		close(n.stopSupervisor)
	}
	n.mu.Unlock()
	if started {
		<-n.supervisorDone
	}
	n.openMu.Lock()
	defer n.openMu.Unlock()
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	groups := n.groups
	n.groups = map[uint64]*group{}
	n.mu.Unlock()

	var wg sync.WaitGroup
	errs := make([]error, 0, len(groups)+2)
	var errMu sync.Mutex
	for _, g := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := g.shut(how); err != nil {
				errMu.Lock()
				errs = append(errs, fmt.Errorf("group %d: %w", g.id, err))
				errMu.Unlock()
			}
		}()
	}
	wg.Wait()
	n.srv.Stop()
	if !started {
		n.lis.Close()
	}
	errs = append(errs, n.mux.Close())
	// Closing the file releases its flock.
	errs = append(errs, n.lock.Close())
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("node: close: %w", err)
	}
	return nil
}

// EnsureGroup opens group id, creating it if this node has no state for
// it. A new group is bootstrapped by replicas[0] with all replicas as
// voters; the other replicas start empty and wait for it. A replica that
// joined the running group (Peer.Joined) starts empty too and waits for
// the leader to add it. EnsureGroup on a
// group that is open does nothing; on a group that failed, it reopens it
// (raft then replays the log tail past the store's applied index).
func (n *Node) EnsureGroup(id uint64, replicas []Peer) error {
	if id == MetaGroup {
		return fmt.Errorf("%w: group %d is the meta group", ErrInvalid, id)
	}
	seen := map[string]bool{}
	for _, p := range replicas {
		if p.ID == "" || p.Addr == "" || seen[p.ID] {
			return fmt.Errorf("%w: replicas %v", ErrInvalid, replicas)
		}
		seen[p.ID] = true
	}
	n.openMu.Lock()
	defer n.openMu.Unlock()
	if n.isRetired(id) {
		return fmt.Errorf("%w: group %d", ErrRetired, id)
	}
	return n.ensureGroup(id, slices.Clone(replicas))
}

// ensureGroup opens group id unless it is open and well. A group that
// failed to open or stopped is tried again only once its backoff has
// passed (supervise.go); until then ensureGroup returns why it failed.
func (n *Node) ensureGroup(id uint64, replicas []Peer) error {
	n.mu.RLock()
	g, closed := n.groups[id], n.closed
	n.mu.RUnlock()
	if closed {
		return ErrClosed
	}
	if g != nil && g.failure() == nil {
		return nil
	}
	t, err := n.attempt(id, g, replicas)
	if err != nil {
		return err
	}
	if g != nil {
		n.log.Warn("reopening failed group", "group", id, "err", g.failure())
		if err := g.close(); err != nil {
			n.log.Warn("closing failed group", "group", id, "err", err)
		}
	}
	g, err = n.openGroup(id, n.groupDir(id), t.replicas)
	n.mu.Lock()
	defer n.mu.Unlock()
	if err != nil {
		delete(n.groups, id)
		n.openFailed(id, t, err)
		return err
	}
	n.groups[id] = g
	n.opened(id, t)
	return nil
}

// RemoveGroup stops group id on this node and deletes its data. It does not
// change the group's membership: that is for the leader (RemoveServer).
func (n *Node) RemoveGroup(id uint64) error {
	n.openMu.Lock()
	defer n.openMu.Unlock()
	n.mu.Lock()
	g := n.groups[id]
	delete(n.groups, id)
	delete(n.troubles, id)
	delete(n.retired, id)
	n.mu.Unlock()
	var err error
	if g != nil {
		err = g.close()
	}
	if rerr := os.RemoveAll(n.groupDir(id)); rerr != nil {
		err = errors.Join(err, rerr)
	}
	if err != nil {
		return fmt.Errorf("node: remove group %d: %w", id, err)
	}
	return nil
}

// RaftTransport returns a Raft transport for groupID on the node's port,
// for a raft the node does not run itself (the placement service's meta
// group). Raft closes it on shutdown.
func (n *Node) RaftTransport(groupID uint64) raft.Transport {
	return n.mux.Transport(groupID, raft.ServerAddress(n.addr))
}

func (n *Node) group(id uint64) (*group, error) {
	n.mu.RLock()
	defer n.mu.RUnlock()
	if n.closed {
		return nil, ErrClosed
	}
	g := n.groups[id]
	if g == nil {
		if t := n.troubles[id]; t != nil && t.err != nil {
			return nil, fmt.Errorf("%w: group %d could not be opened: %v", ErrGroupFailed, id, t.err)
		}
		return nil, fmt.Errorf("%w: %d", ErrGroupNotFound, id)
	}
	return g, nil
}

// Groups returns the ids of the groups open on the node.
func (n *Node) Groups() []uint64 {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return slices.Sorted(maps.Keys(n.groups))
}

// TransferLeadership hands the leadership of a group this node leads to
// another voter: to, or one raft picks when to.ID is empty. It returns once
// the transfer is done or has failed.
func (n *Node) TransferLeadership(groupID uint64, to Peer) error {
	g, err := n.group(groupID)
	if err != nil {
		return err
	}
	var f raft.Future
	if to.ID == "" {
		f = g.raft.LeadershipTransfer()
	} else {
		f = g.raft.LeadershipTransferToServer(raft.ServerID(to.ID), raft.ServerAddress(to.Addr))
	}
	if err := f.Error(); err != nil {
		return fmt.Errorf("node: group %d: leadership transfer: %w", groupID, g.leaderError(err))
	}
	return nil
}

// GroupStatus describes a group as one replica sees it.
type GroupStatus struct {
	ID     uint64
	State  raft.RaftState
	Leader Peer // empty when unknown
	// Serving is true on the leader once it has applied the entries of
	// earlier terms and answers PartitionService requests.
	Serving bool
	// Term is the replica's current Raft term.
	Term uint64
	// AppliedIndex is the state machine's; LastIndex is the Raft log's.
	AppliedIndex uint64
	LastIndex    uint64
	// SnapshotIndex is the last index of the newest Raft snapshot.
	SnapshotIndex uint64
	// Entries and Requests count the Raft entries this replica proposed as
	// leader and the client requests they carried (group commit packs many
	// requests into one entry).
	Entries  uint64
	Requests uint64
	// Err is set once the group stopped after a storage failure.
	Err error
	// CommitIndex is the last index the replica knows committed.
	CommitIndex uint64
	// Voter: the replica's own latest configuration holds it as a voter
	// (a replica removed without hearing of it still does; a new learner
	// does not).
	Voter bool
	// LeaderlessSince is, on a replica that knows no leader, since when:
	// its last contact with a leader (Raft's LastContact: an
	// AppendEntries, a snapshot, a vote granted, or its own step down),
	// or when the group was opened here if later. Zero while it leads or
	// knows its leader.
	LeaderlessSince time.Time
	// Followers is the leader's view of its followers (voters and
	// learners), in configuration order; empty on a follower.
	Followers []FollowerProgress
}

// FollowerProgress is what a leader knows of one follower's log: its last
// index as of its latest answer to an AppendEntries (Known false until it
// answered one since this node's transport started), and how far that is
// behind the leader's commit index.
type FollowerProgress struct {
	ID      string
	Known   bool
	LastLog uint64
	// Lag is the leader's commit index minus LastLog, 0 when the follower
	// holds all of it (a follower holds entries before they commit).
	Lag uint64
}

// Group returns the status of group id.
func (n *Node) Group(id uint64) (GroupStatus, error) {
	g, err := n.group(id)
	if err != nil {
		return GroupStatus{}, err
	}
	addr, lid := g.raft.LeaderWithID()
	stats := g.raft.Stats()
	snap, _ := strconv.ParseUint(stats["last_snapshot_index"], 10, 64)
	commit, _ := strconv.ParseUint(stats["commit_index"], 10, 64)
	state := g.raft.State()
	var followers []FollowerProgress
	if state == raft.Leader {
		followers = g.followers(commit)
	}
	var leaderless time.Time
	if state != raft.Leader && lid == "" {
		leaderless = g.raft.LastContact()
		if g.opened.After(leaderless) {
			leaderless = g.opened
		}
	}
	return GroupStatus{
		CommitIndex:     commit,
		Followers:       followers,
		SnapshotIndex:   snap,
		ID:              id,
		State:           state,
		Leader:          Peer{ID: string(lid), Addr: string(addr)},
		LeaderlessSince: leaderless,
		Voter:           g.isVoter(),
		Serving:         state == raft.Leader && g.leadership() != nil,
		Term:            g.raft.CurrentTerm(),
		AppliedIndex:    g.machine.AppliedIndex(),
		LastIndex:       g.raft.LastIndex(),
		Entries:         g.entries.Load(),
		Requests:        g.requests.Load(),
		Err:             g.failure(),
	}, nil
}

// entryData reads the data of Raft entries from logs for the state
// machine, which keeps message bodies there until a snapshot
// (partition/logbodies.go). Raft truncates the log only after a snapshot,
// which moves the bodies out first.
func entryData(logs raft.LogStore) func(index uint64) ([]byte, error) {
	return func(index uint64) ([]byte, error) {
		var l raft.Log
		if err := logs.GetLog(index, &l); err != nil {
			return nil, err
		}
		return l.Data, nil
	}
}
