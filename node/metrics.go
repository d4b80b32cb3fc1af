package node

import (
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
)

// What a Raft operator watches, per node and group: who leads, the term,
// how far the log and the state machine are, health, the proposer's load,
// and how long commits, applies and fsyncs take. Labels are the node id
// and the group id, both bounded by the cluster's size.

// latencyBuckets span a local fsync (tens of µs) to a stalled disk or an
// election (seconds).
var latencyBuckets = prometheus.ExponentialBuckets(0.0001, 2.5, 14)

// nodeMetrics are a node's latency histograms; the rest is read from the
// groups when Prometheus scrapes.
type nodeMetrics struct {
	commit, apply, fsync *prometheus.HistogramVec

	mu     sync.Mutex
	groups map[uint64]*groupObservers
}

// groupObservers are one group's histograms, looked up once per group.
type groupObservers struct {
	commit, apply, fsync prometheus.Observer
}

func newNodeMetrics() *nodeMetrics {
	h := func(name, help string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "quorumbus_raft_" + name, Help: help, Buckets: latencyBuckets,
		}, []string{"node", "group"})
	}
	return &nodeMetrics{
		commit: h("commit_seconds", "From proposing a Raft entry on the leader to its results (committed by a quorum, applied, durable on the leader)."),
		apply:  h("apply_seconds", "Applying a batch of Raft entries to the partition state machine."),
		fsync:  h("fsync_seconds", "One fsync of the Raft log (raft-wal)."),
		groups: make(map[uint64]*groupObservers),
	}
}

// group returns the observers of a group.
func (m *nodeMetrics) group(nodeID string, id uint64) *groupObservers {
	m.mu.Lock()
	defer m.mu.Unlock()
	if o := m.groups[id]; o != nil {
		return o
	}
	g := strconv.FormatUint(id, 10)
	o := &groupObservers{
		commit: m.commit.WithLabelValues(nodeID, g),
		apply:  m.apply.WithLabelValues(nodeID, g),
		fsync:  m.fsync.WithLabelValues(nodeID, g),
	}
	m.groups[id] = o
	return o
}

// A latency is one of the histograms of a group.
type latency int

const (
	latencyCommit latency = iota
	latencyApply
	latencyFsync
)

// observe records the time since a moment in one of the group's
// histograms.
func (g *group) observe(which latency, since time.Time) {
	m := g.node.metrics
	if m == nil {
		return
	}
	o := m.group(g.node.cfg.ID, g.id)
	d := time.Since(since).Seconds()
	switch which {
	case latencyCommit:
		o.commit.Observe(d)
	case latencyApply:
		o.apply.Observe(d)
	case latencyFsync:
		o.fsync.Observe(d)
	}
}

var (
	groupLabels      = []string{"node", "group"}
	descLeader       = prometheus.NewDesc("quorumbus_raft_leader", "1 when this node leads the group.", groupLabels, nil)
	descTerm         = prometheus.NewDesc("quorumbus_raft_term", "The replica's current Raft term.", groupLabels, nil)
	descHealthy      = prometheus.NewDesc("quorumbus_raft_group_healthy", "1 when the replica knows a leader (a quorum answered lately) and has not stopped on a storage failure.", groupLabels, nil)
	descLastIndex    = prometheus.NewDesc("quorumbus_raft_last_index", "Last index of the replica's Raft log.", groupLabels, nil)
	descAppliedIndex = prometheus.NewDesc("quorumbus_raft_applied_index", "Last index the state machine applied.", groupLabels, nil)
	descSnapIndex    = prometheus.NewDesc("quorumbus_raft_snapshot_index", "Last index of the newest snapshot.", groupLabels, nil)
	descLogEntries   = prometheus.NewDesc("quorumbus_raft_entries_since_snapshot", "Raft log entries after the newest snapshot (what a restart replays).", groupLabels, nil)
	descSnapBytes    = prometheus.NewDesc("quorumbus_raft_snapshot_bytes", "Size of the replica's newest snapshot (0 before its first).", groupLabels, nil)
	descLogBytes     = prometheus.NewDesc("quorumbus_raft_log_bytes_since_snapshot", "Bytes of entry data written to the Raft log since the last snapshot (a snapshot is taken once it passes the node's threshold).", groupLabels, nil)
	descInFlight     = prometheus.NewDesc("quorumbus_raft_proposals_in_flight", "Raft entries this leader proposed that have not been answered.", groupLabels, nil)
	descQueued       = prometheus.NewDesc("quorumbus_raft_requests_queued", "Client requests waiting for the proposer to pack them into an entry.", groupLabels, nil)
	descEntries      = prometheus.NewDesc("quorumbus_raft_proposed_entries_total", "Raft entries this replica proposed as leader.", groupLabels, nil)
	descReplLag      = prometheus.NewDesc("quorumbus_raft_replication_lag_entries", "On the leader, per follower: the leader's commit index minus the follower's last log index as of its latest answer (0 when it holds everything committed).", []string{"node", "group", "follower"}, nil)
	descReplKnown    = prometheus.NewDesc("quorumbus_raft_follower_answered", "On the leader, per follower: 1 once the follower answered an AppendEntries of this node (replication_lag_entries is reported only then).", []string{"node", "group", "follower"}, nil)
	descCommitIndex  = prometheus.NewDesc("quorumbus_raft_commit_index", "Last index the replica knows committed.", groupLabels, nil)
	descRequests     = prometheus.NewDesc("quorumbus_raft_proposed_requests_total", "Client requests carried by those entries (group commit packs many in one).", groupLabels, nil)
)

