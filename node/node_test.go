package node_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/quorumbus/quorumbus/node"
	"github.com/quorumbus/quorumbus/node/nodetest"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

const (
	group  = 1
	entity = 42
)

func ctxFor(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), nodetest.Timeout)
	t.Cleanup(cancel)
	return ctx
}

func upsertEntity(t testing.TB, c partitionpb.PartitionServiceClient, lockMs int64) {
	t.Helper()
	_, err := c.UpsertEntity(ctxFor(t), &partitionpb.UpsertEntityRequest{Config: &partitionpb.EntityConfig{
		EntityId: entity, Name: "orders", LockDurationMs: lockMs, MaxDeliveryCount: 10,
	}})
	if err != nil {
		t.Fatalf("UpsertEntity: %v", err)
	}
}

// send sends one message under a request id of its own, as front-ends
// do: the client retries an attempt that timed out (a loaded machine), and
// the id makes the partition answer a retry of an applied send with its
// first result instead of storing the message twice.
func send(ctx context.Context, c partitionpb.PartitionServiceClient, body string) (uint64, error) {
	resp, err := c.Send(ctx, &partitionpb.SendRequest{EntityId: entity, RequestId: []byte(rand.Text()), Messages: []*partitionpb.NewMessage{
		{MessageId: body, Bare: []byte(body)},
	}})
	if err != nil {
		return 0, err
	}
	if r := resp.Result; r.Code != partitionpb.ResultCode_RESULT_OK || len(r.SequenceNumbers) != 1 {
		return 0, fmt.Errorf("send result %v", r)
	}
	return resp.Result.SequenceNumbers[0], nil
}

func receive(t testing.TB, c partitionpb.PartitionServiceClient, max uint32, andDelete bool, waitMs int64) []*partitionpb.Message {
	t.Helper()
	resp, err := c.Receive(ctxFor(t), &partitionpb.ReceiveRequest{EntityId: entity, MaxCount: max, ReceiveAndDelete: andDelete, WaitMs: waitMs})
	if err != nil {
		t.Fatalf("Receive: %v", err)
	}
	if resp.Result.Code != partitionpb.ResultCode_RESULT_OK {
		t.Fatalf("Receive result %v", resp.Result)
	}
	return resp.Result.Messages
}

func settle(t testing.TB, c partitionpb.PartitionServiceClient, d partitionpb.Disposition, msgs ...*partitionpb.Message) *partitionpb.Result {
	t.Helper()
	var tokens [][]byte
	for _, m := range msgs {
		tokens = append(tokens, m.LockToken)
	}
	resp, err := c.Settle(ctxFor(t), &partitionpb.SettleRequest{Settle: &partitionpb.Settle{EntityId: entity, LockTokens: tokens, Disposition: d}})
	if err != nil {
		t.Fatalf("Settle: %v", err)
	}
	return resp.Result
}

func stats(t testing.TB, c partitionpb.PartitionServiceClient) *partitionpb.StatsResponse {
	t.Helper()
	st, err := c.Stats(ctxFor(t), &partitionpb.StatsRequest{EntityId: entity})
	if err != nil {
		t.Fatalf("Stats: %v", err)
	}
	return st
}

// groupCounters sums, over the running nodes, the Raft entries proposed as
// leader and the requests they carried.
// waitCompacted waits until the leader has snapshotted well past index
// (2 x TrailingLogs 8), so that a follower stopped at index can only catch
// up through InstallSnapshot.
func waitCompacted(c *nodetest.Cluster, leader int, index uint64) {
	c.WaitFor("the leader to compact its log", func() bool {
		st, err := c.Node(leader).Group(group)
		return err == nil && st.SnapshotIndex > index+uint64(2*8)
	})
}

// waitCaughtUpBySnapshot waits until the restarted node lagging has applied
// what the leader has, through a snapshot taken past index. Raft records
// an installed snapshot only after the machine has restored it, so both
// are checked.
func waitCaughtUpBySnapshot(c *nodetest.Cluster, leader, lagging int, index uint64) {
	c.WaitFor("the restarted node to catch up through a snapshot", func() bool {
		want, err1 := c.Node(leader).Group(group)
		got, err2 := c.Node(lagging).Group(group)
		return err1 == nil && err2 == nil && got.AppliedIndex == want.AppliedIndex && got.SnapshotIndex > index
	})
}

