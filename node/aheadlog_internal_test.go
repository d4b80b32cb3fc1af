package node

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/hashicorp/raft-wal/metadb"
	"github.com/hashicorp/raft-wal/types"
)

func openTestAheadLog(t *testing.T, dir string) *aheadLog {
	t.Helper()
	quiet := slog.New(slog.DiscardHandler)
	l, err := openAheadLog(dir, newHCLogger(quiet, "wal"), func(err error) { t.Errorf("sync failed: %v", err) }, walOptions{host: &simHost{track: true}})
	if err != nil {
		t.Fatal(err)
	}
	l.log = quiet
	return l
}

// holdSync stops l's syncer before its next fsync until hold is closed;
// it then sends on holding, if not nil and free. l must be on a
// simHost.
func holdSync(l *aheadLog, hold, holding chan struct{}) {
	l.fs.host.(*simHost).holdSync(l, hold, holding)
}

func entries(term uint64, from, to uint64) []*raft.Log {
	var out []*raft.Log
	for i := from; i <= to; i++ {
		out = append(out, &raft.Log{Index: i, Term: term, Type: raft.LogCommand, Data: []byte("entry")})
	}
	return out
}

// TestAheadLogDurableIndex writes as a leader of three voters: StoreLogs
// returns before the fsync, waitDurable only after the syncer's. Written
// otherwise, an entry is durable when StoreLogs returns.
func TestAheadLogDurableIndex(t *testing.T) {
	l := openTestAheadLog(t, t.TempDir())
	defer l.Close()
	var leads bool
	var marked []uint64
	l.leads = func() bool { return leads }
	l.mark = func(term uint64) error { marked = append(marked, term); return nil }

	if err := l.StoreLogs(entries(1, 1, 3)); err != nil {
		t.Fatal(err)
	}
	if err := l.waitDurable(context.Background(), 3); err != nil {
		t.Fatal(err)
	}

	// Leading, but two voters: still synced inline.
	leads = true
	l.setVoters(1, 2)
	if err := l.StoreLogs(entries(2, 4, 4)); err != nil {
		t.Fatal(err)
	}
	if err := l.waitDurable(context.Background(), 4); err != nil {
		t.Fatal(err)
	}
	if len(marked) != 0 {
		t.Fatalf("marked terms %v without writing ahead", marked)
	}

	l.setVoters(2, 3)
	hold := make(chan struct{})
	holdSync(l, hold, nil)
	if err := l.StoreLogs(entries(2, 5, 6)); err != nil {
		t.Fatal(err)
	}
	if err := l.StoreLogs(entries(2, 7, 7)); err != nil {
		t.Fatal(err)
	}
	if len(marked) != 1 || marked[0] != 2 {
		t.Fatalf("marked terms %v, want [2]", marked)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := l.waitDurable(ctx, 5); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("waitDurable with the syncer held: %v", err)
	}
	close(hold)
	if err := l.waitDurable(context.Background(), 7); err != nil {
		t.Fatal(err)
	}
	l.fs.mu.Lock()
	dirty := len(l.fs.dirty)
	l.fs.mu.Unlock()
	if dirty != 0 {
		t.Fatalf("%d files still dirty after the syncer ran", dirty)
	}
}

// TestAheadLogMachineCrash loses what was written ahead and not synced,
// and keeps what was.
func TestAheadLogMachineCrash(t *testing.T) {
	dir := t.TempDir()
	l := openTestAheadLog(t, dir)
	l.leads = func() bool { return true }
	l.setVoters(1, 3)
	if err := l.StoreLogs(entries(1, 1, 5)); err != nil {
		t.Fatal(err)
	}
	if err := l.waitDurable(context.Background(), 5); err != nil {
		t.Fatal(err)
	}
	holdSync(l, make(chan struct{}), nil)
	if err := l.StoreLogs(entries(1, 6, 9)); err != nil {
		t.Fatal(err)
	}
	if err := l.crash(true); err != nil {
		t.Fatal(err)
	}
	l = openTestAheadLog(t, dir)
	defer l.Close()
	if last, err := l.LastIndex(); err != nil || last != 5 {
		t.Fatalf("after the crash the log ends at %d (%v), want 5", last, err)
	}
	if err := l.StoreLogs(entries(2, 6, 6)); err != nil {
		t.Fatal(err)
	}
}

