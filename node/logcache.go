package node

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"
)

// logCache keeps the newest entries of a group's log in memory, so that a
// leader replicates what it just wrote, and the state machine reads the
// bodies it just applied, without reading the log back. Unlike
// raft.LogCache, which holds a number of entries whatever their size, it
// holds at most maxBytes of entry data: entries range from a few hundred
// bytes to a staged chunk of megabytes, and a count sized for the one is
// gigabytes for the other.
//
// Invariant: entries holds consecutive indexes, oldest first, and their
// data adds up to bytes <= maxBytes. An entry that does not follow the
// newest, or that is larger than a quarter of the budget, empties the
// cache first (and the large one is not kept), so the run stays
// consecutive and GetLog is an index computation.
type logCache struct {
	store      raft.LogStore
	maxBytes   int
	maxEntries int

	mu      sync.RWMutex
	entries []*raft.Log
	bytes   int
	sizes   entrySizes // of the newest entries stored (logbytes.go)

	// appended counts the bytes of entry data stored since the owner
	// last took them off (logbytes.go).
	appended atomic.Int64
}

var (
	_ raft.LogStore          = (*logCache)(nil)
	_ raft.MonotonicLogStore = (*logCache)(nil)
)

func newLogCache(store raft.LogStore, maxBytes, maxEntries int) *logCache {
	return &logCache{store: store, maxBytes: maxBytes, maxEntries: maxEntries}
}

// IsMonotonic implements raft.MonotonicLogStore as the store does.
func (c *logCache) IsMonotonic() bool {
	m, ok := c.store.(raft.MonotonicLogStore)
	return ok && m.IsMonotonic()
}

// GetLog implements raft.LogStore.
func (c *logCache) GetLog(index uint64, log *raft.Log) error {
	c.mu.RLock()
	if n := len(c.entries); n > 0 {
		if first := c.entries[0].Index; index >= first && index-first < uint64(n) {
			*log = *c.entries[index-first]
			c.mu.RUnlock()
			return nil
		}
	}
	c.mu.RUnlock()
	return c.store.GetLog(index, log)
}

// StoreLog implements raft.LogStore.
func (c *logCache) StoreLog(log *raft.Log) error { return c.StoreLogs([]*raft.Log{log}) }

// StoreLogs implements raft.LogStore: the store first, then the cache.
func (c *logCache) StoreLogs(logs []*raft.Log) error {
	if err := c.store.StoreLogs(logs); err != nil {
		return fmt.Errorf("unable to store logs within log store, err: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, l := range logs {
		c.add(l)
		c.sizes.add(l.Index, len(l.Data))
		n += len(l.Data)
	}
	c.appended.Add(int64(n))
	return nil
}

// trailing returns how many of the newest entries stored, at most max,
// hold at most bytes together.
func (c *logCache) trailing(bytes int64, max uint64) uint64 {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.sizes.trailing(bytes, max)
}

func (c *logCache) add(l *raft.Log) {
	if n := len(c.entries); n > 0 && c.entries[n-1].Index+1 != l.Index {
		c.clear()
	}
	if len(l.Data) > c.maxBytes/4 {
		c.clear()
		return
	}
	c.entries = append(c.entries, l)
	c.bytes += len(l.Data)
	drop := 0
	for c.bytes > c.maxBytes || len(c.entries)-drop > c.maxEntries {
		c.bytes -= len(c.entries[drop].Data)
		c.entries[drop] = nil
		drop++
	}
	c.entries = c.entries[drop:]
}

func (c *logCache) clear() {
	clear(c.entries)
	c.entries, c.bytes = c.entries[:0], 0
}

// FirstIndex implements raft.LogStore.
func (c *logCache) FirstIndex() (uint64, error) { return c.store.FirstIndex() }

// LastIndex implements raft.LogStore.
func (c *logCache) LastIndex() (uint64, error) { return c.store.LastIndex() }

// DeleteRange implements raft.LogStore. The cache is emptied first, so
// that no reader finds an entry the store no longer holds.
func (c *logCache) DeleteRange(min, max uint64) error {
	c.mu.Lock()
	c.clear()
	c.mu.Unlock()
	return c.store.DeleteRange(min, max)
}

// cached returns how many entries and bytes of data the cache holds.
func (c *logCache) cached() (entries, bytes int) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.entries), c.bytes
}
