package store

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/sstable"
)

// Reader is what the store's reads take: the db, a Batch's ReadView, a
// snapshot. (pebble's; named here so that the rules name no engine.)
type Reader = pebble.Reader

// Batch is one Apply's writes to the store, readable as they accumulate
// (a pebble indexed batch), with what the store keeps in memory until the
// Apply commits: the lock grants it touched (grants.go), and the cache of
// locked messages' state records it keeps for the machine (lockcache.go).
//
// Everything in it is reached through its methods: the rules build no
// key and walk no iterator.
//
// The state records of messages added in the Apply (PutNewState) go into
// a batch without an index (unindexed) until something reads or rewrites
// a state record: indexing a record cost as much as encoding it, and a
// send to a topic adds one per copy that nothing reads before the commit
// (Lock finds new messages through the state records, after settling).
// Invariant: unindexed holds only records written after every write of pb
// to the same keys, so committing pb's writes and then unindexed's leaves
// what writing them in order would. Every read of state records, every
// other write of one, every range deletion and ReadView therefore first
// move unindexed into pb (settle).
type Batch struct {
	pb        *pebble.Batch
	unindexed *pebble.Batch // new messages' state records; nil until the first
	db        *pebble.DB    // pb's, for unindexed
	borrowed  bool          // unindexed is a SortedCommit's, reused: not closed with b

	grants       map[grantKey]*grant // lock grants read or changed
	lastGrantKey grantKey            // the key and grant that grant() returned
	lastGrant    *grant              // last, while in grants (nil: none)

	sessionRecs  map[sessionRef]*Session // session records read or changed (sessions.go)
	sessionDirty map[sessionRef]bool     // those changed since the last flush

	locked   *LockedStates // the machine's: state records of locked messages (lockcache.go)
	keyBuf   []byte        // seqKey's buffer
	recBuf   []byte        // PutLockedState's buffer
	lastTail []byte        // PutNewState's last record after its sequence number (PutNewCopy)
	haveTail bool          // lastTail is this batch's
}

// NewBatch starts a batch of db's, with room for size bytes, that keeps
// the state records of the messages it locks in locked (nil: none kept).
// It is a value, to be kept in the caller's struct (an Apply's applier)
// and used through a pointer to it: one allocation fewer per Apply.
// (SortedCommit.NewBatch starts one that reuses the commit's buffers.)
func NewBatch(db *DB, size int, locked *LockedStates) Batch {
	return Batch{pb: db.pb.NewIndexedBatchWithSize(size), db: db.pb, locked: locked}
}

// ReadView is the batch as a reader: the store as the batch's writes
// leave it (for reads that take any reader, such as ReadBlob).
func (b *Batch) ReadView() (Reader, error) {
	if err := b.settle(); err != nil {
		return nil, err
	}
	return b.pb, nil
}

// settle moves the new messages' state records into the indexed batch,
// where reads see them (the invariant on Batch).
func (b *Batch) settle() error {
	if b.unindexed == nil || b.unindexed.Empty() {
		return nil
	}
	if err := b.pb.Apply(b.unindexed, nil); err != nil {
		return fmt.Errorf("store: settle the new state records: %w", err)
	}
	b.unindexed.Reset()
	return nil
}

// Size is the size of the batch's writes, in bytes, the new messages'
// state records apart.
func (b *Batch) Size() int { return len(b.pb.Repr()) }

// Close releases the batch (committed or not).
func (b *Batch) Close() error {
	if b.unindexed != nil {
		if b.borrowed {
			b.unindexed.Reset()
		} else {
			b.unindexed.Close()
		}
	}
	return b.pb.Close()
}

// PutApplied writes the applied Raft index.
func (b *Batch) PutApplied(index uint64) error {
	return b.pb.Set(KeyApplied, Seal(KeyApplied, binary.BigEndian.AppendUint64(nil, index)), nil)
}

