package node

import "time"

// host is what a node reads of the machine it runs on, apart from its
// files: the wall clock, the kernel's boot id, whether the disk is full;
// and what a crash of the machine would take from a group's log. A node
// runs on realHost; only the package's tests (export_test.go) and the
// chaos suite's build (chaos.go, build tag chaostest) give it a simulated
// one, through Config.host.
type host interface {
	// now is the wall clock (wallclock.go).
	now() time.Time
	// bootID is the kernel's boot id, "" if it is not known: a replica
	// that wrote its log ahead of fsync tells a restart from a reboot by
	// it (withhold.go).
	bootID() string
	// diskFull makes the disk look full: the free-space checks find no
	// space and a log's Create fails with ENOSPC.
	diskFull() bool
	// tracksUnsynced makes a log remember what it wrote since each
	// file's last fsync, so that a crash of the machine can lose it
	// (syncFS.abandon), and lost is told how many writes such a crash
	// took away.
	tracksUnsynced() bool
	lost(writes int64)
	// awaitSync is where a log's syncer waits before each fsync pass,
	// as on a disk whose fsync hangs; it returns false if stop closed
	// first.
	awaitSync(l *aheadLog, stop <-chan struct{}) bool
}

// realHost is the machine the process runs on.
type realHost struct{}

func (realHost) now() time.Time                            { return time.Now() }
func (realHost) bootID() string                            { return readBootID() }
func (realHost) diskFull() bool                            { return false }
func (realHost) tracksUnsynced() bool                      { return false }
func (realHost) lost(int64)                                {}
func (realHost) awaitSync(*aheadLog, <-chan struct{}) bool { return true }
