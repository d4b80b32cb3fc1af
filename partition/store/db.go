package store

import (
	"context"
	"io"

	"github.com/cockroachdb/pebble/v2"
)

// DB is a partition group's store on disk: a pebble db opened with the
// store's options (Open). It is a Reader of the committed store.
type DB struct{ pb *pebble.DB }

// Get, NewIter and NewIterWithContext read the committed store (Reader).
func (d *DB) Get(key []byte) ([]byte, io.Closer, error) { return d.pb.Get(key) }

func (d *DB) NewIter(o *pebble.IterOptions) (*pebble.Iterator, error) { return d.pb.NewIter(o) }

func (d *DB) NewIterWithContext(ctx context.Context, o *pebble.IterOptions) (*pebble.Iterator, error) {
	return d.pb.NewIterWithContext(ctx, o)
}

// Flush writes the memtables to disk: the store has no write-ahead log
// (the Raft log is it), so what must survive a crash is flushed.
func (d *DB) Flush() error { return d.pb.Flush() }

// Close closes the db (after a Flush, if what it holds must survive).
func (d *DB) Close() error { return d.pb.Close() }

// NewSnapshot returns a point-in-time view of the committed store, for
// WriteSnapshot; Close it when done.
func (d *DB) NewSnapshot() *Snapshot { return &Snapshot{s: d.pb.NewSnapshot()} }

// Pebble is the pebble db itself, for tests that break the store on
// purpose or read pebble's metrics.
func (d *DB) Pebble() *pebble.DB { return d.pb }

// Snapshot is a point-in-time view of the store (DB.NewSnapshot).
type Snapshot struct{ s *pebble.Snapshot }

// Close releases the view.
func (s *Snapshot) Close() error { return s.s.Close() }

// Cache is the block cache the stores of a machine share, one after the
// other (a Restore opens a new store with it).
type Cache struct{ c *pebble.Cache }

// NewCache makes a block cache of size bytes.
func NewCache(size int64) *Cache { return &Cache{c: pebble.NewCache(size)} }

// Unref releases the cache's reference; the stores opened with it hold
// their own.
func (c *Cache) Unref() { c.c.Unref() }

var _ Reader = (*DB)(nil)
