//go:build chaostest

package node

import (
	"sync/atomic"
	"time"
)

// Hooks for the chaos suite (tests/jepsen), compiled only into a binary
// built with -tags chaostest: the suite's processes need faults that a
// real machine would cause and a process cannot cause to itself. A
// production build has none of these, and its nodes run on realHost.

// chaosHost is the machine of a node in the chaos suite: its clock may
// be skewed, and it may be simulated (a boot id of its own, logs whose
// unsynced writes a crash loses).
type chaosHost struct {
	boot      string        // "": the kernel's
	offset    time.Duration // added to the wall clock
	track     bool          // logs remember unsynced writes
	held      atomic.Bool   // every log's syncer waits until it stops
	lostCount atomic.Int64  // writes the crash took away
}

var _ host = (*chaosHost)(nil)

func (m *chaosHost) now() time.Time { return time.Now().Add(m.offset) }

func (m *chaosHost) bootID() string {
	if m.boot == "" {
		return readBootID()
	}
	return m.boot
}

func (m *chaosHost) diskFull() bool       { return false }
func (m *chaosHost) tracksUnsynced() bool { return m.track }
func (m *chaosHost) lost(writes int64)    { m.lostCount.Add(writes) }

func (m *chaosHost) awaitSync(_ *aheadLog, stop <-chan struct{}) bool {
	if !m.held.Load() {
		return true
	}
	<-stop // never released: the crash stops the syncer
	return false
}

// chaosHostOf returns the machine a node built from cfg runs on,
// giving cfg one if it has none yet.
func chaosHostOf(cfg *Config) *chaosHost {
	if m, ok := cfg.host.(*chaosHost); ok {
		return m
	}
	m := &chaosHost{}
	cfg.host = m
	return m
}

// ChaosSkewClock makes a node built from cfg read its wall clock offset by
// d: it stamps commands, expires locks and messages and activates
// scheduled ones on that clock.
func ChaosSkewClock(cfg *Config, d time.Duration) { chaosHostOf(cfg).offset = d }

// ChaosSimulateMachine makes a node built from cfg run as if on its own
// machine whose kernel boot id is bootID, and remember what its logs wrote
// and have not fsynced, so that ChaosCrashMachine can lose it. The next
// start after a crash must give another bootID: the machine rebooted.
func ChaosSimulateMachine(cfg *Config, bootID string) {
	m := chaosHostOf(cfg)
	m.boot = bootID
	m.track = true
}

// ChaosCrashMachine stops n as a crash of its machine would: every group's
// log loses what it wrote ahead of fsync and had not yet synced, and
// nothing is cleaned up. The process must exit at once afterwards.
//
// A leader's syncer fsyncs as soon as anything is written, so the
// unsynced tail at a random instant is a few milliseconds of writes at
// most. First, for hold, every log's syncer is stopped while the groups
// go on (as on a disk whose fsync hangs): the leader writes ahead,
// replicates and commits on a follower's fsync, answers nobody (its own
// copy is not durable), and the crash then takes that whole tail.
func ChaosCrashMachine(n *Node, hold time.Duration) error {
	if m, ok := n.cfg.host.(*chaosHost); ok {
		m.held.Store(true)
	}
	time.Sleep(hold)
	return n.shut(crashMachine)
}

// ChaosLostWrites is how many log writes ChaosCrashMachine took away
// from n.
func ChaosLostWrites(n *Node) int64 {
	if m, ok := n.cfg.host.(*chaosHost); ok {
		return m.lostCount.Load()
	}
	return 0
}
