package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/quorumbus/quorumbus/node/raftmux"
	"github.com/quorumbus/quorumbus/partition"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// StateMachine is what a group needs of its replicated state; a
// *partition.Machine is one. Each part is used in one place: Raft drives
// the replicated part (fsm, below), the leader's clock proposes the
// timers (runClock), its proposer plans the sends to topics (propose.go),
// and the service reads the rest (service.go, sessions.go).
type StateMachine interface {
	replicated
	Timers() []partition.Timer
	planner
	reader
	sessionReader
}

// planner evaluates the rules of a batch's sends to topics once, on the
// leader, so that replicas need not (partition/plan.go).
type planner interface {
	PlanTopicSends(b *partitionpb.Batch)
}

// replicated is what Raft needs of a group's state: apply committed
// entries, say how far it applied, snapshot and restore, close.
type replicated interface {
	Apply(entries []partition.Entry) ([][]*partitionpb.Result, error)
	AppliedIndex() uint64
	Snapshot() (*partition.Snapshot, error)
	Restore(r io.Reader) error
	Close() error
}

var _ StateMachine = (*partition.Machine)(nil)

// Raft settings that are not in Config.
const (
	// maxAppendEntries bounds the entries of one AppendEntries request;
	// entries are at most maxEntryBytes (propose.go), so one request
	// stays below raftmux.MaxMessageBytes.
	maxAppendEntries = 32
	// logCacheEntries bounds the entries the log cache keeps beside its
	// bytes (Config.LogCacheBytes): tiny entries of settles need no more.
	logCacheEntries = 1024
	retainSnapshots = 2
	// maxExpiryPoll bounds how long the leader's clock loop sleeps without
	// looking at the machine's next due times again.
	maxExpiryPoll = time.Second
)

// group is one Raft group hosted by the node: its raft instance, stores,
// state machine and group-commit proposer.
type group struct {
	id   uint64
	node *Node
	dir  string
	log  *slog.Logger

	machine StateMachine
	raft    *raft.Raft
	trans   *raftmux.Transport // the group's raft transport: followers' progress
	logs    io.Closer
	cache   *logCache                 // the log, through its cache
	rejoin  *rejoin                   // nil unless the replica rejoins (rejoin.go)
	ahead   *aheadLog                 // the raft-wal log; nil with raft-boltdb
	raftRef atomic.Pointer[raft.Raft] // raft for the log's goroutines, which start before it
	stable  *raftboltdb.BoltStore
	prop    *proposer
	snaps   *sizedSnapshots // its newest snapshot's size, for the metrics

	opened time.Time // when the group was opened on this node

	notifyCh chan bool     // raft.Config.NotifyCh
	locksCh  chan struct{} // a batch was applied: look at the next due times again

	ctx    context.Context // cancelled when the group closes
	cancel context.CancelFunc
	wg     sync.WaitGroup

	failOnce sync.Once
	failed   chan struct{} // closed on fail-stop
	failErr  atomic.Pointer[error]

	// leading is the context of the current leadership term once this
	// replica is leader and has applied every entry of earlier terms; nil
	// otherwise.
	leadMu  sync.Mutex
	leading context.Context

	// Proposals made while leader: raft entries and the client requests
	// they carried.
	entries  atomic.Uint64
	requests atomic.Uint64

	closeOnce sync.Once
	closeErr  error
}

// groupDirs are the paths inside a group's directory.
func raftDir(dir string) string  { return filepath.Join(dir, "raft") }
func stateDir(dir string) string { return filepath.Join(dir, "state") }