// TestBarrierMeta: raft-wal's metadata is committed only after every
// deferred segment write is synced.
func TestBarrierMeta(t *testing.T) {
	dir := t.TempDir()
	fs := newSyncFS(realHost{})
	f, err := fs.Create(dir, "seg", 4096)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fs.deferring.Store(true)
	if _, err := f.WriteAt([]byte("frame"), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	fs.deferring.Store(false)
	if len(fs.dirty) != 1 {
		t.Fatalf("%d dirty files after a deferred Sync, want 1", len(fs.dirty))
	}
	db := &metadb.BoltMetaDB{}
	if _, err := db.Load(dir); err != nil {
		t.Fatal(err)
	}
	m := barrierMeta{BoltMetaDB: db, fs: fs}
	defer m.Close()
	if err := m.CommitState(types.PersistentState{NextSegmentID: 2}); err != nil {
		t.Fatal(err)
	}
	if len(fs.dirty) != 0 {
		t.Fatalf("%d dirty files after CommitState, want 0", len(fs.dirty))
	}
}

// brokenFile is a segment whose fsync fails, as a failing disk's would.
type brokenFile struct{ types.WritableFile }

func (brokenFile) Sync() error { return errDiskGone }

var errDiskGone = errors.New("test: disk gone")

// TestAheadLogSyncFailure: when the syncer's fsync fails, the group is
// told (it stops, fail-stop) and nobody waiting for the entries is
// answered as if they were durable.
func TestAheadLogSyncFailure(t *testing.T) {
	failed := make(chan error, 1)
	quiet := slog.New(slog.DiscardHandler)
	l, err := openAheadLog(t.TempDir(), newHCLogger(quiet, "wal"), func(err error) { failed <- err }, walOptions{host: &simHost{}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	l.log = quiet
	l.leads = func() bool { return true }
	l.setVoters(1, 3)
	hold := make(chan struct{})
	holdSync(l, hold, nil)
	if err := l.StoreLogs(entries(1, 1, 2)); err != nil {
		t.Fatal(err)
	}
	l.fs.mu.Lock()
	l.fs.dirty[&syncFile{WritableFile: brokenFile{}, fs: l.fs}] = struct{}{}
	l.fs.mu.Unlock()
	close(hold)
	if err := l.waitDurable(context.Background(), 2); !errors.Is(err, errDiskGone) {
		t.Fatalf("waitDurable after a failed fsync: %v, want %v", err, errDiskGone)
	}
	if err := <-failed; !errors.Is(err, errDiskGone) {
		t.Fatalf("the group was told %v, want %v", err, errDiskGone)
	}
}

// slowFile is a segment whose fsync takes until release is closed.
type slowFile struct {
	types.WritableFile
	started chan struct{}
	release chan struct{}
}

func (f slowFile) Sync() error {
	close(f.started)
	<-f.release
	return nil
}

// TestBarrierWaitsForSyncInProgress: a metadata commit that starts while
// the syncer fsyncs a file it already took from the dirty set waits for
// that fsync.
func TestBarrierWaitsForSyncInProgress(t *testing.T) {
	dir := t.TempDir()
	fs := newSyncFS(realHost{})
	slow := slowFile{started: make(chan struct{}), release: make(chan struct{})}
	fs.dirty[&syncFile{WritableFile: slow, fs: fs}] = struct{}{}
	syncing := make(chan error, 1)
	go func() { syncing <- fs.syncDirty() }()
	<-slow.started

	db := &metadb.BoltMetaDB{}
	if _, err := db.Load(dir); err != nil {
		t.Fatal(err)
	}
	m := barrierMeta{BoltMetaDB: db, fs: fs}
	defer m.Close()
	committed := make(chan error, 1)
	go func() { committed <- m.CommitState(types.PersistentState{NextSegmentID: 2}) }()
	select {
	case err := <-committed:
		t.Fatalf("metadata committed (%v) while an fsync was in progress", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(slow.release)
	if err := <-syncing; err != nil {
		t.Fatal(err)
	}
	if err := <-committed; err != nil {
		t.Fatal(err)
	}
}

// TestAheadLogTailCut: a former leader's entries written ahead and cut
// by its successor's log do not count as durable, not even through a sync
// pass that read the written index before the cut: entries written at
// those indexes later would count as durable before they are.
func TestAheadLogTailCut(t *testing.T) {
	l := openTestAheadLog(t, t.TempDir())
	defer l.Close()
	leads := true
	l.leads = func() bool { return leads }
	l.setVoters(1, 3)
	if err := l.StoreLogs(entries(1, 1, 2)); err != nil {
		t.Fatal(err)
	}
	if err := l.waitDurable(context.Background(), 2); err != nil {
		t.Fatal(err)
	}

	// A sync pass that has read the written index (5) and not yet synced.
	hold, holding := make(chan struct{}), make(chan struct{}, 1)
	holdSync(l, hold, holding)
	if err := l.StoreLogs(entries(1, 3, 5)); err != nil {
		t.Fatal(err)
	}
	<-holding

	leads = false
	if err := l.DeleteRange(3, 5); err != nil {
		t.Fatal(err)
	}
	if err := l.StoreLogs(entries(2, 3, 3)); err != nil { // as a follower: synced
		t.Fatal(err)
	}
	close(hold)
	l.stopSyncer() // the pass ends first
	l.durMu.Lock()
	durable := l.durable
	l.durMu.Unlock()
	if durable != 3 {
		t.Fatalf("durable index %d after the cut and one synced entry, want 3", durable)
	}
}
