package node_test

import (
	"testing"

	"github.com/quorumbus/quorumbus/node/nodetest"
)

// TestPartitionedLeaderKeepsAcknowledged cuts the leader off from its
// followers, three times, while sixteen senders go on sending through a
// client that still reaches it. The followers elect one of their own; the
// old leader, until its lease runs out, takes requests it cannot commit
// and writes them ahead of its fsync (aheadlog.go). When the cut heals,
// the new leader's log replaces that tail. Every acknowledged message
// must be there once, and the replicas must agree.
func TestPartitionedLeaderKeepsAcknowledged(t *testing.T) {
	if testing.Short() {
		t.Skip("partitions three leaders")
	}
	c := &aheadCluster{acked: map[uint64]string{}}
	c.Cluster = nodetest.Start(t, nodetest.Options{Groups: []uint64{group}, Configure: fastElections, Cuttable: true})
	c.cl = c.Client(group)
	upsertEntity(t, c.cl, 60_000)

	sn := startSenders(t, c.cl, "p", 16)
	acks := sn.count
	tails := 0 // rounds in which the cut-off leader wrote entries it could not commit
	for round := range 3 {
		l := c.Leader(group)
		before := acks()
		c.WaitFor("100 more acknowledged sends", func() bool { return acks() >= before+100 })
		c.Cut(l)
		cutAt := groupOn(t, c.Cluster, l).AppliedIndex
		next := c.LeaderBeyondCuts(group)
		before = acks()
		c.WaitFor("100 sends acknowledged beyond the cut", func() bool { return acks() >= before+100 })
		c.WaitFor("the cut-off leader to step down", func() bool { return !groupOn(t, c.Cluster, l).Serving })
		st := groupOn(t, c.Cluster, l)
		if st.LastIndex > st.AppliedIndex {
			tails++
		}
		c.Heal()
		c.converged(t, next)
		t.Logf("round %d: cut n%d off at applied index %d; it wrote up to %d, applied %d; n%d leads; %d acknowledged",
			round, l, cutAt, st.LastIndex, st.AppliedIndex, next, acks())
	}
	c.acked = sn.finish()
	c.converged(t, c.Leader(group))
	c.drain(t)
	if retries := c.cl.(*nodetest.Client).Retries.Load(); retries == 0 {
		t.Errorf("no request was retried: the cuts sent no client elsewhere")
	}
	t.Logf("%d acknowledged; in %d of 3 rounds the cut-off leader held entries it never applied", len(c.acked), tails)
}
