package node

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	walfs "github.com/hashicorp/raft-wal/fs"
	"github.com/hashicorp/raft-wal/metadb"
	"github.com/hashicorp/raft-wal/types"
)

// The file system under a group's raft-wal log: fsyncs it can defer
// (aheadlog.go), and a metadata store that waits for them.

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

	// host is the machine the log is on (host.go): a simulated one
	// can look full to Create, and can have each file remember what was
	// written to it since its last fsync, for a crash (abandon) to lose.
	host host

	// opening is set while raft-wal opens the log: every file it opens
	// is recorded in opened, for the caller to close if the open fails,
	// since raft-wal leaves them open then.
	opening bool
	opened  []io.Closer

	// createErr is why the last Create failed (nil: it did not): raft-wal
	// logs why it could not rotate and then reports only that its tail
	// is sealed.
	createErr atomic.Pointer[error]
}

func newSyncFS(host host) *syncFS {
	return &syncFS{FS: walfs.New(), dirty: make(map[*syncFile]struct{}), host: host}
}

// Create creates a segment file. raft-wal's Create leaves the file behind
// when preallocating it fails (on a full disk), and a later Create of the
// same segment, when the log is reopened, would then fail for good on the
// file that exists: so a failed Create removes the file it made.
func (s *syncFS) Create(dir, name string, size uint64) (types.WritableFile, error) {
	if s.host.diskFull() {
		err := errFull("create", filepath.Join(dir, name))
		s.createErr.Store(&err)
		return nil, err
	}
	f, err := s.FS.Create(dir, name, size)
	if err != nil {
		if !errors.Is(err, os.ErrExist) {
			os.Remove(filepath.Join(dir, name))
		}
		s.createErr.Store(&err)
		return nil, err
	}
	s.createErr.Store(nil)
	sf := &syncFile{WritableFile: f, fs: s}
	s.record(sf)
	return sf, nil
}

func (s *syncFS) OpenWriter(dir, name string) (types.WritableFile, error) {
	f, err := s.FS.OpenWriter(dir, name)
	if err != nil {
		return nil, err
	}
	sf := &syncFile{WritableFile: f, fs: s}
	s.record(sf)
	return sf, nil
}

func (s *syncFS) OpenReader(dir, name string) (types.ReadableFile, error) {
	f, err := s.FS.OpenReader(dir, name)
	if err != nil {
		return nil, err
	}
	s.record(f)
	return f, nil
}

func (s *syncFS) record(f io.Closer) {
	s.mu.Lock()
	if s.opening {
		s.opened = append(s.opened, f)
	}
	s.mu.Unlock()
}

// endOpen returns the files opened while opening was set, and stops
// recording them.
func (s *syncFS) endOpen() []io.Closer {
	s.mu.Lock()
	defer s.mu.Unlock()
	files := s.opened
	s.opening, s.opened = false, nil
	return files
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
// into the zeroed space it preallocated; the host must track unsynced
// writes), and the host is told how many writes were lost.
func (s *syncFS) abandon(lose bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var lost int64
	defer func() {
		if lost > 0 {
			s.host.lost(lost)
		}
	}()
	for f := range s.dirty {
		if !lose {
			delete(s.dirty, f)
			continue
		}
		for _, r := range f.unsynced {
			if _, err := f.WritableFile.WriteAt(make([]byte, r[1]), r[0]); err != nil {
				return err
			}
			lost++
		}
		f.unsynced = nil
		delete(s.dirty, f)
	}
	return nil
}

type syncFile struct {
	types.WritableFile
	fs *syncFS

	unsynced [][2]int64 // offset and length of writes since the last fsync (host.tracksUnsynced only)
}

func (f *syncFile) WriteAt(p []byte, off int64) (int, error) {
	if f.fs.host.tracksUnsynced() {
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

// sync fsyncs the file and forgets the writes it made durable
// (host.tracksUnsynced).
func (f *syncFile) sync() error {
	if !f.fs.host.tracksUnsynced() {
		return f.WritableFile.Sync()
	}
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
