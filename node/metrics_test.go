package node_test

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/quorumbus/quorumbus/node"
	"github.com/quorumbus/quorumbus/node/nodetest"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// TestReplicationLag cuts a follower off while the leader commits more,
// and reads the leader's view of it: its last log stays where it was, and
// the lag (commit index minus that) is what the leader committed since;
// the other follower keeps up. Once the cut heals the lag goes back to 0.
// The leader's /metrics carries the same figures per follower.
func TestReplicationLag(t *testing.T) {
	c := nodetest.Start(t, nodetest.Options{Groups: []uint64{group}, Cuttable: true})
	cl := c.Client(group)
	upsertEntity(t, cl, 60_000)
	leader := c.Leader(group)
	cut, other := (leader+1)%c.Len(), (leader+2)%c.Len()
	c.WaitFor("both followers to answer the leader", func() bool {
		fs := groupOn(t, c, leader).Followers
		return len(fs) == 2 && fs[0].Known && fs[1].Known
	})
	c.Cut(cut)
	const sends = 20
	for i := range sends {
		if _, err := send(ctxFor(t), cl, fmt.Sprintf("m%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if c.Leader(group) != leader {
		t.Skip("the leader changed under load; the lag is the new leader's view from scratch")
	}
	progress := func() (cutLag, otherLag uint64) {
		for _, f := range groupOn(t, c, leader).Followers {
			switch f.ID {
			case c.Node(cut).ID():
				cutLag = f.Lag
			case c.Node(other).ID():
				otherLag = f.Lag
			}
		}
		return
	}
	c.WaitFor("the connected follower to hold everything committed", func() bool { _, o := progress(); return o == 0 })
	if lag, _ := progress(); lag < sends {
		t.Fatalf("the cut follower lags %d entries, want at least the %d sends", lag, sends)
	}
	lag := gaugeOf(t, c.Node(leader).Collector(), "quorumbus_raft_replication_lag_entries", c.Node(cut).ID())
	if lag < sends {
		t.Errorf("quorumbus_raft_replication_lag_entries for the cut follower %v, want at least %d", lag, sends)
	}
	c.Heal()
	c.WaitFor("the healed follower to catch up", func() bool { l, _ := progress(); return l == 0 })
	if got := gaugeOf(t, c.Node(leader).Collector(), "quorumbus_raft_replication_lag_entries", c.Node(cut).ID()); got != 0 {
		t.Errorf("lag %v after catching up, want 0", got)
	}
	if fs := groupOn(t, c, cut).Followers; len(fs) != 0 {
		t.Errorf("a follower reports followers: %v", fs)
	}
}

// gaugeOf gathers one collector and returns the value of a gauge of the
// group whose follower label is follower (-1 when it has none).
func gaugeOf(t *testing.T, col prometheus.Collector, name, follower string) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	if err := reg.Register(col); err != nil {
		t.Fatal(err)
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if labelOf(m, "follower") == follower && labelOf(m, "group") == fmt.Sprint(group) {
				return m.GetGauge().GetValue()
			}
		}
	}
	var names []string
	for _, f := range fams {
		names = append(names, f.GetName())
	}
	t.Logf("%s{follower=%q} not among %s", name, follower, strings.Join(names, " "))
	return -1
}

func labelOf(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// TestSnapshotBytes: quorumbus_raft_snapshot_bytes is 0 before a
// replica's first snapshot, then the size of its newest snapshot as the
// snapshot store records it (so it grows with what the snapshot holds),
// and after a restart the size read back from the store.
func TestSnapshotBytes(t *testing.T) {
	c := nodetest.Start(t, nodetest.Options{Groups: []uint64{group}, Configure: func(_ int, cfg *node.Config) {
		cfg.SnapshotThreshold = 32
		cfg.SnapshotInterval = 50 * time.Millisecond
	}})
	cl := c.Client(group)
	// newest is what the snapshot store on disk says of node i's newest
	// snapshot (0 for none).
	newest := func(i int) int64 {
		snaps, err := raft.NewFileSnapshotStore(filepath.Join(c.Dir(i), "groups", fmt.Sprint(group), "raft"), 2, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		list, err := snaps.List()
		if err != nil || len(list) == 0 {
			return 0
		}
		return list[0].Size
	}
	for i := range c.Len() {
		if got := gaugeOf(t, c.Node(i).Collector(), "quorumbus_raft_snapshot_bytes", ""); got != 0 || newest(i) != 0 {
			t.Fatalf("node %d: snapshot_bytes %v before any snapshot (store: %d)", i, got, newest(i))
		}
	}
	upsertEntity(t, cl, 60_000)
	const n, size = 100, 2 << 10
	for i := range n {
		msg := &partitionpb.NewMessage{MessageId: fmt.Sprint(i), Bare: make([]byte, size)}
		if _, err := cl.Send(ctxFor(t), &partitionpb.SendRequest{EntityId: entity, Messages: []*partitionpb.NewMessage{msg}}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range c.Len() {
		c.WaitFor(fmt.Sprintf("node %d's snapshot to hold a quarter of the %d messages at least, and the gauge to say its size", i, n), func() bool {
			got := gaugeOf(t, c.Node(i).Collector(), "quorumbus_raft_snapshot_bytes", "")
			return got >= n/4*size && int64(got) == newest(i)
		})
	}
	before := gaugeOf(t, c.Node(0).Collector(), "quorumbus_raft_snapshot_bytes", "")
	c.Kill(0)
	c.Restart(0)
	c.WaitFor("node 0's group to open again", func() bool {
		_, err := c.Node(0).Group(group)
		return err == nil
	})
	if got := gaugeOf(t, c.Node(0).Collector(), "quorumbus_raft_snapshot_bytes", ""); got != float64(newest(0)) || got < before {
		t.Errorf("after a restart: snapshot_bytes %v, the store's newest %d, %v before", got, newest(0), before)
	}
}