// restoreIfBehind restores the machine from the latest snapshot when its
// store has applied less than the snapshot holds. Raft resumes applying
// after the latest snapshot's index whether or not it restores it
// (NoSnapshotRestoreOnStart skips only the restore), so a store left behind
// would never see the entries in between, and the log may no longer hold
// them. A store falls behind when the node dies while it installs a
// snapshot from the leader: Raft keeps the snapshot before the machine has
// restored it. Snapshots taken locally are never ahead of the store, which
// flushes before it captures one.
func restoreIfBehind(m replicated, snaps raft.SnapshotStore, log *slog.Logger) error {
	list, err := snaps.List()
	if err != nil {
		return fmt.Errorf("list snapshots: %w", err)
	}
	if len(list) == 0 || m.AppliedIndex() >= list[0].Index {
		return nil
	}
	meta, rc, err := snaps.Open(list[0].ID)
	if err != nil {
		return fmt.Errorf("open snapshot %s: %w", list[0].ID, err)
	}
	defer rc.Close()
	log.Warn("the store is behind the latest snapshot; restoring the snapshot",
		"applied", m.AppliedIndex(), "snapshot", meta.ID, "snapshot_index", meta.Index)
	if err := m.Restore(rc); err != nil {
		return fmt.Errorf("restore snapshot %s: %w", meta.ID, err)
	}
	if m.AppliedIndex() != meta.Index {
		return fmt.Errorf("restore snapshot %s: the store holds index %d, the snapshot %d", meta.ID, m.AppliedIndex(), meta.Index)
	}
	return nil
}

