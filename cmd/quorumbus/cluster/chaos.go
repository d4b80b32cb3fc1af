//go:build chaostest

package cluster

import (
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/quorumbus/quorumbus/node"
)

// The chaos suite (tests/jepsen) builds the binary with -tags chaostest
// and sets these variables on the processes it injects faults into. A
// binary built without the tag ignores them (chaos_off.go).
const (
	// envClockOffset skews the node's wall clock by a Go duration
	// ("-90s", "2m"): node.ChaosSkewClock.
	envClockOffset = "QUORUMBUS_CHAOS_CLOCK_OFFSET"
	// envBootID makes the node run as if on a machine of its own with
	// this kernel boot id, remembering what its logs have not fsynced;
	// SIGUSR1 then crashes that machine (node.ChaosCrashMachine) and the
	// process exits with status crashExit. The suite restarts it with
	// another boot id.
	envBootID = "QUORUMBUS_CHAOS_BOOT_ID"
)

// crashExit is the status a simulated machine crash exits with, so that
// the suite tells it from a crash of the product.
const crashExit = 86

// crashHold is how long the logs go unsynced before a simulated machine
// crash (node.ChaosCrashMachine): long enough for a leader to write
// ahead a few batches, which the crash then loses.
const crashHold = 500 * time.Millisecond

func armChaos(cfg *node.Config, log *slog.Logger) (func(*node.Node), error) {
	if v := os.Getenv(envClockOffset); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return nil, fmt.Errorf("%s=%q: %w", envClockOffset, v, err)
		}
		node.ChaosSkewClock(cfg, d)
		log.Warn("chaos: wall clock skewed", "offset", d)
	}
	boot := os.Getenv(envBootID)
	if boot == "" {
		return func(*node.Node) {}, nil
	}
	node.ChaosSimulateMachine(cfg, boot)
	log.Warn("chaos: simulated machine", "boot_id", boot)
	return func(n *node.Node) {
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGUSR1)
		go func() {
			<-sig
			err := node.ChaosCrashMachine(n, crashHold)
			// Written straight to stderr: the process exits next, and
			// the suite reads the count from the log.
			fmt.Fprintf(os.Stderr, "chaos: machine crash: %d unsynced log writes lost (err %v)\n", node.ChaosLostWrites(n), err)
			os.Exit(crashExit)
		}()
	}, nil
}