func groupCounters(t testing.TB, c *nodetest.Cluster) (entries, requests uint64) {
	t.Helper()
	for i := range c.Len() {
		if n := c.Node(i); n != nil {
			st, err := n.Group(group)
			if err != nil {
				t.Fatal(err)
			}
			entries += st.Entries
			requests += st.Requests
		}
	}
	return entries, requests
}

// TestSendReceiveSettle sends 1,000 messages from many goroutines, checks
// that group commit packed them into fewer Raft entries, then receives them
// peek-lock, completes them, and finds the queue empty.
func TestSendReceiveSettle(t *testing.T) {
	c := nodetest.StartCluster(t, 3, group)
	cl := c.Client(group)
	upsertEntity(t, cl, 60_000)
	e0, r0 := groupCounters(t, c)

	const senders, perSender = 50, 20
	var (
		mu   sync.Mutex
		seqs = map[uint64]bool{}
		wg   sync.WaitGroup
	)
	ctx := ctxFor(t)
	for s := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perSender {
				seq, err := send(ctx, cl, fmt.Sprintf("m-%d-%d", s, i))
				if err != nil {
					t.Errorf("send: %v", err)
					return
				}
				mu.Lock()
				if seqs[seq] {
					t.Errorf("sequence number %d assigned twice", seq)
				}
				seqs[seq] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	entries, requests := groupCounters(t, c)
	entries, requests = entries-e0, requests-r0
	t.Logf("group commit: %d sends in %d raft entries (%.1f per entry)", requests, entries, float64(requests)/float64(entries))
	if requests != senders*perSender {
		t.Errorf("leader counted %d requests, want %d", requests, senders*perSender)
	}
	if entries >= requests {
		t.Errorf("group commit packed nothing: %d entries for %d requests", entries, requests)
	}

	if st := stats(t, cl); st.ActiveMessages != senders*perSender {
		t.Errorf("stats before receive: %v", st)
	}
	got := map[uint64]bool{}
	for len(got) < senders*perSender {
		msgs := receive(t, cl, 100, false, 1000)
		if len(msgs) == 0 {
			t.Fatalf("received %d of %d, then nothing", len(got), senders*perSender)
		}
		for _, m := range msgs {
			if got[m.SequenceNumber] || !seqs[m.SequenceNumber] {
				t.Fatalf("received sequence number %d twice or never sent", m.SequenceNumber)
			}
			if len(m.LockToken) != 16 || m.DeliveryCount != 0 {
				t.Fatalf("message %d: lock token %x, delivery count %d", m.SequenceNumber, m.LockToken, m.DeliveryCount)
			}
			got[m.SequenceNumber] = true
		}
		if r := settle(t, cl, partitionpb.Disposition_DISPOSITION_COMPLETE, msgs...); r.Code != partitionpb.ResultCode_RESULT_OK {
			t.Fatalf("complete: %v", r)
		}
	}
	if st := stats(t, cl); st.ActiveMessages != 0 || st.LockedMessages != 0 {
		t.Errorf("stats after completing everything: %v", st)
	}
	if msgs := receive(t, cl, 10, false, 0); len(msgs) != 0 {
		t.Errorf("received %d messages from an empty queue", len(msgs))
	}
}

// TestAbandonAndReceiveAndDelete checks redelivery after abandon and the
// receive-and-delete mode, and that Receive waits for a message.
func TestAbandonAndReceiveAndDelete(t *testing.T) {
	c := nodetest.StartCluster(t, 3, group)
	cl := c.Client(group)
	upsertEntity(t, cl, 60_000)
	ctx := ctxFor(t)

	seq, err := send(ctx, cl, "abandoned")
	if err != nil {
		t.Fatal(err)
	}
	first := receive(t, cl, 1, false, 0)
	if len(first) != 1 || first[0].SequenceNumber != seq || first[0].DeliveryCount != 0 {
		t.Fatalf("first delivery: %v", first)
	}
	if r := settle(t, cl, partitionpb.Disposition_DISPOSITION_ABANDON, first...); r.Code != partitionpb.ResultCode_RESULT_OK {
		t.Fatalf("abandon: %v", r)
	}
	again := receive(t, cl, 1, false, 0)
	if len(again) != 1 || again[0].SequenceNumber != seq || again[0].DeliveryCount != 1 {
		t.Fatalf("redelivery: %v", again)
	}
	if string(again[0].Bare) != "abandoned" {
		t.Errorf("redelivered body %q", again[0].Bare)
	}
	// The old token is gone with the abandon.
	if r := settle(t, cl, partitionpb.Disposition_DISPOSITION_COMPLETE, first...); r.Code != partitionpb.ResultCode_RESULT_LOCK_LOST {
		t.Errorf("complete with the abandoned token: %v, want lock lost", r)
	}
	if r := settle(t, cl, partitionpb.Disposition_DISPOSITION_COMPLETE, again...); r.Code != partitionpb.ResultCode_RESULT_OK {
		t.Fatalf("complete: %v", r)
	}

	// Receive-and-delete.
	for i := range 3 {
		if _, err := send(ctx, cl, fmt.Sprintf("rad-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	taken := receive(t, cl, 10, true, 0)
	if len(taken) != 3 {
		t.Fatalf("receive-and-delete took %d messages, want 3", len(taken))
	}
	for _, m := range taken {
		if len(m.LockToken) != 0 {
			t.Errorf("receive-and-delete message %d has lock token %x", m.SequenceNumber, m.LockToken)
		}
	}
	if st := stats(t, cl); st.ActiveMessages != 0 || st.LockedMessages != 0 {
		t.Errorf("stats after receive-and-delete: %v", st)
	}

	// A waiting Receive times out with an empty result, not an error.
	if msgs := receive(t, cl, 1, true, 50); len(msgs) != 0 {
		t.Fatalf("received %v from an empty queue", msgs)
	}
	// A waiting Receive returns the message sent while it waits.
	got := make(chan []*partitionpb.Message, 1)
	go func() {
		resp, err := cl.Receive(ctx, &partitionpb.ReceiveRequest{EntityId: entity, MaxCount: 1, ReceiveAndDelete: true, WaitMs: 20_000})
		if err != nil {
			t.Errorf("waiting Receive: %v", err)
			got <- nil
			return
		}
		got <- resp.Result.Messages
	}()
	if _, err := send(ctx, cl, "late"); err != nil {
		t.Fatal(err)
	}
	if msgs := <-got; len(msgs) != 1 || string(msgs[0].Bare) != "late" {
		t.Errorf("waiting Receive got %v", msgs)
	}

	// A wait-only Receive (max_count 0) answers empty when a message
	// arrives, or at its deadline, and takes nothing.
	if resp, err := cl.Receive(ctx, &partitionpb.ReceiveRequest{EntityId: entity, WaitMs: 50}); err != nil || len(resp.Result.Messages) != 0 {
		t.Fatalf("wait-only Receive on an empty queue: %v, %v", resp, err)
	}
	answered := make(chan error, 1)
	go func() {
		resp, err := cl.Receive(ctx, &partitionpb.ReceiveRequest{EntityId: entity, WaitMs: 20_000})
		if err == nil && len(resp.Result.Messages) != 0 {
			err = fmt.Errorf("a wait-only Receive took %d messages", len(resp.Result.Messages))
		}
		answered <- err
	}()
	time.Sleep(100 * time.Millisecond)
	if _, err := send(ctx, cl, "announced"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-answered:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a wait-only Receive did not answer when a message arrived")
	}
	if msgs := receive(t, cl, 10, true, 0); len(msgs) != 1 || string(msgs[0].Bare) != "announced" {
		t.Errorf("after the wait-only Receive, the queue held %v", msgs)
	}
	// Without a wait, max_count 0 is a mistake.
	if _, err := cl.Receive(ctx, &partitionpb.ReceiveRequest{EntityId: entity}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("Receive with max_count 0 and no wait: %v, want InvalidArgument", err)
	}
}

// TestRouting checks the answers of a follower (not leader, with a hint)
// and of a node that does not host the group.
func TestRouting(t *testing.T) {
	c := nodetest.StartCluster(t, 3, group)
	leader := c.Leader(group)
	follower := (leader + 1) % c.Len()
	cc, err := grpc.NewClient(c.Addr(follower), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	raw := partitionpb.NewPartitionServiceClient(cc)

	_, err = raw.Stats(ctxFor(t), &partitionpb.StatsRequest{GroupId: group, EntityId: entity})
	st := status.Convert(err)
	if st.Code() != codes.FailedPrecondition {
		t.Fatalf("follower answered %v, want FailedPrecondition", err)
	}
	var hint *partitionpb.LeaderHint
	for _, d := range st.Details() {
		if h, ok := d.(*partitionpb.LeaderHint); ok {
			hint = h
		}
	}
	if hint == nil || hint.LeaderAddr != c.Addr(leader) || hint.LeaderId != c.Node(leader).ID() || hint.GroupId != group {
		t.Errorf("leader hint %v, want %s at %s", hint, c.Node(leader).ID(), c.Addr(leader))
	}

	// GroupStats as Stats: only the leader answers, and it leaves out
	// what the group does not hold.
	if _, err := raw.GroupStats(ctxFor(t), &partitionpb.GroupStatsRequest{GroupId: group}); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("follower answered GroupStats with %v, want FailedPrecondition", err)
	}
	upsertEntity(t, c.Client(group), 60_000)
	if _, err := send(ctxFor(t), c.Client(group), "counted"); err != nil {
		t.Fatal(err)
	}
	gs, err := c.Client(group).GroupStats(ctxFor(t), &partitionpb.GroupStatsRequest{Entities: []*partitionpb.EntityPartitionRef{{EntityId: entity}, {EntityId: 7}}})
	if err != nil || len(gs.GetEntities()) != 1 || gs.Entities[0].EntityId != entity || gs.Entities[0].Stats.ActiveMessages != 1 || gs.Entities[0].Stats.AccessedAtMs == 0 {
		t.Errorf("GroupStats: %v, %v; want the one entity the group holds, one message, accessed", gs, err)
	}

	_, err = raw.Send(ctxFor(t), &partitionpb.SendRequest{GroupId: 999, EntityId: entity})
	if status.Code(err) != codes.NotFound {
		t.Errorf("unknown group: %v, want NotFound", err)
	}

	// An unknown entity is a Result on Send and NotFound with a Result
	// detail on Stats.
	cl := c.Client(group)
	resp, err := cl.Send(ctxFor(t), &partitionpb.SendRequest{EntityId: 7, Messages: []*partitionpb.NewMessage{{Bare: []byte("x")}}})
	if err != nil || resp.Result.Code != partitionpb.ResultCode_RESULT_ENTITY_NOT_FOUND {
		t.Errorf("send to an unknown entity: %v, %v", resp, err)
	}
	_, err = cl.Stats(ctxFor(t), &partitionpb.StatsRequest{EntityId: 7})
	if st := status.Convert(err); st.Code() != codes.NotFound || len(st.Details()) != 1 {
		t.Errorf("stats of an unknown entity: %v (details %v)", err, st.Details())
	}
}

// TestFailover kills the leader while sends go on. Every acknowledged send
// is received exactly once afterwards, and the killed node, restarted,
// catches up.
// senders send from several goroutines until stopped and record what was
// acknowledged, by sequence number.
type senders struct {
	stop context.CancelFunc
	wg   sync.WaitGroup

	mu    sync.Mutex
	acked map[uint64]string
}

// startSenders starts n goroutines sending bodies named prefix-g-i.
func startSenders(t *testing.T, cl partitionpb.PartitionServiceClient, prefix string, n int) *senders {
	ctx, stop := context.WithCancel(ctxFor(t))
	s := &senders{stop: stop, acked: map[uint64]string{}}
	for g := range n {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				body := fmt.Sprintf("%s-%d-%d", prefix, g, i)
				seq, err := send(ctx, cl, body)
				if err != nil {
					continue // not acknowledged: may or may not be there
				}
				s.mu.Lock()
				if prev, dup := s.acked[seq]; dup {
					t.Errorf("sequence number %d acknowledged for %s and %s", seq, prev, body)
				}
				s.acked[seq] = body
				s.mu.Unlock()
			}
		}()
	}
	return s
}

// count is how many sends have been acknowledged so far.
func (s *senders) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.acked)
}