// openGroup opens (or creates) group id in dir and starts its raft. If the
// group has no Raft state yet and this node is replicas[0], it bootstraps
// the group with all replicas as voters once its peers show the group is
// new (rejoin.go); any other replica opened without Raft state rejoins.
func (n *Node) openGroup(id uint64, dir string, replicas []Peer) (_ *group, err error) {
	g := &group{
		id:       id,
		node:     n,
		dir:      dir,
		log:      n.log.With("group", id),
		opened:   time.Now(),
		notifyCh: make(chan bool, 1),
		locksCh:  make(chan struct{}, 1),
		failed:   make(chan struct{}),
	}
	g.ctx, g.cancel = context.WithCancel(context.Background())
	var closers []io.Closer
	defer func() {
		if err != nil {
			g.cancel()
			for i := len(closers) - 1; i >= 0; i-- {
				closers[i].Close()
			}
		}
	}()
	if err := n.checkOpenSpace(); err != nil {
		return nil, fmt.Errorf("node: group %d: %w", id, err)
	}
	if err := os.MkdirAll(raftDir(dir), 0o750); err != nil {
		return nil, fmt.Errorf("node: group %d: %w", id, err)
	}
	hlog := newHCLogger(g.log, "raft")

	g.stable, err = raftboltdb.New(raftboltdb.Options{Path: filepath.Join(raftDir(dir), "stable.db"), BoltOptions: boltOptions()})
	if err != nil {
		return nil, fmt.Errorf("node: group %d: stable store: %w", id, err)
	}
	closers = append(closers, g.stable)

	var logs raft.LogStore
	switch n.cfg.LogStore {
	case LogStoreBoltDB:
		s, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(raftDir(dir), "log.db"), BoltOptions: boltOptions()})
		if err != nil {
			return nil, fmt.Errorf("node: group %d: log store: %w", id, err)
		}
		logs, g.logs = s, s
	default:
		walDir := filepath.Join(raftDir(dir), "wal")
		if err := os.MkdirAll(walDir, 0o750); err != nil {
			return nil, fmt.Errorf("node: group %d: %w", id, err)
		}
		l, err := g.openAheadLog(walDir, hlog)
		if err != nil {
			return nil, fmt.Errorf("node: group %d: log store: %w", id, err)
		}
		logs, g.logs, g.ahead = l, l, l
	}
	closers = append(closers, g.logs)
	cached := newLogCache(logs, int(n.cfg.LogCacheBytes), logCacheEntries)
	g.cache = cached

	files, err := raft.NewFileSnapshotStoreWithLogger(raftDir(dir), retainSnapshots, hlog.Named("snapshots"))
	if err != nil {
		return nil, fmt.Errorf("node: group %d: snapshot store: %w", id, err)
	}
	snaps := newSizedSnapshots(files)
	g.snaps = snaps

	g.machine, err = n.openMachine(stateDir(dir), cached)
	if err != nil {
		return nil, fmt.Errorf("node: group %d: state machine: %w", id, err)
	}
	closers = append(closers, g.machine)
	if err := restoreIfBehind(g.machine, snaps, g.log); err != nil {
		return nil, fmt.Errorf("node: group %d: %w", id, err)
	}

	hasState, err := raft.HasExistingState(cached, g.stable, snaps)
	if err != nil {
		return nil, fmt.Errorf("node: group %d: %w", id, err)
	}

	// A replica that opens without Raft state rejoins (rejoin.go). A
	// group's only replica has nobody to catch up from: it bootstraps at
	// once, as before, and votes.
	single := len(replicas) == 1 && replicas[0].ID == n.cfg.ID
	bootstrap := !hasState && len(replicas) > 0 && replicas[0].ID == n.cfg.ID && !replicas[0].Joined
	g.rejoin, err = openRejoin(g.stable, hasState, replicas, g.log)
	if err != nil {
		return nil, fmt.Errorf("node: group %d: %w", id, err)
	}

	trans := n.mux.Transport(id, raft.ServerAddress(n.Addr()))
	g.trans = trans
	if g.ahead != nil {
		if err := g.withholdIfLost(cached, snaps); err != nil {
			trans.Close()
			return nil, fmt.Errorf("node: group %d: %w", id, err)
		}
	}
	trans.WithholdVotes(g.votes)
	if g.rejoin != nil {
		trans.ObserveAppends(g.rejoin.appended)
	}
	g.raft, err = raft.NewRaft(n.raftConfig(g, hlog), &fsm{g: g}, cached, g.stable, snaps, trans)
	if err != nil {
		trans.Close()
		return nil, fmt.Errorf("node: group %d: raft: %w", id, err)
	}
	if g.ahead != nil {
		g.raftRef.Store(g.raft)
		g.countVoters()
	}
	if bootstrap && single {
		servers := []raft.Server{{Suffrage: raft.Voter, ID: raft.ServerID(n.cfg.ID), Address: raft.ServerAddress(replicas[0].Addr)}}
		if err := g.raft.BootstrapCluster(raft.Configuration{Servers: servers}).Error(); err != nil {
			g.raft.Shutdown().Error()
			return nil, fmt.Errorf("node: group %d: bootstrap: %w", id, err)
		}
		g.log.Info("bootstrapped group", "replicas", len(replicas))
	}
	if single && g.rejoin != nil {
		g.rejoin.finish("the group's only replica")
	}

	g.prop = newProposer(g)
	if bootstrap && !single {
		g.wg.Add(1)
		go func() { defer g.wg.Done(); g.bootstrapWhenNew(replicas) }()
	}
	g.wg.Add(4)
	go func() { defer g.wg.Done(); g.prop.run() }()
	go func() { defer g.wg.Done(); g.watchLogBytes(snaps) }()
	go func() { defer g.wg.Done(); g.watchLeadership() }()
	go func() { defer g.wg.Done(); g.superviseFailure() }()
	return g, nil
}

func (n *Node) raftConfig(g *group, hlog *hclogger) *raft.Config {
	c := raft.DefaultConfig()
	c.LocalID = raft.ServerID(n.cfg.ID)
	c.Logger = hlog
	c.HeartbeatTimeout = n.cfg.ElectionTimeout
	c.ElectionTimeout = n.cfg.ElectionTimeout
	// The lease is the whole election timeout, not raft's half: a leader
	// pushing entries of tens of MB through a loaded machine can go more
	// than half an election timeout without its followers' answers, and
	// with raft's half it stepped down under large sends on the dev
	// cluster (the commit that set it has the runs). The lease only
	// decides when a leader that hears no quorum gives up: reads confirm
	// leadership first (VerifyLeader), writes need a quorum anyway, and
	// the followers elect another no sooner than an election timeout
	// either.
	c.LeaderLeaseTimeout = n.cfg.ElectionTimeout
	c.MaxAppendEntries = maxAppendEntries
	// Let raft's leader loop take several of our in-flight proposals in
	// one pass (one log write, one AppendEntries).
	c.BatchApplyCh = true
	c.CommitTimeout = idleCommitTimeout
	c.SnapshotThreshold = n.cfg.SnapshotThreshold
	c.SnapshotInterval = n.cfg.SnapshotInterval
	c.TrailingLogs = n.cfg.TrailingLogs
	// The store already holds the applied state with its applied index: a
	// restart replays only the log tail, and the machine skips entries it
	// has.
	c.NoSnapshotRestoreOnStart = true
	c.NotifyCh = g.notifyCh
	return c
}