// ReadApplied reads the applied Raft index (0 in a new store).
func ReadApplied(r pebble.Reader) (uint64, error) {
	p, found, err := Get(r, KeyApplied)
	if err != nil || !found {
		return 0, err
	}
	if len(p) != 8 {
		return 0, fmt.Errorf("%w: applied index of %d bytes", ErrCorrupt, len(p))
	}
	return binary.BigEndian.Uint64(p), nil
}

// DeleteEntityData deletes everything entity partition k holds, in one
// range deletion (forgetting what the batch held of it: lock grants,
// sessions, the cache of locked states), but, when shared is true (a topic partition), the blobs
// its messages' copies share and their counts (sharedblobs in partition):
// the subscriptions' copies may still name them.
func (b *Batch) DeleteEntityData(k EntityKey, shared bool) error {
	if err := b.settle(); err != nil {
		return err
	}
	b.dropGrants(k)
	b.dropSessions(k)
	b.forgetLocked()
	p := DataPrefix(k)
	if !shared {
		return b.pb.DeleteRange(p, PrefixEnd(p), nil)
	}
	for _, r := range [][2][]byte{
		{p, KindPrefix(k, KindBlob)},
		{KindPrefix(k, KindBlob+1), KindPrefix(k, KindBlobRefs)},
		{KindPrefix(k, KindBlobRefs+1), PrefixEnd(p)},
	} {
		if err := b.pb.DeleteRange(r[0], r[1], nil); err != nil {
			return err
		}
	}
	return nil
}

// CheckFormat checks the store's format version, upgrading the one
// before (FormatLockEntries), or writes it into an empty store.
func CheckFormat(d *DB) error {
	db := d.pb
	p, found, err := Get(db, KeyFormat)
	if err != nil {
		return err
	}
	if found {
		if len(p) == 8 && binary.BigEndian.Uint64(p) == FormatLockEntries {
			return upgradeLockIndex(db)
		}
		if len(p) != 8 || binary.BigEndian.Uint64(p) != Format {
			return fmt.Errorf("%w: store format %x, want %d", ErrCorrupt, p, Format)
		}
		return nil
	}
	it, err := db.NewIter(nil)
	if err != nil {
		return fmt.Errorf("partition: iterator: %w", err)
	}
	empty := !it.First()
	if err := CloseIter(it, it.Error()); err != nil {
		return err
	}
	if !empty {
		return fmt.Errorf("%w: store without format version", ErrCorrupt)
	}
	v := Seal(KeyFormat, binary.BigEndian.AppendUint64(nil, Format))
	if err := db.Set(KeyFormat, v, pebble.NoSync); err != nil {
		return fmt.Errorf("partition: write format: %w", err)
	}
	return nil
}

// Options are what a store is opened with.
type Options struct {
	Cache      *Cache // the block cache, shared by the stores a machine opens in turn
	CacheBytes int64  // its size, which sizes the memtables too
	Logger     *slog.Logger
	// Misuse counts pebble's reports of a single delete that met no
	// write or more than one (indexes.go, "Single deletes").
	Misuse *atomic.Int64
}

// Open opens (creating) the store at path. With check, it checks the
// format version (CheckFormat: an empty store gets the current one, the
// one before is upgraded); a store a snapshot is about to be loaded into
// is opened without (LoadSnapshot checks it once loaded).
func Open(path string, o Options, check bool) (*DB, error) {
	pb, err := pebble.Open(path, pebbleOptions(o.Cache.c, o.CacheBytes, o.Logger, o.Misuse))
	if err != nil {
		return nil, fmt.Errorf("partition: open store %s: %w", path, err)
	}
	db := &DB{pb: pb}
	if !check {
		return db, nil
	}
	if err := CheckFormat(db); err != nil {
		_ = db.Close()
		return nil, err
	}
	return db, nil
}