// finish stops the senders and returns what was acknowledged.
func (s *senders) finish() map[uint64]string {
	s.stop()
	s.wg.Wait()
	return s.acked
}

func TestFailover(t *testing.T) {
	c := nodetest.Start(t, nodetest.Options{Groups: []uint64{group}, Configure: fastElections})
	cl := c.Client(group)
	upsertEntity(t, cl, 60_000)

	sn := startSenders(t, cl, "f", 16)
	acks := sn.count
	c.WaitFor("200 acknowledged sends", func() bool { return acks() >= 200 })
	killed := c.Leader(group)
	c.Kill(killed)
	before := acks()
	newLeader := c.Leader(group)
	c.WaitFor("200 sends acknowledged by the new leader", func() bool { return acks() >= before+200 })
	acked := sn.finish()
	t.Logf("killed leader n%d; n%d took over; %d sends acknowledged", killed, newLeader, len(acked))

	// Drain the queue: every acknowledged message exactly once.
	seen := map[uint64]int{}
	for {
		msgs := receive(t, cl, 500, true, 0)
		if len(msgs) == 0 {
			break
		}
		for _, m := range msgs {
			seen[m.SequenceNumber]++
			if body, ok := acked[m.SequenceNumber]; ok && string(m.Bare) != body {
				t.Errorf("sequence number %d holds %q, acknowledged for %q", m.SequenceNumber, m.Bare, body)
			}
		}
	}
	for seq := range acked {
		if seen[seq] != 1 {
			t.Errorf("acknowledged sequence number %d received %d times", seq, seen[seq])
		}
	}
	for seq, n := range seen {
		if n != 1 {
			t.Errorf("sequence number %d received %d times", seq, n)
		}
	}
	t.Logf("received %d messages, %d acknowledged", len(seen), len(acked))

	c.Restart(killed)
	leaderNode := c.Node(c.Leader(group))
	c.WaitFor("the restarted node to catch up", func() bool {
		want, err := leaderNode.Group(group)
		if err != nil {
			return false
		}
		got, err := c.Node(killed).Group(group)
		return err == nil && got.AppliedIndex == want.AppliedIndex && got.AppliedIndex > 0
	})
}

