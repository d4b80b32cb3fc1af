package partition

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/quorumbus/quorumbus/partition/store"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// Options configure a Machine. The zero value is usable.
type Options struct {
	// CacheBytes bounds the store's block cache; default 64 MiB. The store's
	// memory is about three times this (the cache and up to two memtables
	// of the same size, 4 to 64 MiB each), whatever the backlog.
	CacheBytes int64
	// Logger receives the store's log; default slog.Default().
	Logger *slog.Logger
	// Replica names this replica as node proposers name themselves in
	// Batch.proposer. A batch another replica proposed is applied the
	// same, but its results carry no message bodies, which this replica
	// then need not read, and its Lock results no messages at all, which
	// it then need not decode. Empty: every result carries them.
	Replica string
	// Log reads the data of a Raft entry by index. With it, message bodies
	// stay in the Raft log that already holds them instead of being
	// written into the store too, until a snapshot moves them in
	// (logbodies.go). It must answer for every entry from the last
	// snapshot's index on, and be safe for concurrent use.
	Log func(index uint64) ([]byte, error)
	// Limits bound the work of one command; zero takes the defaults,
	// which every replica of a group must share.
	Limits Limits
}

// DefaultCacheBytes is the block cache size when Options.CacheBytes is 0.
const DefaultCacheBytes = 64 << 20

// Entry is a Raft log entry.
type Entry struct {
	Index uint64
	Data  []byte
}

// Machine is the state machine of one partition group. Apply, Snapshot and
// Restore must not run concurrently with each other (Raft calls them from
// one goroutine); the reads (Stats, Available, ...) and Snapshot.WriteTo may
// run concurrently with anything.
type Machine struct {
	dir        string
	log        *slog.Logger
	cacheBytes int64
	cache      *store.Cache
	replica    string
	limits     Limits
	logs       *logReader // nil: every body goes into the store

	restoreMu sync.Mutex // one Restore at a time

	mu       sync.RWMutex
	db       *store.DB
	applied  uint64
	entities map[ekey]*entity
	wakeups  wakeups
	failed   error // the storage failure that stopped the machine
	closed   bool

	snapMu sync.Mutex
	snaps  map[*Snapshot]struct{}

	commit       store.SortedCommit   // Apply's, under mu
	batchBytes   int                  // Apply's, under mu: the size of the last batch (maxBatchHint)
	reqFloor     int64                // Apply's, under mu: no request result is older
	reqFilter    *store.RequestFilter // Apply's, under mu: ids recorded since load (store/reqfilter.go)
	lockedStates *store.LockedStates  // Apply's, under mu: state records of locked messages (lockcache.go)
	subs         subscriptionIndex    // Apply's, under mu: a topic partition's subscriptions (fanout.go)
	// routes is what the leader's planner reads of subs, published
	// when they change (plan.go).
	routes atomic.Pointer[routeTable]
	plans  planCounts // Apply's, under mu

	// misuse counts pebble's reports of a single delete that met no
	// write or more than one (store/indexes.go, "Single deletes"); always 0 unless the
	// records' bookkeeping is broken.
	misuse atomic.Int64
}

const (
	dbDir      = "db"
	restoreTmp = "restore.tmp"   // a Restore in progress
	restoreNew = "restore.ready" // a complete restored store, not yet swapped in
)

// Open opens the machine whose store is in dir, creating it if needed, and
// reads back its applied index and entities.
func Open(dir string, opts Options) (*Machine, error) {
	if opts.CacheBytes <= 0 {
		opts.CacheBytes = DefaultCacheBytes
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("partition: open: %w", err)
	}
	if err := finishRestore(dir); err != nil {
		return nil, err
	}
	m := &Machine{
		dir:        dir,
		log:        opts.Logger,
		cacheBytes: opts.CacheBytes,
		replica:    opts.Replica,
		limits:     opts.Limits.withDefaults(),
		cache:      store.NewCache(opts.CacheBytes),
		snaps:      make(map[*Snapshot]struct{}),
	}
	if opts.Log != nil {
		m.logs = &logReader{read: opts.Log}
	}
	db, err := m.openDB(filepath.Join(dir, dbDir))
	if err != nil {
		m.cache.Unref()
		return nil, err
	}
	m.db = db
	if err := m.load(); err != nil {
		_ = db.Close()
		m.cache.Unref()
		return nil, err
	}
	return m, nil
}

