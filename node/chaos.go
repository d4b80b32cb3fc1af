//go:build chaostest

package node

import "time"

// Hooks for the chaos suite (tests/jepsen), compiled only into a binary
// built with -tags chaostest: the suite's processes need faults that a
// real machine would cause and a process cannot cause to itself. A
// production build has none of these, and the fields they set stay zero.

// ChaosSkewClock makes a node built from cfg read its wall clock offset by
// d: it stamps commands, expires locks and messages and activates
// scheduled ones on that clock.
func ChaosSkewClock(cfg *Config, d time.Duration) { cfg.clockOffset = d }

// ChaosSimulateMachine makes a node built from cfg run as if on its own
// machine whose kernel boot id is bootID, and remember what its logs wrote
// and have not fsynced, so that ChaosCrashMachine can lose it. The next
// start after a crash must give another bootID: the machine rebooted.
func ChaosSimulateMachine(cfg *Config, bootID string) {
	cfg.bootID = bootID
	cfg.simulatedMachine = true
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
	n.mu.RLock()
	for _, g := range n.groups {
		if g.ahead != nil {
			g.ahead.fs.setHold(make(chan struct{}), nil) // never released: the crash stops the syncer
		}
	}
	n.mu.RUnlock()
	time.Sleep(hold)
	return n.shut(crashMachine)
}

// ChaosLostWrites is how many log writes ChaosCrashMachine took away.
func ChaosLostWrites() int64 { return lostWrites.Load() }