// fail stops the group after a storage failure in its state machine or
// in the fsync of its log (fail-stop, STYLE 4): the group's raft shuts
// down and every request is refused with ErrGroupFailed. The process and
// the other groups go on.
func (g *group) fail(err error) {
	g.failOnce.Do(func() {
		g.failErr.Store(&err)
		g.log.Error("GROUP STOPPED: its storage failed; this replica no longer serves the group until it is reopened",
			"err", err)
		close(g.failed)
	})
}

// failure returns why the group stopped, or nil.
func (g *group) failure() error {
	if p := g.failErr.Load(); p != nil {
		return fmt.Errorf("%w: group %d: %v", ErrGroupFailed, g.id, *p)
	}
	return nil
}

// superviseFailure shuts raft down after a fail-stop. Raft cannot be shut
// down from inside the FSM, which fail is called from.
func (g *group) superviseFailure() {
	select {
	case <-g.failed:
		g.clearLeading()
		if err := g.raft.Shutdown().Error(); err != nil {
			g.log.Error("shutting down raft after a failure", "err", err)
		}
		g.prop.stop(g.refusal())
	case <-g.ctx.Done():
	}
}

// close stops the group and closes its stores. Closing twice is harmless.
func (g *group) close() error { return g.shut(cleanShutdown) }

// shutdown is how a group stops: cleanly, or (tests, export_test.go) as a
// crash of its process or machine would leave its log.
type shutdown int

const (
	cleanShutdown shutdown = iota
	crashProcess
	crashMachine
)

// shut stops the group and closes its stores.
func (g *group) shut(how shutdown) error {
	g.closeOnce.Do(func() {
		crash := how != cleanShutdown && g.ahead != nil
		if crash {
			g.ahead.stopSyncer()
		}
		g.cancel()
		g.prop.stop(ErrGroupClosed)
		errs := []error{g.raft.Shutdown().Error()}
		g.wg.Wait()
		errs = append(errs, g.machine.Close())
		if crash {
			errs = append(errs, g.ahead.crash(how == crashMachine))
		} else {
			err := g.logs.Close()
			if err == nil && g.ahead != nil {
				// Everything written is durable: a restart has
				// nothing to withhold its vote for.
				err = g.ahead.clearMark()
			}
			errs = append(errs, err)
		}
		errs = append(errs, g.stable.Close())
		g.closeErr = errors.Join(errs...)
	})
	return g.closeErr
}

// watchLeadership follows raft's leadership notifications. On becoming
// leader it waits until every entry of earlier terms is applied (a Barrier)
// before it serves reads and runs the lock-expiry loop.
func (g *group) watchLeadership() {
	var cancel context.CancelFunc
	stop := func() {
		if cancel != nil {
			cancel()
			cancel = nil
		}
		g.clearLeading()
	}
	newTerm := func() context.Context {
		ctx, c := context.WithCancel(g.ctx)
		cancel = c
		return ctx
	}
	defer stop()
	for {
		select {
		case leader := <-g.notifyCh:
			stop()
			if !leader {
				continue
			}
			ctx := newTerm()
			g.wg.Add(1)
			go func() {
				defer g.wg.Done()
				g.lead(ctx)
			}()
		case <-g.ctx.Done():
			return
		}
	}
}