// TestLockSurvivesFailover locks a message, kills the leader, and completes
// the message with the same lock token on the new leader.
func TestLockSurvivesFailover(t *testing.T) {
	c := nodetest.Start(t, nodetest.Options{Groups: []uint64{group}, Configure: fastElections})
	cl := c.Client(group)
	upsertEntity(t, cl, 60_000)
	if _, err := send(ctxFor(t), cl, "locked"); err != nil {
		t.Fatal(err)
	}
	msgs := receive(t, cl, 1, false, 0)
	if len(msgs) != 1 {
		t.Fatalf("received %d messages", len(msgs))
	}
	old := c.Leader(group)
	c.Kill(old)
	if now := c.Leader(group); now == old {
		t.Fatalf("n%d still leads after it was killed", old)
	}
	if r := settle(t, cl, partitionpb.Disposition_DISPOSITION_COMPLETE, msgs...); r.Code != partitionpb.ResultCode_RESULT_OK {
		t.Fatalf("complete on the new leader: %v", r)
	}
	if st := stats(t, cl); st.ActiveMessages != 0 || st.LockedMessages != 0 {
		t.Errorf("stats after complete: %v", st)
	}
}

// TestRetriedRequestsAcrossFailover: a send and a complete repeated with
// their request ids on the next leader, as a front-end retries after an
// ambiguous failure, are answered with the first answers and applied once.
func TestRetriedRequestsAcrossFailover(t *testing.T) {
	c := nodetest.Start(t, nodetest.Options{Groups: []uint64{group}, Configure: fastElections})
	cl := c.Client(group)
	upsertEntity(t, cl, 60_000)
	sendReq := &partitionpb.SendRequest{EntityId: entity, RequestId: []byte("send-1"),
		Messages: []*partitionpb.NewMessage{{MessageId: "once", Bare: []byte("once")}}}
	first, err := cl.Send(ctxFor(t), sendReq)
	if err != nil || first.Result.Code != partitionpb.ResultCode_RESULT_OK {
		t.Fatalf("send: %v, %v", first, err)
	}
	msgs := receive(t, cl, 1, false, 0)
	if len(msgs) != 1 {
		t.Fatalf("received %d messages", len(msgs))
	}
	settleReq := &partitionpb.SettleRequest{RequestId: []byte("settle-1"), Settle: &partitionpb.Settle{
		EntityId: entity, Disposition: partitionpb.Disposition_DISPOSITION_COMPLETE, LockTokens: [][]byte{msgs[0].LockToken}}}
	if r, err := cl.Settle(ctxFor(t), settleReq); err != nil || r.Result.Code != partitionpb.ResultCode_RESULT_OK {
		t.Fatalf("complete: %v, %v", r, err)
	}
	// A deferred message, received by its number under a request id.
	deferSeq := sendMessages(t, cl, &partitionpb.NewMessage{MessageId: "deferred", Bare: []byte("deferred")})[0]
	if r := settle(t, cl, partitionpb.Disposition_DISPOSITION_DEFER, receive(t, cl, 1, false, 0)...); r.Code != partitionpb.ResultCode_RESULT_OK {
		t.Fatalf("defer: %v", r)
	}
	deferReq := &partitionpb.ReceiveDeferredRequest{EntityId: entity, SequenceNumbers: []uint64{deferSeq}, RequestId: []byte("deferred-1")}
	deferred, err := cl.ReceiveDeferred(ctxFor(t), deferReq)
	if err != nil || len(deferred.Result.Messages) != 1 {
		t.Fatalf("receive deferred: %v, %v", deferred, err)
	}
	for _, body := range []string{"locked-1", "locked-2"} {
		if _, err := send(ctxFor(t), cl, body); err != nil {
			t.Fatal(err)
		}
	}
	recvReq := &partitionpb.ReceiveRequest{EntityId: entity, MaxCount: 10, RequestId: []byte("recv-1")}
	locked, err := cl.Receive(ctxFor(t), recvReq)
	if err != nil || len(locked.Result.Messages) != 2 {
		t.Fatalf("receive: %v, %v", locked, err)
	}
	// Not a repeat: nothing is available, so nothing is proposed.
	if r, err := cl.Receive(ctxFor(t), recvReq); err != nil || len(r.Result.Messages) != 0 {
		t.Fatalf("the same receive, not marked a repeat: %v, %v", r, err)
	}

	old := c.Leader(group)
	c.Kill(old)
	if now := c.Leader(group); now == old {
		t.Fatalf("n%d still leads after it was killed", old)
	}
	again, err := cl.Send(ctxFor(t), sendReq)
	if err != nil || !proto.Equal(again.Result, first.Result) {
		t.Fatalf("repeated send on the new leader: %v, %v; first %v", again, err, first)
	}
	if r, err := cl.Settle(ctxFor(t), settleReq); err != nil || r.Result.Code != partitionpb.ResultCode_RESULT_OK {
		t.Fatalf("repeated complete on the new leader: %v, %v", r, err)
	}
	recvReq.Repeat = true
	relocked, err := cl.Receive(ctxFor(t), recvReq)
	if err != nil || !proto.Equal(relocked.Result, locked.Result) {
		t.Fatalf("repeated receive on the new leader: %v, %v; first %v", relocked, err, locked)
	}
	if again, err := cl.ReceiveDeferred(ctxFor(t), deferReq); err != nil || !proto.Equal(again.Result, deferred.Result) {
		t.Fatalf("repeated receive of the deferred message on the new leader: %v, %v; first %v", again, err, deferred)
	}
	if st := stats(t, cl); st.ActiveMessages != 3 || st.LockedMessages != 3 {
		t.Errorf("stats after the repeats: %v, want the three locked messages only (the send stored twice?)", st)
	}
	done := append(relocked.Result.Messages, deferred.Result.Messages...)
	if r := settle(t, cl, partitionpb.Disposition_DISPOSITION_COMPLETE, done...); r.Code != partitionpb.ResultCode_RESULT_OK {
		t.Fatalf("complete of the messages the repeats answered: %v", r)
	}
}

