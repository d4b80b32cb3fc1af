package node_test

import (
	"context"
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/node"
	"github.com/quorumbus/quorumbus/node/nodetest"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
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

// TestCutOffLeaderServesNoReads peeks at, and asks the counts of, a leader
// just cut off from its followers. It still believes it leads (its lease
// runs for an election timeout, here 2 s), but it must not answer
// from its own state: the others may elect a leader and change the state
// meanwhile. It answers a peek only once a quorum confirms it leads, and
// counts only within the read lease (a third of the election timeout) of
// the last confirmation: stale by less than that if it was deposed,
// which Service Bus's counts, up to a second behind, allow.
func TestCutOffLeaderServesNoReads(t *testing.T) {
	const electionTimeout = 2 * time.Second
	readLease := electionTimeout / 3
	c := nodetest.Start(t, nodetest.Options{Groups: []uint64{group}, Cuttable: true, Configure: func(_ int, cfg *node.Config) {
		cfg.ElectionTimeout = electionTimeout
	}})
	cl := c.Client(group)
	upsertEntity(t, cl, 60_000)
	if _, err := send(ctxFor(t), cl, "m"); err != nil {
		t.Fatal(err)
	}
	// stats asks the leader for the counts, for at most the lease: one
	// that waits for its followers waits until it steps down.
	stats := func(direct partitionpb.PartitionServiceClient) (*partitionpb.StatsResponse, error) {
		ctx, cancel := context.WithTimeout(context.Background(), readLease)
		defer cancel()
		return direct.Stats(ctx, &partitionpb.StatsRequest{GroupId: group, EntityId: entity})
	}
	// Cut the leader off while it serves, right after a peek that had a
	// quorum confirm its leadership. A loaded machine may hold an
	// election just then; the test needs a leader that still believes it
	// leads, so it tries again.
	var (
		l      int
		direct partitionpb.PartitionServiceClient
		cut    time.Time
	)
	for try := 0; ; try++ {
		l = c.Leader(group)
		direct = c.DirectClient(l)
		confirmed := time.Now()
		if _, err := direct.Peek(ctxFor(t), &partitionpb.PeekRequest{GroupId: group, EntityId: entity, MaxCount: 10}); err != nil {
			t.Fatalf("peek at the leader before the cut: %v", err)
		}
		c.Cut(l)
		cut = time.Now()
		// Within the lease of the peek's confirmation the counts are
		// answered without asking the followers, whom the cut holds.
		asked := time.Since(confirmed)
		st, err := stats(direct)
		switch {
		case err == nil && st.ActiveMessages != 1:
			t.Errorf("counts within the lease: %v, want the one message", st)
		case err != nil && asked < readLease/2:
			t.Errorf("the leader refused counts %v after a quorum confirmed it (lease %v): %v", asked, readLease, err)
		case err != nil:
			t.Logf("counts asked %v after the confirmation, near the end of the lease (%v): %v", asked, readLease, err)
		}
		// A heartbeat answer already read off the wire before the cut
		// may still confirm the leadership: it says a follower took
		// this node for its leader a moment ago, which keeps any other
		// from being elected for an election timeout, so a read it
		// confirms is not stale. Wait until such answers are through.
		time.Sleep(500 * time.Millisecond)
		if groupOn(t, c, l).Serving {
			break
		}
		if try == 2 {
			t.Fatal("the leader had stepped down by the time it was cut off, three times: the test shows nothing")
		}
		c.Heal()
	}
	time.Sleep(time.Until(cut.Add(readLease)))
	if _, err := stats(direct); err == nil {
		t.Errorf("the cut-off leader answered a stats request %v after the cut, past its read lease of %v", time.Since(cut), readLease)
	}
	if resp, err := direct.Peek(ctxFor(t), &partitionpb.PeekRequest{GroupId: group, EntityId: entity, MaxCount: 10}); err == nil {
		t.Errorf("the cut-off leader answered a peek %v after the cut (%d messages)", time.Since(cut), len(resp.Messages))
	}

	c.Heal()
	resp, err := cl.Peek(ctxFor(t), &partitionpb.PeekRequest{EntityId: entity, MaxCount: 10})
	if err != nil {
		t.Fatalf("peek after the cut healed: %v", err)
	}
	if len(resp.Messages) != 1 || string(resp.Messages[0].Bare) != "m" {
		t.Fatalf("peek after the cut healed: %v", resp.Messages)
	}
}

// TestCutOffFollowerCampaignsWithPreVote cuts a follower off for several election
// timeouts, during which it campaigns in vain, and heals the cut. With
// pre-vote its campaigns do not raise its term, so on its return it does
// not force the leader out with a higher one (a known pitfall of Raft
// without pre-vote); it catches up. (The term is what the test checks, on the
// follower: the leader may lose an election to load now and then, which
// a check of who leads would take for this fault.)
func TestCutOffFollowerCampaignsWithPreVote(t *testing.T) {
	c := &aheadCluster{acked: map[uint64]string{}}
	c.Cluster = nodetest.Start(t, nodetest.Options{Groups: []uint64{group}, Configure: fastElections, Cuttable: true})
	c.cl = c.Client(group)
	upsertEntity(t, c.cl, 60_000)
	l := c.Leader(group)
	f := (l + 1) % c.Len()
	c.ack(t, "before", 20)
	c.converged(t, l)

	c.Cut(f)
	term := groupOn(t, c.Cluster, f).Term
	c.ack(t, "during", 20)
	time.Sleep(6 * 500 * time.Millisecond) // six election timeouts of fastElections
	if now := groupOn(t, c.Cluster, f).Term; now != term {
		t.Errorf("the cut-off follower n%d raised its term from %d to %d: it campaigned without pre-vote", f, term, now)
	}
	c.Heal()
	c.ack(t, "after", 20)
	c.converged(t, c.Leader(group))
	c.drain(t)
}
