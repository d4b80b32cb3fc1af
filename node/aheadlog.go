package node

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	wal "github.com/hashicorp/raft-wal"
	walfs "github.com/hashicorp/raft-wal/fs"
	"github.com/hashicorp/raft-wal/metadb"
	"github.com/hashicorp/raft-wal/segment"
	"github.com/hashicorp/raft-wal/types"
)

// A leader's log write ahead of its fsync.
//
// hashicorp/raft has the leader write and fsync an entry before it sends
// the entry to its followers, and the followers fsync again before they
// answer: two fsyncs in series before anything commits. On this project's
// disks an fsync is most of a synchronous send's latency. Raft does not
// need the series (Ongaro's thesis, 10.2.1): the leader may write its copy
// while the followers write theirs, as long as nothing is acknowledged
// before a majority holds it durably and an entry the leader counted
// before its own fsync cannot be lost from every copy a future leader is
// chosen among.
//
// So while a group's replica leads (and the group has three voters or
// more), its log's fsync returns at once and a syncer goroutine fsyncs
// behind it. hashicorp/raft then counts the leader's copy as soon as it is
// written and replicates at once; an entry commits when one follower has
// fsynced it. Two rules keep that safe:
//
//  1. Nobody is answered before the leader's copy is durable too: the
//     proposer waits for waitDurable after the entry is applied. What is
//     acknowledged is on a majority's disks, as before.
//  2. A replica that may have lost entries it counted stays out of
//     elections until it has caught up. Before it writes ahead in a term
//     it records the term and the kernel's boot id in its stable store.
//     If it restarts under the same boot, only the process died: the page
//     cache still holds every write, so it fsyncs the log and goes on.
//     Under another boot (the machine crashed) the unsynced tail may be
//     gone, and an entry committed on it and one follower is now on that
//     follower alone. So it asks for no vote, and votes only for a
//     candidate whose log goes past that term (withholding says why that
//     is safe): every majority for a candidate without the entry then
//     needs the follower that holds it, which refuses, and nothing a
//     replica applied is overwritten. A later-term entry in its own log
//     shows it has caught up from a leader elected without it, which has
//     every entry committed before.
//
// The price of rule 2 is availability in one double fault: after a
// machine crash of the leader, its group elects no leader until a replica
// holding the lost entries is up. With fewer than three voters that
// replica could be the only other one, which could then never be elected;
// so groups of one or two voters fsync before replicating. So does every
// group when Config.LeaderSyncFirst is set.

// aheadMarkKey is where a replica records, in its group's stable store,
// the last term in which it wrote ahead of fsync and the boot it did so in.
var aheadMarkKey = []byte("quorumbus/ahead-term")

// readBootID names the running kernel's boot; "" when unknown, which
// counts as a different boot.
func readBootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return string(bytes.TrimSpace(b))
}

type aheadMark struct {
	term uint64
	boot string
}

func loadAheadMark(s *raftboltdb.BoltStore) (aheadMark, error) {
	v, err := s.Get(aheadMarkKey)
	if errors.Is(err, raftboltdb.ErrKeyNotFound) {
		return aheadMark{}, nil
	}
	if err != nil {
		return aheadMark{}, err
	}
	if len(v) < 8 {
		return aheadMark{}, fmt.Errorf("ahead mark of %d bytes", len(v))
	}
	return aheadMark{term: binary.BigEndian.Uint64(v), boot: string(v[8:])}, nil
}

func storeAheadMark(s *raftboltdb.BoltStore, m aheadMark) error {
	v := binary.BigEndian.AppendUint64(nil, m.term)
	return s.Set(aheadMarkKey, append(v, m.boot...))
}

