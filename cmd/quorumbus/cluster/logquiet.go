package cluster

import (
	"context"
	"log/slog"
	"strings"
)

// hashicorp/raft narrates its state changes at Info (entering follower
// state, pipelining replication, initial configuration) and logs the
// ordinary catching up of a follower at Warn ("failed to get previous
// log", "appendEntries rejected, sending older logs"): a healthy start of
// the dev cluster printed about ninety such lines. quietRaft moves raft's
// records one step down, so that at the default level an operator sees
// the broker's own messages and raft's elections, warnings that matter
// and errors; -log-level debug brings the rest back.
type quietRaft struct{ slog.Handler }

// raftRoutine are raft's warnings about what a healthy cluster does: a
// follower that starts empty or lags is sent older entries, and a replica
// that is not yet a voter does not campaign.
var raftRoutine = []string{
	"failed to get previous log",
	"appendEntries rejected, sending older logs",
	"no known peers, aborting election",
}

func (h quietRaft) Handle(ctx context.Context, r slog.Record) error {
	if !fromRaft(r) {
		return h.Handler.Handle(ctx, r)
	}
	level := r.Level
	switch {
	case level == slog.LevelInfo:
		level = slog.LevelDebug
	case level == slog.LevelWarn && routine(r.Message):
		level = slog.LevelDebug
	case level == slog.LevelWarn && strings.Contains(r.Message, "starting election"):
		level = slog.LevelInfo
	case level == slog.LevelError && strings.Contains(r.Message, "peer has newer term, stopping replication"):
		// A leader that handed its leadership over (placement spreads
		// leaders) or lost it to an election learns so this way: a
		// leadership change, not a failure.
		level = slog.LevelInfo
	}
	if level == r.Level {
		return h.Handler.Handle(ctx, r)
	}
	if !h.Handler.Enabled(ctx, level) {
		return nil
	}
	r = r.Clone()
	r.Level = level
	return h.Handler.Handle(ctx, r)
}

func (h quietRaft) WithAttrs(attrs []slog.Attr) slog.Handler {
	return quietRaft{h.Handler.WithAttrs(attrs)}
}

func (h quietRaft) WithGroup(name string) slog.Handler { return quietRaft{h.Handler.WithGroup(name)} }

// fromRaft reports whether r came from hashicorp/raft: through node's
// adapter (attribute logger=raft...) or placement's ("raft: " prefix).
func fromRaft(r slog.Record) bool {
	if strings.HasPrefix(r.Message, "raft: ") {
		return true
	}
	found := false
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "logger" && strings.HasPrefix(a.Value.String(), "raft") {
			found = true
		}
		return !found
	})
	return found
}

func routine(msg string) bool {
	msg = strings.TrimPrefix(msg, "raft: ")
	for _, m := range raftRoutine {
		if strings.HasPrefix(msg, m) {
			return true
		}
	}
	return false
}
