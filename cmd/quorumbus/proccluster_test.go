package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// processCluster is a cluster of node processes, each of five groups of
// three replicas bootstrapped together, and one front-end process.
type processCluster struct {
	bin       string
	grpcAddrs []string
	// nodeArgs are node i's flags, to start it again after a kill.
	nodeArgs func(i int) []string
	procs    []*process
	amqpAddr string
}

// startProcessCluster starts nodes node processes and a front-end.
func startProcessCluster(t *testing.T, nodes int) *processCluster {
	t.Helper()
	c := &processCluster{bin: buildBinary(t), grpcAddrs: freeAddrs(t, nodes), procs: make([]*process, nodes)}
	dir := t.TempDir()
	gossipAddrs := freeAddrs(t, nodes)
	var boot []string
	for i := range nodes {
		boot = append(boot, fmt.Sprintf("n%d=%s", i+1, c.grpcAddrs[i]))
	}
	c.nodeArgs = func(i int) []string {
		return []string{"node", "-plain-cluster", "-id", fmt.Sprintf("n%d", i+1), "-data", filepath.Join(dir, fmt.Sprintf("n%d", i+1)),
			"-grpc-addr", c.grpcAddrs[i], "-gossip-addr", gossipAddrs[i], "-join", strings.Join(gossipAddrs, ","),
			"-bootstrap", strings.Join(boot, ","), "-groups", "5", "-replicas", "3", "-log-level", "error",
			"-cache-mb", "8", "-wal-segment-mb", "4"}
	}
	for i := range nodes {
		c.procs[i] = startProcess(t, c.bin, c.nodeArgs(i)...)
	}
	c.amqpAddr = freeAddrs(t, 1)[0]
	startFrontendProcess(t, c.bin, dir, c.amqpAddr, c.grpcAddrs)
	return c
}