// pebbleOptions are the store's options: no WAL, because the Raft log is
// the write-ahead log (Apply commits with NoSync and Snapshot flushes), and
// memory bounded by the shared block cache plus at most two memtables.
func pebbleOptions(cache *pebble.Cache, cacheBytes int64, log *slog.Logger, misuse *atomic.Int64) *pebble.Options {
	// Memtables as large as the cache (4 to 64 MiB): a queue's messages
	// mostly die in the memtable they were written to when consumers keep
	// up, and every flush costs compaction work per key, so smaller
	// memtables cost sends and receives alike (measured on the dev
	// cluster: see the commit that introduced it).
	memtable := uint64(cacheBytes)
	memtable = max(memtable, 4<<20)
	memtable = min(memtable, 64<<20)
	opts := &pebble.Options{
		Cache:                       cache,
		DisableWAL:                  true,
		MemTableSize:                memtable,
		MemTableStopWritesThreshold: 2,
		// Pinned, so that a pebble upgrade does not move the on-disk format
		// by itself.
		FormatMajorVersion: pebble.FormatValueSeparation,
		Logger:             pebbleLogger{log},
	}
	// A write stall holds up Apply, and with it the group's whole Raft
	// pipeline: worth a line in the log.
	opts.EventListener = &pebble.EventListener{
		WriteStallBegin: func(info pebble.WriteStallBeginInfo) {
			log.Warn("partition: store write stall", "reason", info.Reason)
		},
		WriteStallEnd: func() { log.Info("partition: store write stall ended") },
		// A single delete that met no write or two (indexes.go) means the
		// records' bookkeeping broke: a deleted record may come back.
		PossibleAPIMisuse: func(info pebble.PossibleAPIMisuseInfo) {
			misuse.Add(1)
			log.Error("partition: store misuse", "what", info.String())
		},
	}
	// Fewer, larger compactions of the small keys that stay in the tables
	// once bodies are separated: 16 MiB tables instead of 2 MiB ones, and
	// level 0 compacted at 8 sublevels instead of 4. Sends apply faster
	// for it, with far fewer compactions, and receives do not lose (the
	// commit that introduced it has the measurements): Lock reads in one
	// forward pass, so a deeper level 0 costs reads little.
	opts.L0CompactionThreshold = 8
	opts.L0CompactionFileThreshold = 2000
	for i := range opts.TargetFileSizes {
		opts.TargetFileSizes[i] = 16 << 20
	}
	// Message bodies go to blob files when a memtable is flushed, and
	// compactions then move only keys and small records. Without it,
	// compactions rewrite every body several times over as a backlog
	// grows, which costs disk writes and a large share of the CPU (the
	// commit that introduced it has the measurements). A queue drains its
	// oldest messages first, so blob files mostly die whole; the garbage
	// ratio bounds the space the survivors (deferred or dead-lettered
	// messages) keep alive.
	opts.Experimental.ValueSeparationPolicy = func() pebble.ValueSeparationPolicy {
		return pebble.ValueSeparationPolicy{
			Enabled:               true,
			MinimumSize:           512,
			MaxBlobReferenceDepth: 64,
			RewriteMinimumAge:     300e9, // five minutes, as nanoseconds: partition keeps off package time
			TargetGarbageRatio:    0.5,
		}
	}
	// Compressing blocks of message bodies costs CPU for little gain:
	// bodies are often compressed or encrypted already.
	for i := range opts.Levels {
		opts.Levels[i].Compression = func() *sstable.CompressionProfile { return sstable.NoCompression }
	}
	return opts
}

// pebbleLogger sends pebble's log lines to slog.
type pebbleLogger struct{ log *slog.Logger }

func (l pebbleLogger) Infof(format string, args ...any) {
	l.log.Debug(fmt.Sprintf(format, args...), "component", "pebble")
}

func (l pebbleLogger) Errorf(format string, args ...any) {
	l.log.Error(fmt.Sprintf(format, args...), "component", "pebble")
}

// Fatalf reports an invariant pebble found broken. pebble expects it not to
// return.
func (l pebbleLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	l.log.Log(context.Background(), slog.LevelError+4, msg, "component", "pebble")
	panic("pebble: " + msg)
}