// syncFS is the raft-wal file system of a group's log. While deferring is
// set, a segment's Sync only marks the file dirty; syncDirty fsyncs them.
type syncFS struct {
	*walfs.FS
	deferring atomic.Bool

	mu    sync.Mutex
	dirty map[*syncFile]struct{}
	// syncMu is held through a pass of syncDirty, so that a barrier (or a
	// Close) waits for a pass in progress, whose files are no longer in
	// dirty, before it goes on.
	syncMu sync.Mutex

	// Tests simulate a machine crash (loseUnsynced): with track set, each
	// file remembers what was written to it since its last fsync, and
	// hold, when not nil, stops the syncer until it is closed.
	track bool
	hold  chan struct{}
}

func newSyncFS() *syncFS {
	return &syncFS{FS: walfs.New(), dirty: make(map[*syncFile]struct{})}
}

func (s *syncFS) Create(dir, name string, size uint64) (types.WritableFile, error) {
	f, err := s.FS.Create(dir, name, size)
	if err != nil {
		return nil, err
	}
	return &syncFile{WritableFile: f, fs: s}, nil
}

func (s *syncFS) OpenWriter(dir, name string) (types.WritableFile, error) {
	f, err := s.FS.OpenWriter(dir, name)
	if err != nil {
		return nil, err
	}
	return &syncFile{WritableFile: f, fs: s}, nil
}

// syncDirty fsyncs every file whose Sync was deferred.
// The fsyncs run without mu held: a deferred Sync, which the leader's raft
// loop makes with each write, must not wait for the one in progress.
func (s *syncFS) syncDirty() error {
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	s.mu.Lock()
	files := make([]*syncFile, 0, len(s.dirty))
	for f := range s.dirty {
		files = append(files, f)
		delete(s.dirty, f)
	}
	s.mu.Unlock()
	for i, f := range files {
		if err := f.sync(); err != nil {
			s.mu.Lock()
			for _, g := range files[i:] {
				s.dirty[g] = struct{}{}
			}
			s.mu.Unlock()
			return err
		}
	}
	return nil
}

// abandon forgets which files await an fsync, as a crash would. If lose
// is set it also leaves the files as a machine crash would: what was
// written since a file's last fsync is zeroed again (raft-wal writes only
// into the zeroed space it preallocated; track must be set).
func (s *syncFS) abandon(lose bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for f := range s.dirty {
		if !lose {
			delete(s.dirty, f)
			continue
		}
		for _, r := range f.unsynced {
			if _, err := f.WritableFile.WriteAt(make([]byte, r[1]), r[0]); err != nil {
				return err
			}
		}
		f.unsynced = nil
		delete(s.dirty, f)
	}
	return nil
}

type syncFile struct {
	types.WritableFile
	fs *syncFS

	unsynced [][2]int64 // offset and length of writes since the last fsync (track only)
}

func (f *syncFile) WriteAt(p []byte, off int64) (int, error) {
	if f.fs.track {
		f.fs.mu.Lock()
		f.unsynced = append(f.unsynced, [2]int64{off, int64(len(p))})
		f.fs.mu.Unlock()
	}
	return f.WritableFile.WriteAt(p, off)
}

func (f *syncFile) Sync() error {
	if f.fs.deferring.Load() {
		f.fs.mu.Lock()
		f.fs.dirty[f] = struct{}{}
		f.fs.mu.Unlock()
		return nil
	}
	return f.sync()
}

// sync fsyncs the file and forgets the writes it made durable (track).
func (f *syncFile) sync() error {
	f.fs.mu.Lock()
	n := len(f.unsynced)
	f.fs.mu.Unlock()
	if err := f.WritableFile.Sync(); err != nil {
		return err
	}
	if n > 0 {
		f.fs.mu.Lock()
		f.unsynced = f.unsynced[n:]
		f.fs.mu.Unlock()
	}
	return nil
}

// Close syncs the file first if its Sync was deferred: raft-wal closes a
// segment only once it no longer needs it, and its data must not be left
// behind unsynced.
func (f *syncFile) Close() error {
	f.fs.syncMu.Lock()
	defer f.fs.syncMu.Unlock()
	f.fs.mu.Lock()
	_, dirty := f.fs.dirty[f]
	delete(f.fs.dirty, f)
	f.fs.mu.Unlock()
	var err error
	if dirty {
		err = f.sync()
	}
	return errors.Join(err, f.WritableFile.Close())
}

