package node

// Raft-group tests: three hashicorp/raft instances over raft.InmemTransport,
// each with the group's own raft.Config (Node.raftConfig) and fsm adapter
// around a real partition.Machine in t.TempDir(), raft.InmemStore and
// raft.InmemSnapshotStore. Commands are partitionpb.Batches encoded with
// partition.EncodeBatch and applied with raft.Apply on the leader; an apply
// is ACKNOWLEDGED when its future has no error and every result is OK.
//
// Time: the three convergence tests run in a testing/synctest bubble, so
// timeouts are virtual (50ms elections cost nothing) and a wait that can
// never end is a detected deadlock, not a hang. Pebble's background
// goroutines block durably (channels, sync.Cond) and its file I/O just
// runs, so the real store works inside the bubble. Nothing asserts on
// timings. TestRaftGroupProposeAfterShutdown runs in real time (see there).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hashicorp/raft"

	"github.com/quorumbus/quorumbus/partition"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

const rgEntity = 7

type rgReplica struct {
	addr    raft.ServerAddress
	group   *group // only what the fsm adapter needs
	machine *partition.Machine
	store   *raft.InmemStore // stable store, and log store behind logs
	logs    *gatedLogs
	trans   *raft.InmemTransport
	raft    *raft.Raft
}

// gatedLogs is a log store whose writes can be held up, as a slow disk
// would: a follower then has an AppendEntries in hand that it neither
// stores nor acknowledges.
type gatedLogs struct {
	*raft.InmemStore
	mu   sync.Mutex
	gate chan struct{} // nil: writes pass; else they wait until it is closed
}

func (g *gatedLogs) hold() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.gate = make(chan struct{})
}

func (g *gatedLogs) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	close(g.gate)
	g.gate = nil
}

func (g *gatedLogs) wait() {
	g.mu.Lock()
	gate := g.gate
	g.mu.Unlock()
	if gate != nil {
		<-gate
	}
}

// StoreLogs is what raft writes with; only bootstrapping uses StoreLog.
func (g *gatedLogs) StoreLogs(logs []*raft.Log) error {
	g.wait()
	return g.InmemStore.StoreLogs(logs)
}

type rgCluster struct {
	t  *testing.T
	rs []*rgReplica
}

// newRGCluster starts and bootstraps a group of three replicas; tune, if
// not nil, changes their node Config before raftConfig reads it.
func newRGCluster(t *testing.T, tune func(*Config)) *rgCluster {
	t.Helper()
	quiet := slog.New(slog.DiscardHandler)
	c := &rgCluster{t: t}
	// The directories first: cleanups run last-in first-out, and the
	// machines must close before their directories go.
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	t.Cleanup(func() {
		for _, r := range c.rs {
			if r.raft != nil {
				if err := r.raft.Shutdown().Error(); err != nil {
					t.Errorf("%s: raft shutdown: %v", r.addr, err)
				}
			}
		}
		for _, r := range c.rs {
			if err := r.machine.Close(); err != nil {
				t.Errorf("%s: close machine: %v", r.addr, err)
			}
		}
	})
	var servers []raft.Server
	for i := range 3 {
		id := fmt.Sprintf("r%d", i)
		addr, trans := raft.NewInmemTransport(raft.ServerAddress(id))
		m, err := partition.Open(dirs[i], partition.Options{CacheBytes: 1 << 20, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		store := raft.NewInmemStore()
		r := &rgReplica{addr: addr, machine: m, store: store, logs: &gatedLogs{InmemStore: store}, trans: trans}
		c.rs = append(c.rs, r)
		servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(id), Address: addr})

		cfg := Config{ID: id, ElectionTimeout: 50 * time.Millisecond}
		if tune != nil {
			tune(&cfg)
		}
		cfg.setDefaults()
		n := &Node{cfg: cfg}
		g := &group{id: 1, node: n, log: quiet, machine: m, failed: make(chan struct{})}
		conf := n.raftConfig(g, newHCLogger(quiet, "raft"))
		conf.CommitTimeout = 5 * time.Millisecond
		conf.NotifyCh = nil // watchLeadership, which drains it, is not running
		r.group = g
		r.raft, err = raft.NewRaft(conf, &fsm{g: g}, r.logs, r.store, raft.NewInmemSnapshotStore(), trans)
		if err != nil {
			t.Fatal(err)
		}
	}
	c.connectAll()
	if err := c.rs[0].raft.BootstrapCluster(raft.Configuration{Servers: servers}).Error(); err != nil {
		t.Fatal(err)
	}
	return c
}

func (c *rgCluster) connectAll() {
	for _, a := range c.rs {
		for _, b := range c.rs {
			if a != b {
				a.trans.Connect(b.addr, b.trans)
			}
		}
	}
}

