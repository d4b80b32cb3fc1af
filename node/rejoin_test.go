package node_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/quorumbus/quorumbus/node"
	"github.com/quorumbus/quorumbus/node/nodetest"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// TestWipedReplicaWithholdsVote loses the data directory of a follower
// that holds acknowledged entries the third replica lacks, restarts it
// empty under its old id while the leader is down, and checks that it
// does not help the third replica win an election (node/rejoin.go): with
// hashicorp/raft's own rules it votes for it at once, and the
// acknowledged entries are overwritten. Once the old leader is back and
// has brought it up to date, it votes again: it and the third replica
// elect a leader without the old one.
func TestWipedReplicaWithholdsVote(t *testing.T) {
	c := nodetest.Start(t, nodetest.Options{Groups: []uint64{group}, Configure: fastElections})
	cl := c.Client(group)
	upsertEntity(t, cl, 60_000)
	acked := map[uint64]string{}
	ack := func(prefix string, n int) {
		t.Helper()
		for i := range n {
			body := fmt.Sprintf("%s-%d", prefix, i)
			seq, err := send(ctxFor(t), cl, body)
			if err != nil {
				t.Fatalf("send %s: %v", body, err)
			}
			acked[seq] = body
		}
	}
	ack("early", 5)
	l := c.Leader(group)
	w, lag := (l+1)%3, (l+2)%3
	c.Kill(lag) // lag misses what follows: it commits on l and w
	ack("late", 20)
	committed := groupOn(t, c, l).AppliedIndex

	c.Kill(w)
	if err := os.RemoveAll(c.Dir(w)); err != nil {
		t.Fatal(err)
	}
	c.Kill(l)
	c.Restart(w) // empty, under its old id
	c.Restart(lag)
	if got := groupOn(t, c, w).LastIndex; got != 0 {
		t.Fatalf("the wiped replica's log ends at %d, want it empty", got)
	}
	if got := groupOn(t, c, lag).LastIndex; got >= committed {
		t.Fatalf("the lagging replica's log ends at %d, at or past the committed %d: the test shows nothing", got, committed)
	}
	// Without the rejoin rule the two elect lag within a few election
	// timeouts (500 ms). Watch for twelve.
	for deadline := time.Now().Add(6 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		for _, i := range []int{w, lag} {
			if st := groupOn(t, c, i); st.State == raft.Leader {
				t.Fatalf("n%d was elected with entries up to %d while the only replica holding entries up to %d was down", i, st.LastIndex, committed)
			}
		}
	}

	c.Restart(l)
	if got := c.Leader(group); got != l {
		t.Fatalf("n%d leads; only n%d holds every acknowledged entry", got, l)
	}
	c.WaitFor("every replica to apply the leader's log", func() bool {
		want := groupOn(t, c, l).AppliedIndex
		return groupOn(t, c, w).AppliedIndex == want && groupOn(t, c, lag).AppliedIndex == want
	})
	drainAcked(t, cl, acked)

	// Caught up, the wiped replica votes: it and lag elect one of them.
	ack("after", 5)
	c.Kill(l)
	if got := c.Leader(group); got == l {
		t.Fatalf("n%d leads while killed", got)
	}
	drainAcked(t, cl, acked)
}

// drainAcked receives and deletes every message and checks that each
// acknowledged one is among them once, and forgets them.
func drainAcked(t *testing.T, cl partitionpb.PartitionServiceClient, acked map[uint64]string) {
	t.Helper()
	seen := map[uint64]bool{}
	for {
		msgs := receive(t, cl, 100, true, 0)
		if len(msgs) == 0 {
			break
		}
		for _, m := range msgs {
			if seen[m.SequenceNumber] {
				t.Errorf("sequence number %d received twice", m.SequenceNumber)
			}
			seen[m.SequenceNumber] = true
			if body, ok := acked[m.SequenceNumber]; ok && string(m.Bare) != body {
				t.Errorf("sequence number %d holds %q, acknowledged for %q", m.SequenceNumber, m.Bare, body)
			}
		}
	}
	for seq, body := range acked {
		if !seen[seq] {
			t.Errorf("acknowledged %s (%d) is gone", body, seq)
		}
	}
	clear(acked)
}

