package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"
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

// aheadLog is a group's raft-wal log. It writes ahead of its fsync while
// its replica leads a group of three or more voters, and tracks which
// index is durable.
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

	durMu       sync.Mutex
	durable     uint64
	truncations uint64        // tail cuts so far (DeleteRange)
	advanced    chan struct{} // closed and replaced when durable advances
	failed      chan struct{} // closed when the syncer stops; err says why
	err         error

	// fail stops the group (fail-stop) after a write or an fsync of the
	// log failed.
	fail func(error)
	// synced is told how long each of the syncer's fsyncs took (metrics);
	// nil: nobody asks.
	synced func(since time.Time)

	stop chan struct{}
	done chan struct{}
}

// walOptions are how a group's raft-wal log is opened.
type walOptions struct {
	segmentBytes int
	host         host // nil: the real machine
}

// openAheadLog opens raft-wal in dir with deferrable fsyncs and starts its
// syncer; fail is called if an fsync or a write of the log fails. If the
// open fails, everything it opened is closed again: raft-wal's Open leaves
// its metadata store (and the bolt file's lock) and its segment files open
// on the way out.
func openAheadLog(dir string, logger hclog.Logger, fail func(error), o walOptions) (*aheadLog, error) {
	host := o.host
	if host == nil {
		host = realHost{}
	}
	fs := newSyncFS(host)
	fs.opening = true
	if err := waitUnlocked(filepath.Join(dir, metadb.FileName)); err != nil {
		return nil, err
	}
	meta := &metadb.BoltMetaDB{}
	size := o.segmentBytes
	if size == 0 {
		size = wal.DefaultSegmentSize
	}
	w, err := wal.Open(dir, wal.WithLogger(logger), wal.WithSegmentSize(size),
		wal.WithSegmentFiler(segment.NewFiler(dir, fs)),
		wal.WithMetaStore(barrierMeta{BoltMetaDB: meta, fs: fs}))
	opened := fs.endOpen()
	if err != nil {
		for _, f := range opened {
			f.Close()
		}
		return nil, errors.Join(err, meta.Close())
	}
	l := &aheadLog{
		WAL:      w,
		fs:       fs,
		fail:     fail,
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
	go l.syncLoop()
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
	if err != nil && !errors.Is(err, wal.ErrClosed) {
		// raft-wal does not recover from a failed write by itself:
		// once it cannot create its next segment (a full disk), its
		// sealed tail refuses every later write ("segment is sealed")
		// until the log is reopened. Raft only steps down and retries,
		// so the group stops and the node reopens it (superviseGroups).
		werr := fmt.Errorf("write of the raft log: %w", err)
		if p := l.fs.createErr.Load(); p != nil && errors.Is(err, types.ErrSealed) {
			werr = fmt.Errorf("%w; its next segment could not be created: %w", werr, *p)
		}
		l.fail(werr)
	}
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

func (l *aheadLog) syncLoop() {
	defer close(l.done)
	for {
		select {
		case <-l.kick:
		case <-l.stop:
			return
		}
		l.durMu.Lock()
		gen := l.truncations
		l.durMu.Unlock()
		w := l.written.Load()
		if !l.fs.host.awaitSync(l, l.stop) {
			return
		}
		start := time.Now()
		err := l.fs.syncDirty()
		if l.synced != nil {
			l.synced(start)
		}
		if err != nil {
			l.durMu.Lock()
			l.err = fmt.Errorf("fsync of the raft log: %w", err)
			close(l.failed)
			l.durMu.Unlock()
			l.fail(l.err)
			return
		}
		l.setDurableSince(gen, w)
	}
}

// DeleteRange implements raft.LogStore. When it cuts the log's tail (a
// former leader's entries that the new leader's log does not have), what
// was written ahead there is gone: the durable index must not count it,
// nor a sync pass that began before the cut, or entries written at the
// same indexes later would count as durable before they are.
func (l *aheadLog) DeleteRange(from, to uint64) error {
	last, err := l.WAL.LastIndex()
	if err != nil {
		return err
	}
	if err := l.WAL.DeleteRange(from, to); err != nil {
		return err
	}
	if to < last || from == 0 {
		return nil // the head: entries a snapshot covers
	}
	l.durMu.Lock()
	l.truncations++
	l.durable = min(l.durable, from-1)
	l.durMu.Unlock()
	if w := l.written.Load(); w >= from {
		l.written.Store(from - 1)
	}
	return nil
}

func (l *aheadLog) setDurable(index uint64) {
	l.durMu.Lock()
	l.setDurableLocked(index)
	l.durMu.Unlock()
}

// setDurableSince is setDurable for a sync pass that began when the log
// had been cut gen times: a pass that began before a cut says nothing.
func (l *aheadLog) setDurableSince(gen uint64, index uint64) {
	l.durMu.Lock()
	if gen == l.truncations {
		l.setDurableLocked(index)
	}
	l.durMu.Unlock()
}

func (l *aheadLog) setDurableLocked(index uint64) {
	if index > l.durable {
		l.durable = index
		close(l.advanced)
		l.advanced = make(chan struct{})
	}
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
	l.stopSyncer()
	err := l.fs.syncDirty()
	return errors.Join(err, l.WAL.Close())
}

// stopSyncer stops the syncer and waits for it: nothing written after
// is fsynced until Close. A crash (tests) stops it first, as a crash stops
// everything at once.
func (l *aheadLog) stopSyncer() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	<-l.done
}

// crash closes the log as a crash would leave it (tests): nothing more is
// fsynced, and after a machine crash what was not yet fsynced is lost.
func (l *aheadLog) crash(machine bool) error {
	l.stopSyncer()
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
