package placement

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"
	"google.golang.org/grpc"

	"github.com/quorumbus/quorumbus/placement/catalog"
	"github.com/quorumbus/quorumbus/placement/internal/logbridge"
	"github.com/quorumbus/quorumbus/placement/membership"
	"github.com/quorumbus/quorumbus/proto/groupcall"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
	pb "github.com/quorumbus/quorumbus/proto/placementpb"
)

// Service is one member of the meta group: it keeps a replica of the
// catalog, serves PlacementService, and runs the control loop while it
// leads the group.
type Service struct {
	pb.UnimplementedPlacementServiceServer

	cfg  Config
	log  *slog.Logger
	fsm  *catalog.FSM
	dial *dialer

	raft  atomic.Pointer[raft.Raft] // set by Start
	store *raftboltdb.BoltStore
	logs  raft.LogStore // the meta log, for catch-up (catchup.go)

	// caughtUp is closed once this member's catalog holds what was
	// committed when it started; leaderTerm is the term in which it, as
	// leader, applied every earlier entry (catchup.go).
	caughtUp   chan struct{}
	caughtOnce sync.Once
	leaderTerm atomic.Uint64
	readyTerm  broadcast // notified when leaderTerm changes

	// createMu makes entity creation one at a time on the leader, so each
	// plan sees the partitions of the creations before it.
	createMu sync.Mutex
	// groupsMu makes group creation one at a time on the leader: the
	// control loop and entity creation both grow the groups (groups.go).
	groupsMu sync.Mutex

	// leaders records the node that last answered as each partition
	// group's leader; partitionCalls and membershipCalls follow the
	// groups' leaders through it (control.go).
	leaders         *groupcall.Leaders
	partitionCalls  *groupcall.Caller[partitionpb.PartitionServiceClient]
	membershipCalls *groupcall.Caller[partitionpb.GroupMembershipClient]

	health *groupHealth // when each group last reported itself serving (health.go)

	routes tableEncoder // the routing table encoded once for every WatchRoutes stream (routes.go)

	startedAt time.Time // when Raft started on this member (orphan.go)

	ctx       context.Context // ends with Close
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	startOnce sync.Once
	closeOnce sync.Once
	closeErr  error
}

var (
	_ pb.PlacementServiceServer = (*Service)(nil)
	_ Members                   = (*membership.Memberlist)(nil)
	_ changeNotifier            = (*membership.Memberlist)(nil)
)

// New checks the config and prepares a member; Start runs it.
func New(cfg Config) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	s := &Service{
		cfg:      cfg,
		log:      cfg.Logger.With("component", "placement"),
		fsm:      catalog.NewFSM(),
		leaders:  &groupcall.Leaders{},
		health:   newGroupHealth(),
		caughtUp: make(chan struct{}),
		ctx:      ctx,
		cancel:   cancel,
	}
	s.dial = newDialer(cfg.Creds, cfg.DialPartition, cfg.DialPlacement)
	s.partitionCalls = groupcall.New(groupCallConfig(s, s.dial.partition))
	s.membershipCalls = groupcall.New(groupCallConfig(s, s.dial.membership))
	return s, nil
}

// Register adds the PlacementService to a gRPC server. It may be called
// before Start; until then every call answers UNAVAILABLE.
func (s *Service) Register(g *grpc.Server) { pb.RegisterPlacementServiceServer(g, s) }

// Start opens the Raft stores in DataDir, bootstraps the meta group if this
// is a first start with Bootstrap set, and joins the group. It returns once
// Raft runs; the service runs until Close, whatever becomes of ctx.
func (s *Service) Start(ctx context.Context) error {
	err := ErrNotRunning
	s.startOnce.Do(func() { err = s.start() })
	return err
}

func (s *Service) start() error {
	if s.ctx.Err() != nil {
		return ErrNotRunning
	}
	dir := s.cfg.DataDir
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("placement: %w", err)
	}
	// NoSync stays false: a vote or a log entry is on disk before Raft
	// acts on it. A second process on the same DataDir fails to get the
	// file lock within the timeout instead of waiting forever.
	store, err := raftboltdb.New(raftboltdb.Options{
		Path:        filepath.Join(dir, "raft.db"),
		BoltOptions: &bbolt.Options{Timeout: 5 * time.Second},
	})
	if err != nil {
		return fmt.Errorf("placement: opening the raft store: %w", err)
	}
	hl := logbridge.HCLog(s.log, "raft")
	snaps, err := raft.NewFileSnapshotStoreWithLogger(dir, 2, hl)
	if err != nil {
		store.Close()
		return fmt.Errorf("placement: opening the snapshot store: %w", err)
	}
	logs, err := raft.NewLogCache(512, store)
	if err != nil {
		store.Close()
		return fmt.Errorf("placement: %w", err)
	}

	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(s.cfg.NodeID)
	rc.HeartbeatTimeout = s.cfg.ElectionTimeout
	rc.ElectionTimeout = s.cfg.ElectionTimeout
	rc.LeaderLeaseTimeout = s.cfg.ElectionTimeout // as the groups' (node/group.go)
	rc.BatchApplyCh = true
	rc.CommitTimeout = idleCommitTimeout
	rc.Logger = hl

	hasState, err := raft.HasExistingState(logs, store, snaps)
	if err != nil {
		store.Close()
		return fmt.Errorf("placement: %w", err)
	}
	if g := s.cfg.Guard; g != nil {
		if err := g.Open(hasState, store, logs); err != nil {
			store.Close()
			return fmt.Errorf("placement: %w", err)
		}
	} else if len(s.cfg.Bootstrap) > 0 && !hasState {
		conf := raft.Configuration{Servers: s.cfg.Bootstrap}
		if err := raft.BootstrapCluster(rc, logs, store, snaps, s.cfg.Transport, conf); err != nil {
			store.Close()
			return fmt.Errorf("placement: bootstrapping the meta group: %w", err)
		}
		s.log.Info("bootstrapped the meta group", "voters", len(conf.Servers))
	}
	r, err := raft.NewRaft(rc, raftFSM{s.fsm}, logs, store, snaps, s.cfg.Transport)
	if err != nil {
		store.Close()
		return fmt.Errorf("placement: starting raft: %w", err)
	}
	s.store, s.logs = store, logs
	s.startedAt = time.Now()
	s.raft.Store(r)
	if s.cfg.Guard != nil && len(s.cfg.Bootstrap) > 0 && !hasState {
		s.wg.Add(1)
		go s.bootstrapWhenNew(r)
	}
	s.wg.Add(3)
	go s.supervise(r)
	go s.failStop(r)
	go s.catchUp(r)
	return nil
}

