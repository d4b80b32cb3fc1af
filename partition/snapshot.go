package partition

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	"github.com/quorumbus/quorumbus/partition/store"
)

// Snapshot is a point-in-time view of the store, taken after a flush.
type Snapshot struct {
	m       *Machine
	applied uint64

	mu   sync.Mutex // held while streaming
	snap *store.Snapshot
}

// Snapshot moves the bodies still in the Raft log into the store
// (logbodies.go) and flushes it, so that the state it captures is durable
// and names no log entry before Raft may truncate its log, and returns a
// view of it. WriteTo may run concurrently with Apply; Release it when
// done.
func (m *Machine) Snapshot() (*Snapshot, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.usable(); err != nil {
		return nil, err
	}
	if err := m.inlineBodies(); err != nil {
		return nil, m.fail(fmt.Errorf("move bodies into the store: %w", err))
	}
	if err := m.db.Flush(); err != nil {
		return nil, m.fail(fmt.Errorf("flush: %w", err))
	}
	s := &Snapshot{m: m, applied: m.applied, snap: m.db.NewSnapshot()}
	m.snapMu.Lock()
	m.snaps[s] = struct{}{}
	m.snapMu.Unlock()
	return s, nil
}

// AppliedIndex returns the applied index the snapshot captures.
func (s *Snapshot) AppliedIndex() uint64 { return s.applied }

// Release releases the view. It may be called more than once.
func (s *Snapshot) Release() {
	s.mu.Lock()
	if s.snap != nil {
		if err := s.snap.Close(); err != nil {
			s.m.log.Error("partition: release snapshot", "err", err)
		}
		s.snap = nil
	}
	s.mu.Unlock()
	s.m.snapMu.Lock()
	delete(s.m.snaps, s)
	s.m.snapMu.Unlock()
}

// releaseSnapshots releases every open snapshot; call it with m.mu held,
// before the store closes.
func (m *Machine) releaseSnapshots() {
	m.snapMu.Lock()
	snaps := make([]*Snapshot, 0, len(m.snaps))
	for s := range m.snaps {
		snaps = append(snaps, s)
	}
	m.snapMu.Unlock()
	for _, s := range snaps {
		s.Release()
	}
}

// WriteTo streams the snapshot to w. It verifies every stored record on
// the way and fails on a mismatch rather than pass corruption on.
func (s *Snapshot) WriteTo(w io.Writer) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.snap == nil {
		return 0, fmt.Errorf("%w: snapshot released", ErrClosed)
	}
	return store.WriteSnapshot(s.snap, s.applied, w)
}

// Restore replaces all state with a snapshot's. It loads the stream into a
// new store beside the current one, in bounded batches, verifying every
// checksum, and swaps it in only when it is complete and flushed; until
// then, and if the stream is bad, the current state stays. A crash during
// the swap is finished by the next Open.
func (m *Machine) Restore(r io.Reader) error {
	m.restoreMu.Lock()
	defer m.restoreMu.Unlock()
	m.mu.RLock()
	err := m.usable()
	m.mu.RUnlock()
	if err != nil {
		return err
	}
	tmp := filepath.Join(m.dir, restoreTmp)
	if err := os.RemoveAll(tmp); err != nil {
		return fmt.Errorf("partition: restore: %w", err)
	}
	if err := m.loadSnapshot(tmp, r); err != nil {
		_ = os.RemoveAll(tmp)
		return err
	}
	ready := filepath.Join(m.dir, restoreNew)
	if err := os.Rename(tmp, ready); err != nil {
		_ = os.RemoveAll(tmp)
		return fmt.Errorf("partition: restore: %w", err)
	}
	if err := syncDir(m.dir); err != nil {
		return fmt.Errorf("partition: restore: %w", err)
	}

	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.usable(); err != nil {
		return err
	}
	m.releaseSnapshots()
	err = m.db.Close()
	m.db = nil
	if err != nil {
		return m.fail(fmt.Errorf("restore: close: %w", err))
	}
	if err := swapDir(m.dir, ready); err != nil {
		return m.fail(fmt.Errorf("restore: %w", err))
	}
	db, err := m.openDB(filepath.Join(m.dir, dbDir))
	if err != nil {
		return m.fail(fmt.Errorf("restore: %w", err))
	}
	m.db = db
	if err := m.load(); err != nil {
		return m.fail(fmt.Errorf("restore: %w", err))
	}
	m.wakeups.wakeAll() // anything may have changed
	return nil
}

// loadSnapshot writes the stream into a new store at path and flushes it.
func (m *Machine) loadSnapshot(path string, r io.Reader) error {
	return store.LoadSnapshot(func() (*store.DB, error) { return m.openEmpty(path) }, r)
}