// finishRestore completes a Restore that was interrupted after its store
// was complete, and removes the remains of one interrupted before.
func finishRestore(dir string) error {
	if err := os.RemoveAll(filepath.Join(dir, restoreTmp)); err != nil {
		return fmt.Errorf("partition: open: %w", err)
	}
	ready := filepath.Join(dir, restoreNew)
	if _, err := os.Stat(ready); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err := swapDir(dir, ready); err != nil {
		return fmt.Errorf("partition: open: finish restore: %w", err)
	}
	return nil
}

// swapDir replaces dir/db by from.
func swapDir(dir, from string) error {
	if err := os.RemoveAll(filepath.Join(dir, dbDir)); err != nil {
		return err
	}
	if err := os.Rename(from, filepath.Join(dir, dbDir)); err != nil {
		return err
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	return errors.Join(err, d.Close())
}

// openDB opens the store at path and checks (or, when empty, writes) its
// format version.
func (m *Machine) openDB(path string) (*store.DB, error) {
	return store.Open(path, m.storeOptions(), true)
}

// openEmpty opens a new store at path for a snapshot to load into.
func (m *Machine) openEmpty(path string) (*store.DB, error) {
	return store.Open(path, m.storeOptions(), false)
}

func (m *Machine) storeOptions() store.Options {
	return store.Options{Cache: m.cache, CacheBytes: m.cacheBytes, Logger: m.log, Misuse: &m.misuse}
}

// load reads the applied index and the entities from the store.
func (m *Machine) load() error {
	applied, err := store.ReadApplied(m.db)
	if err != nil {
		return err
	}
	entities := make(map[ekey]*entity)
	err = store.EachEntity(m.db, func(k ekey, p []byte) error {
		e, err := parseEntityRecord(k, p)
		if err != nil {
			return err
		}
		entities[k] = e
		return nil
	})
	if err != nil {
		return err
	}
	for _, e := range entities {
		if err := e.locks.Load(m.db); err != nil {
			return err
		}
		if err := e.sched.Load(m.db); err != nil {
			return err
		}
		if err := e.exp.Load(m.db); err != nil {
			return err
		}
		if err := e.slock.Load(m.db); err != nil {
			return err
		}
	}
	m.applied, m.entities = applied, entities
	if err := m.loadTopics(); err != nil {
		return err
	}
	m.subs = subscriptionIndex{}
	m.publishRoutes()
	m.reqFloor = math.MinInt64 // the first entry's pruning finds the oldest
	f, err := store.NewRequestFilter(m.db)
	if err != nil {
		return err
	}
	m.reqFilter = f
	m.lockedStates = store.NewLockedStates()
	return nil
}

// Close flushes the store, so that everything applied survives, and closes
// it. Open snapshots are released.
func (m *Machine) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil
	}
	m.closed = true
	m.wakeups.close()
	m.releaseSnapshots()
	defer m.cache.Unref()
	if m.db == nil { // a failed Restore closed it
		return nil
	}
	err := m.db.Flush()
	if err != nil {
		err = fmt.Errorf("partition: flush: %w", err)
	}
	if cerr := m.db.Close(); cerr != nil {
		err = errors.Join(err, fmt.Errorf("partition: close: %w", cerr))
	}
	m.db = nil
	return err
}

// usable returns why the machine cannot serve, or nil. Call with m.mu held.
func (m *Machine) usable() error {
	switch {
	case m.closed:
		return ErrClosed
	case m.failed != nil:
		return fmt.Errorf("partition: stopped after a storage failure: %w", m.failed)
	}
	return nil
}

// AppliedIndex returns the index of the last applied entry (durable or not:
// see the package comment).
func (m *Machine) AppliedIndex() uint64 {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.applied
}

