package main

import (
	"flag"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
)

// Go's collector lets the heap grow to twice what is live before it runs.
// A broker moving large messages makes garbage of their size several
// times over (reassembled, staged, read back, rendered, framed), so a
// process whose caches and buffers are bounded could still take twice
// their sum, and more, from the machine. Each process therefore sets Go's
// soft memory limit to the memory its configuration allows: the collector
// then runs earlier instead of the process growing. GOMEMLIMIT in the
// environment, or -memory-limit-mb, chooses another.

const memoryLimitUsage = "soft memory limit of the process in MiB, which Go's collector works to stay under; 0: what the caches and buffers of this configuration add up to (docs/operations.md); -1: none. GOMEMLIMIT in the environment wins"

func memoryLimitFlag(fs *flag.FlagSet) *int64 {
	return fs.Int64("memory-limit-mb", 0, memoryLimitUsage)
}

// Budgets in MiB (docs/operations.md, "Memory").
const (
	// groupMiB is what a group replica may hold besides its cache: two
	// memtables of cacheMB each are counted by the caller; the log cache
	// and entries in flight are this.
	groupMiB = 8 + 32
	// frontendMiB: unfinished messages (the engine's process budget) and
	// what is in flight to the partitions.
	frontendMiB = 1024 + 256
	// baseMiB: the runtime, gRPC, gossip, the catalog.
	baseMiB = 256
)

// storageBudgetMiB is the memory of replicas group replicas with caches
// of cacheMB.
func storageBudgetMiB(replicas int, cacheMB int64) int64 {
	return int64(replicas) * (3*cacheMB + groupMiB)
}

// replicasPerNode is the most group replicas one of nodes storage nodes
// is given: its share of the groups of -groups, r replicas each, spread
// evenly over the nodes; or, when groups follow entities, the
// -max-replicas-per-node that bounds those placed past -groups. A drain
// can leave a node more (groups are never removed): the limit is what
// placement gives, not what a shrunk cluster must hold.
func replicasPerNode(groups, r, nodes, perNodeCap int) int {
	return max((groups*r+nodes-1)/nodes, perNodeCap)
}

// applyMemoryLimit sets the soft memory limit: mb MiB, budgetMiB when mb
// is 0, none when mb is negative or GOMEMLIMIT is set.
func applyMemoryLimit(mb, budgetMiB int64, log *slog.Logger) error {
	if os.Getenv("GOMEMLIMIT") != "" {
		log.Info("memory limit from GOMEMLIMIT", "limit", os.Getenv("GOMEMLIMIT"))
		return nil
	}
	switch {
	case mb < -1:
		return fmt.Errorf("-memory-limit-mb %d: want -1, 0 or a size in MiB", mb)
	case mb == -1:
		return nil
	case mb == 0:
		mb = budgetMiB
	}
	debug.SetMemoryLimit(mb << 20)
	log.Debug("memory limit", "MiB", mb)
	return nil
}