// setLeading records that this replica serves as leader for the term of
// ctx, unless that term has already ended.
func (g *group) setLeading(ctx context.Context) {
	g.leadMu.Lock()
	if ctx.Err() == nil {
		g.leading = ctx
	}
	g.leadMu.Unlock()
}

func (g *group) clearLeading() {
	g.leadMu.Lock()
	g.leading = nil
	g.leadMu.Unlock()
}

// leadership returns the context of the current leadership term, or nil if
// this replica is not a ready leader.
func (g *group) leadership() context.Context {
	g.leadMu.Lock()
	defer g.leadMu.Unlock()
	if g.leading != nil && g.leading.Err() != nil {
		g.leading = nil
	}
	return g.leading
}

func (g *group) lead(ctx context.Context) {
	g.countVoters()
	if err := g.raft.Barrier(0).Error(); err != nil {
		if ctx.Err() == nil {
			g.log.Warn("barrier after winning the election failed", "err", err)
		}
		return
	}
	g.setLeading(ctx)
	g.log.Debug("leading", "applied", g.machine.AppliedIndex())
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		g.runForwarder(ctx) // forward.go
	}()
	g.runClock(ctx)
}

// timedCommand is one of the machine's leader-clock commands
// (partition.Timer), with what the leader remembers of its proposals.
type timedCommand struct {
	partition.Timer

	lastDue int64 // the due time the last proposal was for
	stuck   int   // proposals in a row that left the due time where it was
}

// runClock proposes the machine's timed commands (partition.Machine.Timers:
// lock expiry, scheduled activation, message expiry, session lock expiry)
// whenever the leader's clock passes one's due time. The due ones go out
// together in one request.
func (g *group) runClock(ctx context.Context) {
	var cmds []*timedCommand
	for _, t := range g.machine.Timers() {
		cmds = append(cmds, &timedCommand{Timer: t})
	}
	timer := time.NewTimer(maxExpiryPoll)
	defer timer.Stop()
	for {
		wait, due := g.dueCommands(cmds, g.node.wallMs())
		if len(due) > 0 {
			_, err := g.propose(ctx, due...)
			if err == nil {
				continue
			}
			if ctx.Err() != nil {
				return
			}
			g.log.Warn("proposing leader-clock commands", "err", err)
			wait = 100 * time.Millisecond
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
			for _, c := range cmds {
				c.lastDue, c.stuck = 0, 0
			}
		case <-g.locksCh:
			// Since Go 1.23 Reset needs no draining of the channel.
		}
	}
}

// dueCommands returns the commands due at now and how long to sleep
// otherwise. Each command does a bounded amount of work, so a command is
// proposed again while its due time stays due; if that time stays the same
// over several proposals nothing moves it, and the command waits for the
// next poll instead of spinning.
func (g *group) dueCommands(cmds []*timedCommand, now int64) (time.Duration, []*partitionpb.Command) {
	wait := maxExpiryPoll
	var due []*partitionpb.Command
	for _, c := range cmds {
		at, ok := c.Next()
		if !ok {
			continue
		}
		if at > now {
			wait = min(wait, time.Duration(at-now)*time.Millisecond)
			continue
		}
		if at == c.lastDue {
			c.stuck++
		} else {
			c.stuck = 0
		}
		if c.stuck >= 3 {
			if c.stuck == 3 {
				g.log.Warn("due time does not move after proposals", "command", c.Name, "due_ms", at)
			}
			continue
		}
		c.lastDue = at
		due = append(due, c.Command)
	}
	return wait, due
}

// hint returns the group's leader as this replica knows it.
func (g *group) hint() *partitionpb.LeaderHint {
	addr, id := g.raft.LeaderWithID()
	return &partitionpb.LeaderHint{GroupId: g.id, LeaderId: string(id), LeaderAddr: string(addr)}
}