// TestLockExpiry checks that the leader expires locks by itself: a message
// whose lock runs out is delivered again with its delivery counted.
func TestLockExpiry(t *testing.T) {
	c := nodetest.StartCluster(t, 3, group)
	cl := c.Client(group)
	upsertEntity(t, cl, 200) // 200 ms locks
	if _, err := send(ctxFor(t), cl, "expiring"); err != nil {
		t.Fatal(err)
	}
	first := receive(t, cl, 1, false, 0)
	if len(first) != 1 {
		t.Fatalf("received %d messages", len(first))
	}
	again := receive(t, cl, 1, false, 20_000)
	if len(again) != 1 || again[0].SequenceNumber != first[0].SequenceNumber || again[0].DeliveryCount != 1 {
		t.Fatalf("after the lock expired: %v", again)
	}
	if r := settle(t, cl, partitionpb.Disposition_DISPOSITION_COMPLETE, first...); r.Code != partitionpb.ResultCode_RESULT_LOCK_LOST {
		t.Errorf("complete with the expired token: %v, want lock lost", r)
	}
}

func fastElections(_ int, cfg *node.Config) {
	cfg.ElectionTimeout = 500 * time.Millisecond
}

// makeLeader hands the leadership of group to node i. A loaded machine may
// have held an election since the test last looked (a leader steps down
// when a heartbeat round outlasts its lease), so the transfer starts from
// whichever node leads now.
func makeLeader(t *testing.T, c *nodetest.Cluster, i int) {
	t.Helper()
	if from := c.Leader(group); from != i {
		if err := c.Node(from).TransferLeadership(group, c.Peers()[i]); err != nil {
			t.Fatal(err)
		}
	}
	if now := c.Leader(group); now != i {
		t.Fatalf("n%d leads, want n%d", now, i)
	}
}