// isolate cuts x off from the others in both directions.
func (c *rgCluster) isolate(x *rgReplica) {
	x.trans.DisconnectAll()
	for _, r := range c.rs {
		if r != x {
			r.trans.Disconnect(x.addr)
		}
	}
}

func (c *rgCluster) others(x *rgReplica) []*rgReplica {
	var out []*rgReplica
	for _, r := range c.rs {
		if r != x {
			out = append(out, r)
		}
	}
	return out
}

// leader waits for a replica among rs that considers itself leader.
func (c *rgCluster) leader(rs ...*rgReplica) *rgReplica {
	c.t.Helper()
	if len(rs) == 0 {
		rs = c.rs
	}
	var l *rgReplica
	waitUntil(c.t, "a leader", func() bool {
		for _, r := range rs {
			if r.raft.State() == raft.Leader {
				l = r
				return true
			}
		}
		return false
	})
	return l
}

func encode(t *testing.T, cmds ...*partitionpb.Command) []byte {
	t.Helper()
	data, err := partition.EncodeBatch(&partitionpb.Batch{NowMs: time.Now().UnixMilli(), Commands: cmds})
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func enqueueCmd(id string) *partitionpb.Command {
	return &partitionpb.Command{Op: &partitionpb.Command_Enqueue{Enqueue: &partitionpb.Enqueue{
		EntityId: rgEntity, Messages: []*partitionpb.NewMessage{{MessageId: id, Bare: []byte(id)}},
	}}}
}

func upsertCmd() *partitionpb.Command {
	return &partitionpb.Command{Op: &partitionpb.Command_UpsertEntity{UpsertEntity: &partitionpb.UpsertEntity{
		Config: &partitionpb.EntityConfig{EntityId: rgEntity, Name: "q"},
	}}}
}

// acked waits for f and reports whether it is acknowledged. An apply that
// fails in the state machine (an error response) is a test failure.
func acked(t *testing.T, f raft.ApplyFuture) bool {
	t.Helper()
	if f.Error() != nil {
		return false
	}
	results, ok := f.Response().([]*partitionpb.Result)
	if !ok || len(results) == 0 {
		t.Errorf("entry %d: response %T %[2]v", f.Index(), f.Response())
		return false
	}
	for _, res := range results {
		if res.Code != partitionpb.ResultCode_RESULT_OK {
			t.Errorf("entry %d: result %v", f.Index(), res)
			return false
		}
	}
	return true
}

// ledger records the acknowledged messages.
type ledger struct {
	acked map[string]bool
	last  uint64 // index of the last acknowledged entry
	tries int
}

func (l *ledger) ack(id string, index uint64) {
	if l.acked == nil {
		l.acked = map[string]bool{}
	}
	l.acked[id] = true
	l.last = max(l.last, index)
}

// mustApply applies cmd on the leader until acknowledged; cmd must be
// idempotent.
func (c *rgCluster) mustApply(l *ledger, cmd *partitionpb.Command) {
	c.t.Helper()
	for range 100 {
		f := c.leader().raft.Apply(encode(c.t, cmd), 0)
		if acked(c.t, f) {
			l.last = max(l.last, f.Index())
			return
		}
	}
	c.t.Fatal("100 applies, none acknowledged")
}

// send enqueues n messages named prefix-k, one entry each, on the leader
// among rs. An apply that is not acknowledged has an unknown outcome and
// is not retried under its id: the next try uses a fresh one.
func (c *rgCluster) send(l *ledger, prefix string, n int, rs ...*rgReplica) {
	c.t.Helper()
	for i, tries := 0, 0; i < n; tries++ {
		if tries > 10*n+100 {
			c.t.Fatalf("%s: %d of %d acknowledged after %d tries", prefix, i, n, tries)
		}
		id := fmt.Sprintf("%s-%d", prefix, l.tries)
		l.tries++
		f := c.leader(rs...).raft.Apply(encode(c.t, enqueueCmd(id)), 0)
		if acked(c.t, f) {
			l.ack(id, f.Index())
			i++
		}
	}
}

// converge waits until the machines of rs have applied index or more and
// hold byte-equal snapshots, and returns that snapshot.
func (c *rgCluster) converge(index uint64, rs ...*rgReplica) []byte {
	c.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		snap, why := same(index, rs)
		if why == "" {
			c.t.Logf("converged at applied index %d", rs[0].machine.AppliedIndex())
			return snap
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("replicas did not converge: %s", why)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// same returns the common snapshot of rs, or why there is none.
func same(index uint64, rs []*rgReplica) (snap []byte, why string) {
	for _, r := range rs {
		if a := r.machine.AppliedIndex(); a < index {
			return nil, fmt.Sprintf("%s applied %d < %d", r.addr, a, index)
		}
		s, err := r.machine.Snapshot()
		if err != nil {
			return nil, fmt.Sprintf("%s: %v", r.addr, err)
		}
		var b bytes.Buffer
		_, err = s.WriteTo(&b)
		s.Release()
		if err != nil { // e.g. a Restore released it: look again
			return nil, fmt.Sprintf("%s: %v", r.addr, err)
		}
		if snap != nil && !bytes.Equal(b.Bytes(), snap) {
			return nil, fmt.Sprintf("%s differs from %s", r.addr, rs[0].addr)
		}
		snap = b.Bytes()
	}
	return snap, ""
}

// contents restores snap into a scratch machine and takes every message
// with receive-and-delete: how often each message id is there.
func contents(t *testing.T, snap []byte) map[string]int {
	t.Helper()
	m, err := partition.Open(t.TempDir(), partition.Options{CacheBytes: 1 << 20, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.Restore(bytes.NewReader(snap)); err != nil {
		t.Fatal(err)
	}
	lock := encode(t, &partitionpb.Command{Op: &partitionpb.Command_Lock{Lock: &partitionpb.Lock{
		EntityId: rgEntity, MaxCount: partition.MaxLockCount, ReceiveAndDelete: true,
	}}})
	ids := map[string]int{}
	for {
		res, err := m.Apply([]partition.Entry{{Index: m.AppliedIndex() + 1, Data: lock}})
		if err != nil {
			t.Fatal(err)
		}
		r := res[0][0]
		if r.Code != partitionpb.ResultCode_RESULT_OK {
			t.Fatalf("lock: %v", r)
		}
		if len(r.Messages) == 0 {
			return ids
		}
		for _, msg := range r.Messages {
			ids[msg.MessageId]++
		}
	}
}

// check verifies that snap, the converged state of rs, holds every
// acknowledged message exactly once, and no message for which gone is true;
// it returns the messages.
func (c *rgCluster) check(l *ledger, snap []byte, gone func(id string) bool, rs ...*rgReplica) map[string]int {
	c.t.Helper()
	ids := contents(c.t, snap)
	for id, n := range ids {
		if n != 1 {
			c.t.Errorf("message %s present %d times", id, n)
		}
		if gone != nil && gone(id) {
			c.t.Errorf("message %s present, but it should be gone", id)
		}
	}
	for id := range l.acked {
		if ids[id] == 0 {
			c.t.Errorf("acknowledged message %s is missing", id)
		}
	}
	for _, r := range rs {
		st, err := r.machine.Stats(rgEntity, 0)
		if err != nil {
			c.t.Fatal(err)
		}
		if int(st.ActiveMessages) != len(ids) {
			c.t.Errorf("%s: stats count %d active messages, the snapshot holds %d", r.addr, st.ActiveMessages, len(ids))
		}
	}
	c.t.Logf("%d messages acknowledged, %d present", len(l.acked), len(ids))
	return ids
}

// TestRaftGroupLeaderLoss shuts the leader down while a stream of
// pipelined applies is in flight: replicated to the followers, whose log
// writes are held up, but not committed. None of those is acknowledged;
// the survivors elect a leader, which commits what they hold, take more,
// and end up identical, with every acknowledged message once.
func TestRaftGroupLeaderLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newRGCluster(t, nil)
		l := new(ledger)
		c.mustApply(l, upsertCmd())
		c.send(l, "before", 20)

		old := c.leader()
		survivors := c.others(old)
		for _, r := range survivors {
			r.logs.hold()
		}
		const burst = 20
		futures := make([]raft.ApplyFuture, burst)
		for i := range futures {
			futures[i] = old.raft.Apply(encode(t, enqueueCmd(fmt.Sprintf("burst-%d", i))), 0)
		}
		// Let the leader take in and send out the burst. Shutting down
		// while an Apply waits in raft's applyCh (BatchApplyCh) would leave
		// its future unanswered for ever (hashicorp/raft#498); so would an
		// Apply after Shutdown, half the time.
		synctest.Wait()
		if err := old.raft.Shutdown().Error(); err != nil {
			t.Fatal(err)
		}
		for i, f := range futures {
			if err := f.Error(); !errors.Is(err, raft.ErrLeadershipLost) && !errors.Is(err, raft.ErrRaftShutdown) {
				t.Errorf("in-flight apply %d when the leader shut down: %v", i, err)
			}
		}
		for _, r := range survivors {
			r.logs.release()
		}

		c.send(l, "after", 30, survivors...)
		snap := c.converge(l.last, survivors...)
		ids := c.check(l, snap, nil, survivors...)
		n := 0
		for i := range burst {
			n += ids[fmt.Sprintf("burst-%d", i)]
		}
		t.Logf("%d of %d unacknowledged in-flight entries were committed by the new leader", n, burst)
	})
}

// TestRaftGroupPartitionedLeader isolates the leader: its applies are
// never acknowledged, the majority elects a new leader that goes on, and
// after healing all three replicas converge without the old leader's
// entries.
func TestRaftGroupPartitionedLeader(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newRGCluster(t, nil)
		l := new(ledger)
		c.mustApply(l, upsertCmd())
		c.send(l, "before", 20)

		old := c.leader()
		majority := c.others(old)
		c.isolate(old)
		const stale = 20
		futures := make([]raft.ApplyFuture, stale)
		for i := range stale {
			futures[i] = old.raft.Apply(encode(t, enqueueCmd(fmt.Sprintf("stale-%d", i))), 0)
		}
		c.send(l, "majority", 30, majority...)
		for i, f := range futures {
			if err := f.Error(); err == nil {
				t.Errorf("apply %d on the isolated leader succeeded (index %d)", i, f.Index())
			}
		}
		if f := old.raft.Apply(encode(t, enqueueCmd("stale-late")), 0); f.Error() == nil {
			t.Errorf("apply on the isolated old leader succeeded after it lost its lease")
		}
		if old.raft.State() == raft.Leader {
			t.Errorf("the isolated old leader still leads")
		}

		c.connectAll()
		c.send(l, "healed", 10)
		snap := c.converge(l.last, c.rs...)
		c.check(l, snap, func(id string) bool { return strings.HasPrefix(id, "stale-") }, c.rs...)
	})
}

