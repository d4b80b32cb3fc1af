package cluster

import (
	"encoding/json"
	"net/http"
	"time"

	metrics "github.com/hashicorp/go-metrics/compat"
)

// Raft's own timers, for `quorumbus dev -raft-metrics`.
//
// hashicorp/raft times each step of a commit through go-metrics: the
// leader's write of its log (raft.leader.dispatchLog), each follower's
// (raft.rpc.appendEntries.storeLogs), the AppendEntries round trip as the
// leader sees it (raft.replication.appendEntries.rpc.<peer>), the time
// from dispatch to commit (raft.commitTime) and the FSM's apply
// (raft.fsm.applyBatch). Without a sink they are thrown away. With one,
// every sample, several per commit of every group, takes the sink's lock,
// so it is opt-in: a measuring tool, not a metrics system (the HTTP
// gateway brings Prometheus metrics).

// raftMetricsInterval is the window /debug/raft-metrics summarizes: the
// last complete one.
const raftMetricsInterval = 10 * time.Second

// collectRaftMetrics sends the process's go-metrics samples to an
// in-memory sink and returns a handler that serves the last complete
// interval's summary as JSON (count, mean, min, max and stddev of each
// timer, in milliseconds).
func collectRaftMetrics() http.HandlerFunc {
	sink := metrics.NewInmemSink(raftMetricsInterval, 6*raftMetricsInterval)
	cfg := metrics.DefaultConfig("quorumbus")
	cfg.EnableHostname = false
	cfg.EnableRuntimeMetrics = false
	metrics.NewGlobal(cfg, sink)
	return func(w http.ResponseWriter, r *http.Request) {
		summary, err := sink.DisplayMetrics(w, r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(summary)
	}
}