// TestSnapshotCatchUp restarts a follower after the leader has compacted
// its log past the follower's end: the follower can only catch up through
// InstallSnapshot, which streams the leader's message store over the mux.
// Made leader, it then serves exactly the messages the old leader held.
//
// The test keeps the Raft log in raft-boltdb: raft-wal drops truncated
// entries only a whole segment (64 MiB) at a time and still serves the
// rest, so the leader would send them instead of a snapshot.
func TestSnapshotCatchUp(t *testing.T) {
	c := nodetest.Start(t, nodetest.Options{Groups: []uint64{group}, Configure: func(i int, cfg *node.Config) {
		fastElections(i, cfg)
		cfg.LogStore = node.LogStoreBoltDB
		cfg.SnapshotThreshold = 32
		cfg.SnapshotInterval = 50 * time.Millisecond
		cfg.TrailingLogs = 8
	}})
	cl := c.Client(group)
	upsertEntity(t, cl, 60_000)
	leader := c.Leader(group)
	lagging := (leader + 1) % c.Len()
	before, err := c.Node(lagging).Group(group)
	if err != nil {
		t.Fatal(err)
	}
	c.Kill(lagging)

	ctx := ctxFor(t)
	sent := map[uint64]string{}
	for i := range 200 {
		body := fmt.Sprintf("s-%d", i)
		seq, err := send(ctx, cl, body)
		if err != nil {
			t.Fatal(err)
		}
		sent[seq] = body
	}
	// Settle some, so that the snapshot holds more than fresh messages.
	done := receive(t, cl, 50, false, 0)
	if r := settle(t, cl, partitionpb.Disposition_DISPOSITION_COMPLETE, done...); r.Code != partitionpb.ResultCode_RESULT_OK {
		t.Fatal(r)
	}
	for _, m := range done {
		delete(sent, m.SequenceNumber)
	}
	locked := receive(t, cl, 10, false, 0) // still locked when the snapshot is taken
	waitCompacted(c, leader, before.LastIndex)

	c.Restart(lagging)
	waitCaughtUpBySnapshot(c, leader, lagging, before.LastIndex)

	makeLeader(t, c, lagging)
	st := stats(t, cl)
	// Locked messages count as active, as in Service Bus.
	if st.ActiveMessages != uint64(len(sent)) || st.LockedMessages != uint64(len(locked)) {
		t.Errorf("restored stats %v, want %d messages, %d locked", st, len(sent), len(locked))
	}
	// The locks came across with the snapshot.
	if r := settle(t, cl, partitionpb.Disposition_DISPOSITION_COMPLETE, locked...); r.Code != partitionpb.ResultCode_RESULT_OK {
		t.Errorf("complete the locked messages on the restored node: %v", r)
	}
	for _, m := range locked {
		delete(sent, m.SequenceNumber)
	}
	drainExpecting(t, cl, sent)
	if len(sent) != 0 {
		t.Errorf("%d messages missing after the restore", len(sent))
	}
}

