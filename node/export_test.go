package node

import (
	"time"

	"github.com/hashicorp/raft"
)

// Hooks for the package's external tests.

// SimulateMachine makes a node built from cfg behave as if it ran on its
// own machine with the given boot id, and lets CrashMachine lose what its
// logs have not fsynced.
func SimulateMachine(cfg *Config, bootID string) {
	cfg.bootID = bootID
	cfg.simulatedMachine = true
}

// CrashMachine stops n as a crash of its machine would: every group's log
// loses what was written ahead of fsync and not yet synced, and nothing
// is cleaned up.
func CrashMachine(n *Node) error { return n.shut(crashMachine) }

// CrashProcess stops n as a crash of its process would: what its logs
// wrote ahead of fsync stays in the page cache, unsynced, and nothing is
// cleaned up.
func CrashProcess(n *Node) error { return n.shut(crashProcess) }

// HoldLogSync stops the syncer of group id's log on n (it fsyncs what is
// written ahead) until release is called. The node must simulate a
// machine.
func HoldLogSync(n *Node, id uint64) (release func()) {
	n.mu.RLock()
	g := n.groups[id]
	n.mu.RUnlock()
	h := make(chan struct{})
	g.ahead.fs.setHold(h, nil)
	return func() { close(h) }
}

// LostWrites is how many log writes simulated machine crashes have taken
// away so far in this process.
func LostWrites() int64 { return lostWrites.Load() }

// LogBytes returns the size of the largest entry in group id's log on n
// and of all of them, reading the log from its first index to its last.
func LogBytes(n *Node, id uint64) (largest, total int, err error) {
	n.mu.RLock()
	g := n.groups[id]
	n.mu.RUnlock()
	if g == nil {
		return 0, 0, ErrGroupNotFound
	}
	first, err := g.cache.FirstIndex()
	if err != nil {
		return 0, 0, err
	}
	last, err := g.cache.LastIndex()
	if err != nil {
		return 0, 0, err
	}
	for i := first; i <= last && i > 0; i++ {
		var l raft.Log
		if err := g.cache.store.GetLog(i, &l); err != nil {
			return 0, 0, err
		}
		largest = max(largest, len(l.Data))
		total += len(l.Data)
	}
	return largest, total, nil
}

// MaxEntryBytes is the bound on an entry (propose.go).
const MaxEntryBytes = maxEntryBytes

// RaceOn: the tests run under the race detector.
const RaceOn = raceOn

// SkewClock makes a node built from cfg read its wall clock offset by d
// (as node.ChaosSkewClock does in the chaos suite's build).
func SkewClock(cfg *Config, d time.Duration) { cfg.clockOffset = d }