// barrierMeta makes every deferred segment write durable before raft-wal
// commits its metadata: a rotation records a segment as sealed, and a
// truncation records what the log holds, and either must not name data
// that a crash could still take away.
type barrierMeta struct {
	*metadb.BoltMetaDB
	fs *syncFS
}

func (m barrierMeta) CommitState(s types.PersistentState) error {
	if err := m.fs.syncDirty(); err != nil {
		return err
	}
	return m.BoltMetaDB.CommitState(s)
}

// aheadLog is a group's raft-wal log that writes ahead of its fsync while
// ahead says so, and tracks which index is durable.
type aheadLog struct {
	*wal.WAL
	fs *syncFS

	// leads tells whether this replica leads the group: a write goes
	// ahead of its fsync only then, unless serial. mark records the term
	// durably before the first such write of the term (rule 2).
	leads  func() bool
	serial bool
	mark   func(term uint64) error
	marked uint64 // raft stores logs from one goroutine

	// voters is the voter count of the newest configuration the log holds,
	// with that configuration's index (0 until known).
	votersMu    sync.Mutex
	voters      int
	votersIndex uint64

	// lostTerm is the term marked when the log was opened under another
	// boot: entries written ahead in it may be lost. withheld is that term
	// while this replica withholds its vote (rule 2), 0 otherwise.
	lostTerm uint64
	withheld atomic.Uint64
	log      *slog.Logger

	written atomic.Uint64 // last index written ahead of its fsync
	kick    chan struct{}

	durMu    sync.Mutex
	durable  uint64
	advanced chan struct{} // closed and replaced when durable advances
	failed   chan struct{} // closed when the syncer stops; err says why
	err      error

	stop chan struct{}
	done chan struct{}
}

