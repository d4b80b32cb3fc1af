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
func ChaosCrashMachine(n *Node) error { return n.shut(crashMachine) }

// ChaosLostWrites is how many log writes ChaosCrashMachine took away.
func ChaosLostWrites() int64 { return lostWrites.Load() }