// TestRaftGroupLaggingFollower cuts a follower off while the others take
// enough entries to snapshot (every 16 entries, and once more on request)
// and truncate their logs past it: on rejoining it catches up by
// InstallSnapshot, that is fsm.Restore into its machine.
func TestRaftGroupLaggingFollower(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newRGCluster(t, func(cfg *Config) {
			cfg.SnapshotThreshold, cfg.SnapshotInterval, cfg.TrailingLogs = 16, 10*time.Millisecond, 4
		})
		l := new(ledger)
		c.mustApply(l, upsertCmd())
		c.send(l, "before", 10)

		lag := c.others(c.leader())[0]
		up := c.others(lag)
		c.isolate(lag)
		c.send(l, "missed", 100, up...)
		lagLast := lag.raft.LastIndex()
		for _, r := range up {
			if err := r.raft.Snapshot().Error(); err != nil && !errors.Is(err, raft.ErrNothingNewToSnapshot) {
				t.Fatalf("%s: snapshot: %v", r.addr, err)
			}
			first, err := r.store.FirstIndex()
			if err != nil {
				t.Fatal(err)
			}
			if first <= lagLast+1 {
				t.Fatalf("%s: log starts at %d, the lagging follower needs %d: no snapshot needed", r.addr, first, lagLast+1)
			}
		}

		c.connectAll()
		c.send(l, "after", 10)
		snap := c.converge(l.last, c.rs...)
		if got, _ := strconv.ParseUint(lag.raft.Stats()["last_snapshot_index"], 10, 64); got <= lagLast {
			t.Errorf("the lagging follower's last snapshot is at %d, below its log's end %d when cut off: it caught up without one", got, lagLast)
		}
		c.check(l, snap, nil, c.rs...)
	})
}

// TestRaftGroupProposeAfterShutdown fails a group's raft the way
// superviseFailure does (Shutdown, then stop the proposer) while requests
// are on their way through the proposer. Each request must end before its
// deadline. Real time: a proposer goroutine stuck on a lost raft future
// would make a synctest bubble panic even once requests no longer wait.
func TestRaftGroupProposeAfterShutdown(t *testing.T) {
	c := newRGCluster(t, nil)
	l := c.leader()
	g := l.group
	g.raft = l.raft
	g.locksCh = make(chan struct{}, 1)
	g.prop = newProposer(g)
	go g.prop.run()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := g.raft.Shutdown().Error(); err != nil {
		t.Fatal(err)
	}
	const n = 50
	errs := make(chan error, n)
	for i := range n {
		go func() {
			_, err := g.propose(ctx, enqueueCmd(fmt.Sprintf("m-%d", i)))
			errs <- err
		}()
	}
	g.prop.stop(ErrGroupFailed)
	for range n {
		if err := <-errs; err == nil || ctx.Err() != nil {
			t.Fatalf("a request to the failed group: %v, want an error before its deadline", err)
		}
	}
}
