package cluster

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

func TestQuietRaft(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(quietRaft{slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})})
	raft := log.With("group", 1)
	raft.Info("entering follower state", "logger", "raft")                          // narration: hidden
	raft.Warn("failed to get previous log", "logger", "raft")                       // catching up: hidden
	log.Info("raft: pipelining replication: peer=x")                                // placement's bridge: hidden
	raft.Warn("heartbeat timeout reached, starting election", "logger", "raft")     // an election: shown at info
	raft.Warn("failed to contact quorum of nodes, stepping down", "logger", "raft") // shown
	raft.Error("peer has newer term, stopping replication", "logger", "raft")       // a leadership change: info
	log.Info("queue ready")                                                         // ours: shown
	out := buf.String()
	for _, hidden := range []string{"entering follower", "previous log", "pipelining"} {
		if strings.Contains(out, hidden) {
			t.Errorf("%q shown at the default level:\n%s", hidden, out)
		}
	}
	for _, shown := range []string{"level=INFO msg=\"heartbeat timeout reached", "level=WARN msg=\"failed to contact quorum", "level=INFO msg=\"peer has newer term", "queue ready"} {
		if !strings.Contains(out, shown) {
			t.Errorf("%q not shown:\n%s", shown, out)
		}
	}
}