// Close stops the control loop and the meta group's Raft on this member.
// The other members carry on.
func (s *Service) Close() error {
	s.closeOnce.Do(func() {
		s.startOnce.Do(func() {}) // waits for a Start in progress; a later Start fails
		s.cancel()
		s.wg.Wait()
		var errs []error
		if r := s.raft.Load(); r != nil {
			errs = append(errs, r.Shutdown().Error())
		}
		if s.store != nil {
			errs = append(errs, s.store.Close())
		}
		errs = append(errs, s.dial.close())
		s.closeErr = errors.Join(errs...)
	})
	return s.closeErr
}

// supervise runs the control loop while this member leads.
func (s *Service) supervise(r *raft.Raft) {
	defer s.wg.Done()
	var stop func()
	defer func() {
		if stop != nil {
			stop()
		}
	}()
	for {
		select {
		case <-s.ctx.Done():
			return
		case leader := <-r.LeaderCh():
			if stop != nil { // a repeated true means leadership was lost and won again
				stop()
				stop = nil
			}
			if leader {
				ctx, cancel := context.WithCancel(s.ctx)
				done := make(chan struct{})
				go func() {
					defer close(done)
					if s.leaderBarrier(ctx, r) {
						s.lead(ctx)
					}
				}()
				stop = func() { cancel(); <-done }
			}
		}
	}
}

// failStop shuts the meta group down on this member when its state machine
// met an entry it cannot apply, rather than serve a catalog that diverges.
func (s *Service) failStop(r *raft.Raft) {
	defer s.wg.Done()
	select {
	case <-s.ctx.Done():
	case <-s.fsm.Stopped():
		s.log.Error("the catalog state machine stopped; leaving the meta group on this member", "err", s.fsm.Err())
		if err := r.Shutdown().Error(); err != nil {
			s.log.Error("raft shutdown", "err", err)
		}
	}
}

// propose appends a command to the meta log and waits until this member
// applied it. The result's Err is a rejection by the catalog.
func (s *Service) propose(ctx context.Context, cmd *pb.CatalogCommand) (catalog.Result, error) {
	r := s.raft.Load()
	if r == nil {
		return catalog.Result{}, ErrNotRunning
	}
	cmd.NowMs = time.Now().UnixMilli() // the leader's clock; replicas never read theirs
	data, err := catalog.Encode(cmd)
	if err != nil {
		return catalog.Result{}, fmt.Errorf("placement: encoding a command: %w", err)
	}
	timeout := 10 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		timeout = max(time.Until(dl), time.Millisecond)
	}
	f := r.Apply(data, timeout)
	if err := s.await(ctx, f); err != nil {
		return catalog.Result{}, err
	}
	res, ok := f.Response().(catalog.Result)
	if !ok {
		return catalog.Result{}, fmt.Errorf("placement: unexpected apply response %T", f.Response())
	}
	return res, res.Err
}

// await waits for a Raft future, or for ctx or the service to end. Errors
// other than "not the leader" leave the outcome unknown.
func (s *Service) await(ctx context.Context, f raft.Future) error {
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", ErrOutcomeUnknown, ctx.Err())
	case <-s.ctx.Done():
		return fmt.Errorf("%w: %w", ErrOutcomeUnknown, ErrNotRunning)
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipTransferInProgress):
		return fmt.Errorf("%w: %w", ErrNotLeader, err)
	default:
		return fmt.Errorf("%w: %w", ErrOutcomeUnknown, err)
	}
}

// IsLeader reports whether this member leads the meta group now.
func (s *Service) IsLeader() bool {
	r := s.raft.Load()
	return r != nil && r.State() == raft.Leader
}

// Table returns this member's current routing table; it is shared and
// must not be changed. It is the whole namespace, built when the table
// changed since the last call.
func (s *Service) Table() *pb.RoutingTable { return s.fsm.Table() }

// RoutesVersion is the version of this member's routing table, read under
// the catalog's lock: what a liveness probe of that lock needs, without
// building the table.
func (s *Service) RoutesVersion() uint64 { return s.fsm.RoutesVersion() }

// AddVoter adds a member to the meta group (one started with an empty
// Bootstrap). Only the leader can; elsewhere it fails with ErrNotLeader.
func (s *Service) AddVoter(ctx context.Context, id string, addr raft.ServerAddress) error {
	r := s.raft.Load()
	if r == nil {
		return ErrNotRunning
	}
	return s.await(ctx, r.AddVoter(raft.ServerID(id), addr, 0, 0))
}