// openAheadLog opens raft-wal in dir with deferrable fsyncs and starts its
// syncer; fail is called if an fsync fails.
func openAheadLog(dir string, logger hclog.Logger, fail func(error), track bool) (*aheadLog, error) {
	fs := newSyncFS()
	fs.track = track
	w, err := wal.Open(dir, wal.WithLogger(logger),
		wal.WithSegmentFiler(segment.NewFiler(dir, fs)),
		wal.WithMetaStore(barrierMeta{BoltMetaDB: &metadb.BoltMetaDB{}, fs: fs}))
	if err != nil {
		return nil, err
	}
	l := &aheadLog{
		WAL:      w,
		fs:       fs,
		leads:    func() bool { return false },
		mark:     func(uint64) error { return nil },
		kick:     make(chan struct{}, 1),
		advanced: make(chan struct{}),
		failed:   make(chan struct{}),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	if last, err := w.LastIndex(); err == nil {
		l.durable = last
	}
	go l.syncLoop(fail)
	return l, nil
}

// StoreLogs implements raft.LogStore.
func (l *aheadLog) StoreLogs(logs []*raft.Log) error {
	if len(logs) == 0 {
		return nil
	}
	last := logs[len(logs)-1]
	for _, e := range logs {
		if e.Type == raft.LogConfiguration {
			l.noteConfiguration(e)
		}
	}
	ahead := l.writesAhead()
	if ahead && last.Term != l.marked {
		if err := l.mark(last.Term); err != nil {
			return fmt.Errorf("record the term written ahead of fsync: %w", err)
		}
		l.marked = last.Term
	}
	l.fs.deferring.Store(ahead)
	err := l.WAL.StoreLogs(logs)
	l.fs.deferring.Store(false)
	if err != nil {
		return err
	}
	if ahead {
		l.written.Store(last.Index)
		select {
		case l.kick <- struct{}{}:
		default:
		}
	} else {
		l.setDurable(last.Index)
	}
	if w := l.withheld.Load(); w != 0 && last.Term > w {
		l.withheld.Store(0)
		l.log.Info("votes no longer withheld: the log holds an entry of a later term", "term", last.Term, "marked_term", w)
	}
	return nil
}

// writesAhead tells whether a write now may go ahead of its fsync.
func (l *aheadLog) writesAhead() bool {
	return !l.serial && l.votersAtLeast(3) && l.leads()
}

// StoreLog implements raft.LogStore.
func (l *aheadLog) StoreLog(e *raft.Log) error { return l.StoreLogs([]*raft.Log{e}) }

func (l *aheadLog) noteConfiguration(e *raft.Log) {
	cfg := raft.DecodeConfiguration(e.Data)
	n := 0
	for _, s := range cfg.Servers {
		if s.Suffrage == raft.Voter {
			n++
		}
	}
	l.setVoters(e.Index, n)
}

// setVoters records the voter count of the configuration at index unless
// a newer one is known.
func (l *aheadLog) setVoters(index uint64, n int) {
	l.votersMu.Lock()
	if index >= l.votersIndex {
		l.voters, l.votersIndex = n, index
	}
	l.votersMu.Unlock()
}

func (l *aheadLog) votersAtLeast(n int) bool {
	l.votersMu.Lock()
	defer l.votersMu.Unlock()
	return l.voters >= n
}

// withholding reports why this replica does not vote for a candidate
// whose last log entry is of term lastLogTerm (0: itself), or nil. While
// it may lack entries it wrote ahead as leader of term t, it votes only
// for candidates whose log has caught up past t: their log holds an entry
// of a later term's leader, and with it every entry committed in t. So a
// replica that withholds still helps elect one that has caught up; if it
// refused those too, two replicas that both once led and crashed would
// wait for each other forever.
func (l *aheadLog) withholding(lastLogTerm uint64) error {
	if t := l.withheld.Load(); t != 0 && lastLogTerm <= t {
		return fmt.Errorf("vote withheld: a machine crash may have cost this replica entries it wrote ahead of fsync as leader of term %d; it votes for candidates whose log goes past that term, and for itself once a later term's leader reaches it", t)
	}
	return nil
}

func (l *aheadLog) syncLoop(fail func(error)) {
	defer close(l.done)
	for {
		select {
		case <-l.kick:
		case <-l.stop:
			return
		}
		l.fs.mu.Lock()
		h := l.fs.hold
		l.fs.mu.Unlock()
		if h != nil {
			select {
			case <-h:
			case <-l.stop:
				return
			}
		}
		w := l.written.Load()
		if err := l.fs.syncDirty(); err != nil {
			l.durMu.Lock()
			l.err = fmt.Errorf("fsync of the raft log: %w", err)
			close(l.failed)
			l.durMu.Unlock()
			fail(l.err)
			return
		}
		l.setDurable(w)
	}
}

func (l *aheadLog) setDurable(index uint64) {
	l.durMu.Lock()
	if index > l.durable {
		l.durable = index
		close(l.advanced)
		l.advanced = make(chan struct{})
	}
	l.durMu.Unlock()
}

// waitDurable returns once the entry at index is durable in this replica's
// log, or why it cannot say.
func (l *aheadLog) waitDurable(ctx context.Context, index uint64) error {
	for {
		l.durMu.Lock()
		durable, advanced, err := l.durable, l.advanced, l.err
		l.durMu.Unlock()
		if durable >= index {
			return nil
		}
		if err != nil {
			return err
		}
		select {
		case <-advanced:
		case <-l.failed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Close stops the syncer, makes what was written durable and closes the
// log. It reports whether everything written reached the disk.
func (l *aheadLog) Close() error {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	<-l.done
	err := l.fs.syncDirty()
	return errors.Join(err, l.WAL.Close())
}

// crash closes the log as a crash would leave it (tests): the syncer
// stops, nothing more is fsynced, and after a machine crash what was not
// yet fsynced is lost.
func (l *aheadLog) crash(machine bool) error {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	<-l.done
	if err := l.fs.abandon(machine); err != nil {
		return err
	}
	return l.WAL.Close()
}

// clearMark removes the mark of rule 2 after a clean close, unless this
// replica still withholds its vote: then its log still lacks what it may
// have lost.
func (l *aheadLog) clearMark() error {
	if l.withheld.Load() != 0 || (l.marked == 0 && l.lostTerm == 0) {
		return nil
	}
	return l.mark(0)
}

// openAheadLog opens the group's raft-wal log in dir. A replica that wrote
// ahead of fsync and restarts under the same boot first makes durable what
// the page cache holds of its log; under another boot it remembers the
// marked term for withholdIfLost.
func (g *group) openAheadLog(dir string, hlog *hclogger) (*aheadLog, error) {
	boot := g.node.cfg.bootID
	if boot == "" {
		boot = readBootID()
	}
	mark, err := loadAheadMark(g.stable)
	if err != nil {
		return nil, err
	}
	if mark.term != 0 && boot != "" && mark.boot == boot {
		if err := syncFiles(dir); err != nil {
			return nil, fmt.Errorf("sync the log written ahead of fsync: %w", err)
		}
		if err := storeAheadMark(g.stable, aheadMark{}); err != nil {
			return nil, err
		}
		mark = aheadMark{}
	}
	l, err := openAheadLog(dir, hlog.Named("wal"), g.fail, g.node.cfg.simulatedMachine)
	if err != nil {
		return nil, err
	}
	l.leads = func() bool {
		r := g.raftRef.Load()
		return r != nil && r.State() == raft.Leader
	}
	l.serial = g.node.cfg.LeaderSyncFirst
	l.mark = func(term uint64) error { return storeAheadMark(g.stable, aheadMark{term: term, boot: boot}) }
	l.lostTerm = mark.term
	l.log = g.log
	return l, nil
}

// withholdIfLost starts withholding this replica's vote if its log may
// have lost entries written ahead of fsync: the log was opened under
// another boot than the one it wrote ahead in, and holds no entry of a
// later term than that.
func (g *group) withholdIfLost(logs raft.LogStore, snaps raft.SnapshotStore) error {
	marked := g.ahead.lostTerm
	if marked == 0 {
		return nil
	}
	last, err := lastTerm(logs, snaps)
	if err != nil {
		return err
	}
	if last > marked {
		return nil
	}
	g.ahead.withheld.Store(marked)
	g.log.Warn("withholding votes: this replica led with its log written ahead of fsync and the machine restarted since, so entries others count on may be lost here; it votes again once a later term's leader has reached it",
		"marked_term", marked, "last_log_term", last)
	return nil
}

// lastTerm is the term of the last entry in the log, or of the latest
// snapshot when the log is empty.
func lastTerm(logs raft.LogStore, snaps raft.SnapshotStore) (uint64, error) {
	idx, err := logs.LastIndex()
	if err != nil {
		return 0, err
	}
	if idx > 0 {
		var e raft.Log
		if err := logs.GetLog(idx, &e); err != nil {
			return 0, err
		}
		return e.Term, nil
	}
	list, err := snaps.List()
	if err != nil || len(list) == 0 {
		return 0, err
	}
	return list[0].Term, nil
}

// countVoters tells the log how many voters the group's newest
// configuration has: only groups of three or more write ahead of fsync.
func (g *group) countVoters() {
	if g.ahead == nil {
		return
	}
	f := g.raft.GetConfiguration()
	if f.Error() != nil {
		return
	}
	n := 0
	for _, s := range f.Configuration().Servers {
		if s.Suffrage == raft.Voter {
			n++
		}
	}
	g.ahead.setVoters(f.Index(), n)
}

// syncFiles fsyncs every file in dir and dir itself. A replica restarted
// under the boot it wrote ahead in uses it to make durable what the page
// cache still holds of its log.
func syncFiles(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		f, err := os.OpenFile(filepath.Join(dir, e.Name()), os.O_RDWR, 0)
		if err != nil {
			return err
		}
		err = f.Sync()
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