// checkLeader returns nil if this replica may serve the group's requests:
// it is the leader and has applied its predecessors' entries.
func (g *group) checkLeader() error {
	if err := g.failure(); err != nil {
		return err
	}
	if g.ctx.Err() != nil {
		return ErrGroupClosed
	}
	if g.raft.State() != raft.Leader {
		return &notLeaderError{hint: g.hint()}
	}
	if g.leadership() == nil {
		return fmt.Errorf("%w: group %d", ErrLeaderNotReady, g.id)
	}
	return nil
}

// fsm adapts the group's state machine to raft.BatchingFSM.
type fsm struct {
	g *group
}

var _ raft.BatchingFSM = (*fsm)(nil)

func (f *fsm) Apply(l *raft.Log) any {
	return f.ApplyBatch([]*raft.Log{l})[0]
}

// ApplyBatch applies the command entries of logs in one machine.Apply (one
// store batch). The response of an entry is its []*partitionpb.Result, or
// an error once the group has failed.
func (f *fsm) ApplyBatch(logs []*raft.Log) []any {
	out := make([]any, len(logs))
	fail := func(err error) []any {
		for i := range out {
			out[i] = err
		}
		return out
	}
	if err := f.g.failure(); err != nil {
		return fail(err)
	}
	entries := make([]partition.Entry, 0, len(logs))
	at := make([]int, 0, len(logs))
	for i, l := range logs {
		if l.Type != raft.LogCommand {
			continue // membership changes are raft's own business
		}
		entries = append(entries, partition.Entry{Index: l.Index, Data: l.Data})
		at = append(at, i)
	}
	if len(entries) == 0 {
		return out
	}
	start := time.Now()
	results, err := f.g.machine.Apply(entries)
	f.g.observe(latencyApply, start)
	if err != nil {
		f.g.fail(err)
		return fail(f.g.failure())
	}
	for k, i := range at {
		out[i] = results[k]
	}
	return out
}

func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	if err := f.g.failure(); err != nil {
		return nil, err
	}
	s, err := f.g.machine.Snapshot()
	if err != nil {
		return nil, fmt.Errorf("node: group %d: snapshot: %w", f.g.id, err)
	}
	return fsmSnapshot{s}, nil
}

// Restore replaces the machine's state with a snapshot from the leader. A
// machine that fails to restore cannot be trusted: the group stops.
func (f *fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	if err := f.g.failure(); err != nil {
		return err
	}
	if err := f.g.machine.Restore(rc); err != nil {
		f.g.fail(fmt.Errorf("restore: %w", err))
		return f.g.failure()
	}
	return nil
}

type fsmSnapshot struct {
	s *partition.Snapshot
}

func (s fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := s.s.WriteTo(sink); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

func (s fsmSnapshot) Release() { s.s.Release() }

// leaderError adds the leader hint to raft's "not the leader". When the
// group has stopped, raft's error is the log's own ("segment is sealed"):
// the caller learns that the group stopped instead, and that the disk is
// full if it is, as the reserve would have told it.
func (g *group) leaderError(err error) error {
	if errors.Is(err, raft.ErrNotLeader) {
		return &notLeaderError{hint: g.hint()}
	}
	if ferr := g.refusal(); ferr != nil {
		return ferr
	}
	return err
}

// refusal is what the requests in flight when the group stopped are told,
// nil if it has not: that the disk is full when a write found it so (or
// it is too full to reopen the group), else that the group stopped.
// Requests that arrive later are told only that it stopped
// (Unavailable), so that a client tries the other replicas, which may
// have disk to spare and elect a leader.
func (g *group) refusal() error {
	ferr := g.failure()
	if ferr == nil {
		return nil
	}
	if g.failedForSpace() {
		return fmt.Errorf("%w (%v)", ErrNoSpace, ferr)
	}
	if serr := g.node.checkOpenSpace(); serr != nil {
		return fmt.Errorf("%w (%v)", serr, ferr)
	}
	return ferr
}

// failedForSpace tells whether the group stopped because a write found
// the disk full.
func (g *group) failedForSpace() bool {
	p := g.failErr.Load()
	return p != nil && errors.Is(*p, syscall.ENOSPC)
}
