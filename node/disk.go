package node

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"go.etcd.io/bbolt"
)

// The node's disk: the lock that keeps a second process out of its data
// directory, bounded waits on the bolt files' locks, and free space.

// lockFileName is the file in DataDir that a running node holds an
// exclusive flock on. The kernel releases it when the process dies, so a
// crashed node leaves nothing to clean up.
const lockFileName = "LOCK"

// boltOpenTimeout bounds how long opening a bolt file waits for its lock.
// bbolt's default waits forever; the only holder can be another process
// on the same directory (which the data directory's lock refuses first)
// or a leak in this one, and either must fail loudly, not hang.
const boltOpenTimeout = 5 * time.Second

func boltOptions() *bbolt.Options {
	o := *bbolt.DefaultOptions
	o.Timeout = boltOpenTimeout
	return &o
}

// lockDataDir takes the exclusive lock of dir for this node. Another
// process, or another Node in this process, holding it makes it fail.
func lockDataDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, lockFileName), os.O_CREATE|os.O_RDWR, 0o640)
	if err != nil {
		return nil, fmt.Errorf("node: lock data directory: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("node: data directory %s is in use by another process", dir)
		}
		return nil, fmt.Errorf("node: lock data directory %s: %w", dir, err)
	}
	return f, nil
}

// waitUnlocked returns once nobody holds a flock on path (or it does not
// exist), or an error after boltOpenTimeout. raft-wal opens its metadata
// bolt file without a timeout and takes no options for it, so the group
// looks first: bbolt's flock conflicts with any other open of the file,
// in this process too. A holder that takes the lock right after the look
// still blocks the open; the data directory's lock keeps other processes
// out, and the group's open paths release what they took, so nothing
// should.
func waitUnlocked(path string) error {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	deadline := time.Now().Add(boltOpenTimeout)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB)
		if err == nil {
			return syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return fmt.Errorf("lock %s: %w", path, err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s is still locked after %v: another open of it did not close", path, boltOpenTimeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// freeBytes is the space left for unprivileged writers on the file
// system that holds dir.
func freeBytes(dir string) (uint64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, fmt.Errorf("statfs %s: %w", dir, err)
	}
	return st.Bavail * uint64(st.Bsize), nil
}

// checkSpace returns ErrNoSpace when the data directory's file system has
// no more than the reserve left. Requests that add messages are refused
// then, while the reserve still takes the settles, locks and expiries
// that free space.
func (n *Node) checkSpace() error {
	if n.cfg.DiskReserveBytes < 0 {
		return nil
	}
	free, err := n.free()
	if err != nil {
		// Not knowing is no reason to refuse: the writes themselves
		// will fail if the disk is full.
		return nil
	}
	if free <= uint64(n.cfg.DiskReserveBytes) {
		return fmt.Errorf("%w: %d bytes free in %s, at or below the reserve of %d", ErrNoSpace, free, n.cfg.DataDir, n.cfg.DiskReserveBytes)
	}
	return nil
}

func (n *Node) free() (uint64, error) {
	if n.cfg.host.diskFull() {
		return 0, nil
	}
	return freeBytes(n.cfg.DataDir)
}

// minOpenBytes is the free space a group needs to open. Opening writes:
// pebble a new manifest and write-ahead log, raft-wal maybe a new
// segment. pebble panics when its manifest cannot be written, which would
// take the whole process down, so a group on a disk fuller than this
// waits (and the node retries) rather than tries.
func (n *Node) minOpenBytes() uint64 { return 4<<20 + uint64(n.cfg.WALSegmentBytes) }

func (n *Node) checkOpenSpace() error {
	free, err := n.free()
	if err != nil {
		return nil
	}
	if free < n.minOpenBytes() {
		// No byte count of what is free: the node logs this error
		// again only when its text changes.
		return fmt.Errorf("%w: a group needs %d bytes free in %s to open", ErrNoSpace, n.minOpenBytes(), n.cfg.DataDir)
	}
	return nil
}

// errFull is what a write on a full disk fails with.
func errFull(op, path string) error {
	return &os.PathError{Op: op, Path: path, Err: syscall.ENOSPC}
}