// Apply applies entries in one store batch and returns, per entry, one
// Result per command of its Batch. Entries at or below AppliedIndex are
// skipped (nil results); indexes must increase but may have gaps (entries
// that are not commands). An entry with empty Data only advances the
// applied index. A returned error is a storage failure or an entry this
// version cannot apply: nothing of the call is applied, the machine refuses
// further work, and the caller stops the group.
//
// It runs in three stages, as CockroachDB's apply package does: stage
// every entry's effects into one batch (nothing is visible yet), commit
// the batch with the touched entities' records and the applied index in
// one write, then the side effects that read the committed store (the
// in-memory time indexes) and wake the waiting receivers.
func (m *Machine) Apply(entries []Entry) ([][]*partitionpb.Result, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.usable(); err != nil {
		return nil, err
	}
	a := m.newApplier()
	defer func() {
		m.batchBytes = min(batchHint(a.b.Size()), maxBatchHint)
		a.b.Close()
	}()
	results, applied, err := m.stage(a, entries)
	if err != nil {
		return nil, err
	}
	if applied == m.applied {
		return results, nil
	}
	if err := m.commitStaged(a, applied); err != nil {
		return nil, m.fail(err)
	}
	m.applied = applied
	if err := m.afterCommit(a); err != nil {
		return nil, m.fail(err)
	}
	if m.subs.changed {
		m.publishRoutes()
	}
	return results, nil
}

// maxBatchHint bounds the buffer an Apply's batch starts with.
//
// A batch grows by doubling, copying what it holds each time, from the
// pooled buffer pebble hands out (it keeps none above 1 MiB). An Apply of
// a few entries of 64 large messages writes megabytes, copied again at
// every doubling. So an Apply starts with a buffer the size of the last
// one's batch: applies of one group run alike, one after another. (New
// messages' state records, a topic's copies among them, go to a buffer
// the machine's SortedCommit keeps: store.Batch.PutNewState.)
const maxBatchHint = 16 << 20

// batchHint is the room the next Apply's batch starts with after one of
// size bytes: a quarter more. A batch of the same shape a little larger
// than the last (a larger applied index, a longer message id) would
// outgrow the exact size with its last write (PutApplied) and double,
// copying all of it (BenchmarkDrainSubscriptions shows the cost).
func batchHint(size int) int { return size + size/4 + 1024 }

// newApplier starts an Apply's batch over the machine's state.
func (m *Machine) newApplier() *applier {
	return &applier{
		lim:          m.limits,
		entities:     m.entities,
		b:            m.commit.NewBatch(m.db, m.batchBytes, m.lockedStates),
		dirty:        make(map[ekey]bool),
		locks:        make(map[ekey]bool),
		scheds:       make(map[ekey]bool),
		exps:         make(map[ekey]bool),
		woken:        make(map[wakeKey]bool),
		replica:      m.replica,
		reqFloor:     &m.reqFloor,
		reqFilter:    m.reqFilter,
		lockedStates: m.lockedStates,
		logs:         m.logs,
		subs:         &m.subs,
		plans:        &m.plans,
	}
}

// stage applies the entries above the applied index to a's batch and
// returns their results and the last index staged. An entry that fails
// stops the machine: nothing of the call is committed.
func (m *Machine) stage(a *applier, entries []Entry) ([][]*partitionpb.Result, uint64, error) {
	results := make([][]*partitionpb.Result, len(entries))
	applied := m.applied
	for i, e := range entries {
		if e.Index <= applied {
			continue
		}
		res, err := a.applyEntry(e)
		if err != nil {
			m.failed = fmt.Errorf("apply entry %d: %w", e.Index, err)
			m.log.Error("partition: apply failed; the machine stops", "index", e.Index, "err", err)
			return nil, 0, m.failed
		}
		results[i] = res
		applied = e.Index
	}
	return results, applied, nil
}

// commitStaged writes what the staged commands left in memory (lock
// grants, session records, the touched entities' records) and the applied
// index into the batch, and commits it in one write.
func (m *Machine) commitStaged(a *applier, applied uint64) error {
	if err := a.b.FlushGrants(); err != nil {
		return err
	}
	if err := a.b.FlushSessions(); err != nil {
		return err
	}
	for _, k := range sortedKeys(a.dirty) {
		var err error
		if e, ok := m.entities[k]; ok {
			err = a.b.PutEntity(k, e.record())
		} else {
			err = a.b.DeleteEntity(k)
		}
		if err != nil {
			return err
		}
	}
	if err := a.b.PutApplied(applied); err != nil {
		return err
	}
	return m.commit.Commit(m.db, &a.b)
}