// TestRestoreWhenStoreBehindSnapshot puts back, under a node that caught up
// through a snapshot, the store it had before the install: what a crash
// between Raft keeping the snapshot and the machine restoring it leaves.
// On restart the node must restore the snapshot rather than apply the
// entries after it on top of the old store.
func TestRestoreWhenStoreBehindSnapshot(t *testing.T) {
	c := nodetest.Start(t, nodetest.Options{Groups: []uint64{group}, Configure: func(i int, cfg *node.Config) {
		fastElections(i, cfg)
		cfg.SnapshotThreshold = 32
		cfg.SnapshotInterval = 50 * time.Millisecond
		cfg.TrailingLogs = 8
	}})
	cl := c.Client(group)
	upsertEntity(t, cl, 60_000)
	ctx := ctxFor(t)
	sent := map[uint64]string{}
	sendSome := func(n int, prefix string) {
		for i := range n {
			body := fmt.Sprintf("%s-%d", prefix, i)
			seq, err := send(ctx, cl, body)
			if err != nil {
				t.Fatal(err)
			}
			sent[seq] = body
		}
	}
	sendSome(20, "early")
	leader := c.Leader(group)
	lagging := (leader + 1) % c.Len()
	c.WaitFor("the follower to apply the early messages", func() bool {
		want, err1 := c.Node(leader).Group(group)
		got, err2 := c.Node(lagging).Group(group)
		return err1 == nil && err2 == nil && got.AppliedIndex == want.AppliedIndex
	})
	before, err := c.Node(lagging).Group(group)
	if err != nil {
		t.Fatal(err)
	}
	c.Kill(lagging)
	state := filepath.Join(c.Dir(lagging), "groups", fmt.Sprint(group), "state")
	old := filepath.Join(t.TempDir(), "state")
	if err := os.CopyFS(old, os.DirFS(state)); err != nil {
		t.Fatal(err)
	}

	sendSome(200, "late")
	waitCompacted(c, leader, before.LastIndex)
	c.Restart(lagging)
	waitCaughtUpBySnapshot(c, leader, lagging, before.LastIndex)

	// The crash: Raft kept the snapshot, the store is the old one.
	c.Kill(lagging)
	if err := os.RemoveAll(state); err != nil {
		t.Fatal(err)
	}
	if err := os.CopyFS(state, os.DirFS(old)); err != nil {
		t.Fatal(err)
	}
	c.Restart(lagging)
	c.WaitFor("the restarted node to apply everything", func() bool {
		want, err1 := c.Node(leader).Group(group)
		got, err2 := c.Node(lagging).Group(group)
		return err1 == nil && err2 == nil && got.AppliedIndex == want.AppliedIndex
	})
	makeLeader(t, c, lagging)
	if st := stats(t, cl); st.ActiveMessages != uint64(len(sent)) {
		t.Fatalf("the node that restarted behind its snapshot holds %d messages, want %d", st.ActiveMessages, len(sent))
	}
	drainExpecting(t, cl, sent)
	if len(sent) > 0 {
		t.Errorf("%d messages missing", len(sent))
	}
}

// drainExpecting receives and deletes every message, checks each against
// sent (sequence number -> body) and removes it from sent.
func drainExpecting(t *testing.T, cl partitionpb.PartitionServiceClient, sent map[uint64]string) {
	t.Helper()
	for {
		msgs := receive(t, cl, 500, true, 0)
		if len(msgs) == 0 {
			return
		}
		for _, m := range msgs {
			if sent[m.SequenceNumber] != string(m.Bare) {
				t.Errorf("message %d holds %q, want %q", m.SequenceNumber, m.Bare, sent[m.SequenceNumber])
			}
			delete(sent, m.SequenceNumber)
		}
	}
}