// TestWipedBootstrapperRejoins loses the data directory of the group's
// first replica, the one that bootstrapped it, while another replica is
// down: restarted empty it must not bootstrap the group a second time (a
// second history at term 1), nor help the third replica win an election
// before a leader has reached it. Once the down replica is back, a leader
// brings it up to date and it votes again.
func TestWipedBootstrapperRejoins(t *testing.T) {
	c := nodetest.Start(t, nodetest.Options{Groups: []uint64{group}, Configure: fastElections})
	cl := c.Client(group)
	upsertEntity(t, cl, 60_000)
	acked := map[uint64]string{}
	for i := range 10 {
		body := fmt.Sprint("m-", i)
		seq, err := send(ctxFor(t), cl, body)
		if err != nil {
			t.Fatal(err)
		}
		acked[seq] = body
	}
	c.Kill(0)
	if err := os.RemoveAll(c.Dir(0)); err != nil {
		t.Fatal(err)
	}
	c.Kill(1)
	c.Restart(0)
	for deadline := time.Now().Add(6 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if st := groupOn(t, c, 0); st.LastIndex != 0 {
			t.Fatalf("the wiped bootstrapper's log ends at %d (term %d): it bootstrapped the group again", st.LastIndex, st.Term)
		}
		if st := groupOn(t, c, 2); st.State == raft.Leader {
			t.Fatalf("n2 was elected with the vote of a replica that lost its disk")
		}
	}
	c.Restart(1)
	l := c.Leader(group)
	c.WaitFor("the wiped bootstrapper to catch up", func() bool {
		return groupOn(t, c, 0).AppliedIndex >= groupOn(t, c, l).AppliedIndex
	})
	drainAcked(t, cl, acked)
	if l != 0 {
		c.Kill(l)
		if got := c.Leader(group); got == l {
			t.Fatalf("n%d leads while killed", got)
		}
	}
}

// TestNewAndMovedReplicasElect: every replica of a brand-new group opens
// empty, and a replica added by a move does too; neither may keep the
// group from electing. The moved replica, once caught up, helps elect a
// leader after the old leader goes.
func TestNewAndMovedReplicasElect(t *testing.T) {
	c := nodetest.Start(t, nodetest.Options{Nodes: 4, Configure: fastElections})
	peers := c.Peers()
	for i := range 3 {
		if err := c.Node(i).EnsureGroup(group, peers[:3]); err != nil {
			t.Fatal(err)
		}
	}
	l := c.Leader(group)
	cl := c.Client(group)
	upsertEntity(t, cl, 60_000)
	for i := range 20 {
		if _, err := send(ctxFor(t), cl, fmt.Sprint("m-", i)); err != nil {
			t.Fatal(err)
		}
	}

	// Move the replica off a follower onto n3.
	moved := append(peers[:3:3], node.Peer{ID: peers[3].ID, Addr: peers[3].Addr, Joined: true})
	if err := c.Node(3).EnsureGroup(group, moved); err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient(c.Addr(l), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	m := partitionpb.NewGroupMembershipClient(cc)
	change := func(how partitionpb.ReplicaChange, p node.Peer) {
		t.Helper()
		if _, err := m.ChangeReplica(ctxFor(t), &partitionpb.ChangeReplicaRequest{GroupId: group, Change: how, NodeId: p.ID, Addr: p.Addr}); err != nil {
			t.Fatalf("%v %s: %v", how, p.ID, err)
		}
	}
	change(partitionpb.ReplicaChange_REPLICA_CHANGE_ADD_LEARNER, peers[3])
	c.WaitFor("the moved replica to catch up", func() bool {
		return groupOn(t, c, 3).AppliedIndex >= groupOn(t, c, l).AppliedIndex
	})
	change(partitionpb.ReplicaChange_REPLICA_CHANGE_PROMOTE, peers[3])
	gone := (l + 1) % 3
	change(partitionpb.ReplicaChange_REPLICA_CHANGE_REMOVE, peers[gone])
	c.Kill(gone)

	// The voters are l, the other old replica and n3: without l, the two
	// others must elect one of them.
	c.Kill(l)
	if got := c.Leader(group); got == l || got == gone {
		t.Fatalf("n%d leads while killed", got)
	}
	if _, err := send(ctxFor(t), cl, "after the move"); err != nil {
		t.Fatal(err)
	}
}

// TestBootstrapCountsAReplicaWithoutFiles: the bootstrapper waits for
// every peer to say it holds no Raft state for the group; a peer on which
// the group cannot even be created (a file where its directory goes)
// says so by refusing GroupStatus with the group absent, so the other two
// still form the group.
func TestBootstrapCountsAReplicaWithoutFiles(t *testing.T) {
	c := nodetest.Start(t, nodetest.Options{Configure: fastElections})
	bad := filepath.Join(c.Dir(2), "groups", fmt.Sprint(group))
	if err := os.WriteFile(bad, []byte("not a directory"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := c.Node(2).EnsureGroup(group, c.Peers()); err == nil {
		t.Fatal("the group opened on n2 over a file")
	}
	for i := range 2 {
		if err := c.Node(i).EnsureGroup(group, c.Peers()); err != nil {
			t.Fatal(err)
		}
	}
	if got := c.Leader(group); got == 2 {
		t.Fatalf("n%d leads without the group open", got)
	}
}