// afterCommit brings the in-memory indexes of the entities the batch
// touched up to the committed store, and wakes the receivers waiting on
// what changed.
func (m *Machine) afterCommit(a *applier) error {
	for k := range a.locks {
		if e, ok := m.entities[k]; ok {
			e.locks.Stale = true // read when asked (NextLockExpiry)
		}
	}
	reload := func(keys map[ekey]bool, index func(*entity) *store.TimeIndex) error {
		for k := range keys {
			if e, ok := m.entities[k]; ok {
				if err := index(e).Load(m.db); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := reload(a.scheds, func(e *entity) *store.TimeIndex { return &e.sched }); err != nil {
		return err
	}
	if err := reload(a.exps, func(e *entity) *store.TimeIndex { return &e.exp }); err != nil {
		return err
	}
	if err := reload(a.slocks, func(e *entity) *store.TimeIndex { return &e.slock }); err != nil {
		return err
	}
	m.wakeups.wake(a.woken)
	return nil
}

// fail stops the machine after a storage failure.
func (m *Machine) fail(err error) error {
	m.failed = fmt.Errorf("partition: store: %w", err)
	m.log.Error("partition: storage failure; the machine stops", "err", err)
	return m.failed
}

func sortedKeys[V any](m map[ekey]V) []ekey {
	keys := make([]ekey, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b ekey) int {
		switch {
		case a.Less(b):
			return -1
		case b.Less(a):
			return 1
		}
		return 0
	})
	return keys
}

// Stats returns an entity partition's counters.
func (m *Machine) Stats(entityID uint64, partition uint32) (*partitionpb.StatsResponse, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if err := m.usable(); err != nil {
		return nil, err
	}
	e, ok := m.entities[ekey{ID: entityID, Part: partition}]
	if !ok {
		return nil, fmt.Errorf("%w: %d/%d", ErrEntityNotFound, entityID, partition)
	}
	return e.stats(), nil
}

// GroupStats returns the counters of the named entity partitions the
// group hosts, in the order named, or of every entity partition it hosts
// when refs is empty, in key order. Names it does not host are left out.
func (m *Machine) GroupStats(refs []*partitionpb.EntityPartitionRef) ([]*partitionpb.EntityPartitionStats, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if err := m.usable(); err != nil {
		return nil, err
	}
	one := func(k ekey, e *entity) *partitionpb.EntityPartitionStats {
		return &partitionpb.EntityPartitionStats{EntityId: k.ID, Partition: k.Part, Stats: e.stats()}
	}
	if len(refs) == 0 {
		out := make([]*partitionpb.EntityPartitionStats, 0, len(m.entities))
		for _, k := range sortedKeys(m.entities) {
			out = append(out, one(k, m.entities[k]))
		}
		return out, nil
	}
	out := make([]*partitionpb.EntityPartitionStats, 0, len(refs))
	for _, r := range refs {
		k := ekey{ID: r.GetEntityId(), Part: r.GetPartition()}
		if e, ok := m.entities[k]; ok {
			out = append(out, one(k, e))
		}
	}
	return out, nil
}

// HasEntity reports whether the group hosts the entity partition (false
// once the machine stopped).
func (m *Machine) HasEntity(entityID uint64, partition uint32) bool {
	m.mu.RLock()
	defer m.mu.RUnlock()
	_, ok := m.entities[ekey{ID: entityID, Part: partition}]
	return ok && m.usable() == nil
}

// Available reports whether the sub-queue holds an active, unlocked
// message (it may have expired: Lock drops those).
func (m *Machine) Available(entityID uint64, partition uint32, q partitionpb.SubQueue) bool {
	m.mu.RLock()
	defer m.mu.RUnlock()
	k := ekey{ID: entityID, Part: partition}
	e, ok := m.entities[k]
	if !ok || m.usable() != nil || !validSubQueue(q) {
		return false
	}
	if q == partitionpb.SubQueue_SUB_QUEUE_MAIN && e.freshLeft {
		return true
	}
	var scan store.AvailableScan // the zero scan: nothing indexed
	if !e.indexEmpty(q) {
		var err error
		if scan, err = store.ScanAvailable(m.db, k, q, e.availHead[q]); err != nil {
			m.log.Error("partition: available", "entity", k, "err", err)
			return false
		}
	}
	_, found, err := scan.Next()
	if err = scan.Close(err); err != nil {
		m.log.Error("partition: available", "entity", k, "err", err)
		return false
	}
	if found || q != partitionpb.SubQueue_SUB_QUEUE_MAIN {
		return found
	}
	found, err = m.freshAvailable(e)
	if err != nil {
		m.log.Error("partition: available", "entity", k, "err", err)
		return false
	}
	return found
}

// freshScan bounds the fresh messages Available looks at: past that many
// scheduled ones it answers yes, and the Lock that finds none moves fresh
// past them.
const freshScan = 64

// freshAvailable reports whether the main queue has a fresh message that is
// not scheduled (entity.fresh).
func (m *Machine) freshAvailable(e *entity) (bool, error) {
	c, err := store.NewCursor(m.db, e.key, partitionpb.SubQueue_SUB_QUEUE_MAIN, e.fresh, false)
	if err != nil {
		return false, err
	}
	n := 0
	for valid := c.First(); valid; valid = c.Next() {
		if n++; n > freshScan {
			return true, c.Close(nil)
		}
		msg, err := c.Message()
		if err != nil {
			return false, c.Close(err)
		}
		if store.SlotOf(msg).Available() {
			return true, c.Close(nil)
		}
	}
	return false, c.Close(c.Error())
}

// Changed returns a channel that is closed after the next Apply that made a
// message of sub-queue q of entity partition id/part available (an
// enqueue, an abandon, an expired lock, ...), or upserted or deleted the
// entity, and when the machine closes (wake.go). Call it again for the
// next change.
func (m *Machine) Changed(id uint64, part uint32, q partitionpb.SubQueue) <-chan struct{} {
	return m.wakeups.channel(wakeKey{ekey{ID: id, Part: part}, q})
}

func validSubQueue(q partitionpb.SubQueue) bool {
	return q == partitionpb.SubQueue_SUB_QUEUE_MAIN || q == partitionpb.SubQueue_SUB_QUEUE_DEAD_LETTER
}

// lockToken is the token of a lock (partitionpb.LockToken).
func lockToken(seq uint64, seed []byte) []byte { return partitionpb.LockToken(seq, seed) }

// Bounds of one Peek.
const (
	MaxPeekCount = 1000
	// MaxPeekBytes: a message that would take the answer's messages past
	// it ends the answer, unless it is the first (PeekBounds.MaxBytes may
	// ask for less).
	MaxPeekBytes = 8 << 20
)

// Peek returns the messages of a sub-queue with sequence number >= from,
// in order, at most max (capped at MaxPeekCount, and MaxPeekBytes):
// active (locked or not), deferred and scheduled ones, without their lock
// tokens. Messages expired by nowMs, the reader's clock, are left out
// (ExpireMessages will end them). It locks nothing and changes nothing.
func (m *Machine) Peek(entityID uint64, partition uint32, q partitionpb.SubQueue, from uint64, max uint32, nowMs int64) ([]*partitionpb.Message, error) {
	return m.peek(entityID, partition, q, from, max, nowMs, "", PeekBounds{})
}

func (m *Machine) peek(entityID uint64, partition uint32, q partitionpb.SubQueue, from uint64, max uint32, nowMs int64, sessionID string, b PeekBounds) ([]*partitionpb.Message, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if err := m.usable(); err != nil {
		return nil, err
	}
	k := ekey{ID: entityID, Part: partition}
	if _, ok := m.entities[k]; !ok {
		return nil, fmt.Errorf("%w: %d/%d", ErrEntityNotFound, entityID, partition)
	}
	if err := checkSubQueue(q); err != nil {
		return nil, err
	}
	page := newPeekPage(max, b)
	if page.want == 0 {
		return nil, nil
	}
	c, err := store.NewCursor(m.db, k, q, from, false)
	if err != nil {
		return nil, err
	}
	for valid := c.First(); valid && !page.full(); valid = c.Next() {
		msg, err := c.Message()
		if err != nil {
			return nil, c.Close(err)
		}
		if q == partitionpb.SubQueue_SUB_QUEUE_MAIN && msg.State != partitionpb.MessageState_MESSAGE_STATE_SCHEDULED && expired(msg, nowMs) ||
			!sessionOf(msg, sessionID) {
			continue
		}
		more, err := page.add(m.db, m.logs, k, msg)
		if err != nil {
			return nil, c.Close(err)
		}
		if !more {
			break
		}
	}
	if err := c.Close(c.Error()); err != nil {
		return nil, err
	}
	return page.out, nil
}