// Collector returns the node's metrics for a Prometheus registry.
func (n *Node) Collector() prometheus.Collector { return nodeCollector{n} }

type nodeCollector struct{ n *Node }

// Describe sends nothing: the collector is unchecked, so that the nodes
// of one process (dev) register theirs side by side under the same
// names, told apart by the node label.
func (c nodeCollector) Describe(chan<- *prometheus.Desc) {}

func (c nodeCollector) Collect(ch chan<- prometheus.Metric) {
	n := c.n
	m := n.metrics
	m.commit.Collect(ch)
	m.apply.Collect(ch)
	m.fsync.Collect(ch)
	nodeID := n.ID()
	for _, id := range n.Groups() {
		st, err := n.Group(id)
		if err != nil {
			continue // closed since Groups listed it
		}
		labels := []string{nodeID, strconv.FormatUint(id, 10)}
		gauge := func(d *prometheus.Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
		}
		gauge(descLeader, boolValue(st.State == raft.Leader))
		gauge(descTerm, float64(st.Term))
		gauge(descHealthy, boolValue(st.Leader.ID != "" && st.Err == nil))
		gauge(descLastIndex, float64(st.LastIndex))
		gauge(descAppliedIndex, float64(st.AppliedIndex))
		gauge(descSnapIndex, float64(st.SnapshotIndex))
		if st.LastIndex >= st.SnapshotIndex {
			gauge(descLogEntries, float64(st.LastIndex-st.SnapshotIndex))
		}
		if g, err := n.group(id); err == nil {
			if g.prop != nil {
				gauge(descInFlight, float64(g.prop.inFlight.Load()))
				gauge(descQueued, float64(len(g.prop.in)))
			}
			if g.cache != nil {
				gauge(descLogBytes, float64(g.cache.appended.Load()))
			}
			if g.snaps != nil {
				gauge(descSnapBytes, float64(g.snaps.latest.Load()))
			}
		}
		gauge(descCommitIndex, float64(st.CommitIndex))
		for _, f := range st.Followers {
			fl := append(labels[:2:2], f.ID)
			ch <- prometheus.MustNewConstMetric(descReplKnown, prometheus.GaugeValue, boolValue(f.Known), fl...)
			if f.Known {
				ch <- prometheus.MustNewConstMetric(descReplLag, prometheus.GaugeValue, float64(f.Lag), fl...)
			}
		}
		ch <- prometheus.MustNewConstMetric(descEntries, prometheus.CounterValue, float64(st.Entries), labels...)
		ch <- prometheus.MustNewConstMetric(descRequests, prometheus.CounterValue, float64(st.Requests), labels...)
	}
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// sizedSnapshots is a group's snapshot store that remembers the size of
// its newest snapshot for quorumbus_raft_snapshot_bytes, so that a
// scrape reads no directory: the size is read from the store once when
// the group opens, then counted as each snapshot is written (taken here,
// or installed from the leader) and closed.
type sizedSnapshots struct {
	raft.SnapshotStore
	latest atomic.Int64
}

func newSizedSnapshots(s raft.SnapshotStore) *sizedSnapshots {
	z := &sizedSnapshots{SnapshotStore: s}
	if list, err := s.List(); err == nil && len(list) > 0 {
		z.latest.Store(list[0].Size)
	}
	return z
}

// Create implements raft.SnapshotStore.
func (z *sizedSnapshots) Create(version raft.SnapshotVersion, index, term uint64, configuration raft.Configuration, configurationIndex uint64, trans raft.Transport) (raft.SnapshotSink, error) {
	sink, err := z.SnapshotStore.Create(version, index, term, configuration, configurationIndex, trans)
	if err != nil {
		return nil, err
	}
	return &sizedSink{SnapshotSink: sink, store: z}, nil
}

// sizedSink counts what is written to a snapshot; a snapshot closed
// whole becomes the newest, one cancelled changes nothing.
type sizedSink struct {
	raft.SnapshotSink
	store *sizedSnapshots
	n     int64
}

var _ io.Writer = (*sizedSink)(nil)

func (k *sizedSink) Write(p []byte) (int, error) {
	n, err := k.SnapshotSink.Write(p)
	k.n += int64(n)
	return n, err
}

func (k *sizedSink) Close() error {
	if err := k.SnapshotSink.Close(); err != nil {
		return err
	}
	k.store.latest.Store(k.n)
	return nil
}
