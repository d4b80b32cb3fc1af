package node_test

import (
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/node/nodetest"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

func upsertConfig(t testing.TB, c partitionpb.PartitionServiceClient, cfg *partitionpb.EntityConfig) {
	t.Helper()
	cfg.EntityId = entity
	if cfg.Name == "" {
		cfg.Name = "orders"
	}
	if _, err := c.UpsertEntity(ctxFor(t), &partitionpb.UpsertEntityRequest{Config: cfg}); err != nil {
		t.Fatalf("UpsertEntity: %v", err)
	}
}

func sendMessages(t testing.TB, c partitionpb.PartitionServiceClient, msgs ...*partitionpb.NewMessage) []uint64 {
	t.Helper()
	resp, err := c.Send(ctxFor(t), &partitionpb.SendRequest{EntityId: entity, Messages: msgs})
	if err != nil {
		t.Fatalf("Send: %v", err)
	}
	if r := resp.Result; r.Code != partitionpb.ResultCode_RESULT_OK || len(r.SequenceNumbers) != len(msgs) {
		t.Fatalf("Send result %v", r)
	}
	return resp.Result.SequenceNumbers
}

func peek(t testing.TB, c partitionpb.PartitionServiceClient, sub partitionpb.SubQueue, from uint64) []*partitionpb.Message {
	t.Helper()
	resp, err := c.Peek(ctxFor(t), &partitionpb.PeekRequest{EntityId: entity, SubQueue: sub, FromSequenceNumber: from, MaxCount: 100})
	if err != nil {
		t.Fatalf("Peek: %v", err)
	}
	return resp.Messages
}

// TestScheduledMessages: a scheduled message shows in peek as scheduled
// under the number Send returned; cancel removes one; the leader activates
// the other when its time comes, under a new sequence number, and it is
// received.
func TestScheduledMessages(t *testing.T) {
	c := nodetest.StartCluster(t, 3, group)
	cl := c.Client(group)
	upsertConfig(t, cl, &partitionpb.EntityConfig{})
	now := time.Now().UnixMilli()
	seqs := sendMessages(t, cl,
		&partitionpb.NewMessage{MessageId: "soon", Bare: []byte("soon"), ScheduledEnqueueTimeMs: now + 1500},
		&partitionpb.NewMessage{MessageId: "later", Bare: []byte("later"), ScheduledEnqueueTimeMs: now + 3_600_000})
	peeked := peek(t, cl, partitionpb.SubQueue_SUB_QUEUE_MAIN, 0)
	if len(peeked) != 2 {
		t.Fatalf("peeked %d messages, want 2", len(peeked))
	}
	for i, m := range peeked {
		if m.SequenceNumber != seqs[i] || m.State != partitionpb.MessageState_MESSAGE_STATE_SCHEDULED {
			t.Fatalf("peeked %v, want scheduled %d", m, seqs[i])
		}
	}
	if st := stats(t, cl); st.ScheduledMessages != 2 {
		t.Fatalf("stats %v", st)
	}
	resp, err := cl.CancelScheduled(ctxFor(t), &partitionpb.CancelScheduledRequest{Cancel: &partitionpb.CancelScheduled{
		EntityId: entity, SequenceNumbers: []uint64{seqs[1], 12345},
	}})
	if err != nil || resp.Result.Code != partitionpb.ResultCode_RESULT_OK {
		t.Fatalf("CancelScheduled: %v, %v", resp, err)
	}
	if p := peek(t, cl, partitionpb.SubQueue_SUB_QUEUE_MAIN, 0); len(p) != 1 || p[0].SequenceNumber != seqs[0] {
		t.Fatalf("peek after cancel: %v", p)
	}
	got := receive(t, cl, 1, false, 20_000)
	if len(got) != 1 || string(got[0].Bare) != "soon" {
		t.Fatalf("received %v", got)
	}
	m := got[0]
	if m.SequenceNumber <= seqs[1] || m.State != partitionpb.MessageState_MESSAGE_STATE_ACTIVE || m.EnqueuedTimeMs < now+1500 {
		t.Fatalf("activated message %v: want a new sequence number above %d, enqueued at activation", m, seqs[1])
	}
	if r := settle(t, cl, partitionpb.Disposition_DISPOSITION_COMPLETE, m); r.Code != partitionpb.ResultCode_RESULT_OK {
		t.Fatalf("complete: %v", r)
	}
	if st := stats(t, cl); st.ScheduledMessages != 0 || st.ActiveMessages != 0 {
		t.Fatalf("stats at the end %v", st)
	}
}

// TestExpiryToDeadLetter: the leader expires a message by its time to live
// into the dead-letter sub-queue, where it is peeked, received and
// completed.
func TestExpiryToDeadLetter(t *testing.T) {
	c := nodetest.StartCluster(t, 3, group)
	cl := c.Client(group)
	upsertConfig(t, cl, &partitionpb.EntityConfig{DefaultTtlMs: 300, DeadLetteringOnExpiration: true})
	seq := sendMessages(t, cl, &partitionpb.NewMessage{MessageId: "ttl", Bare: []byte("ttl")})[0]
	c.WaitFor("the message to expire", func() bool {
		st, err := cl.Stats(ctxFor(t), &partitionpb.StatsRequest{EntityId: entity})
		return err == nil && st.DeadLetterMessages == 1 && st.ActiveMessages == 0
	})
	p := peek(t, cl, partitionpb.SubQueue_SUB_QUEUE_DEAD_LETTER, 0)
	if len(p) != 1 || p[0].SequenceNumber != seq || p[0].DeadLetterReason != "TTLExpiredException" || p[0].DeadLetterSource != "orders" {
		t.Fatalf("dead-letter peek: %v", p)
	}
	resp, err := cl.Receive(ctxFor(t), &partitionpb.ReceiveRequest{EntityId: entity, SubQueue: partitionpb.SubQueue_SUB_QUEUE_DEAD_LETTER, MaxCount: 5})
	if err != nil || len(resp.Result.Messages) != 1 {
		t.Fatalf("receive from the dead-letter queue: %v, %v", resp, err)
	}
	sr, err := cl.Settle(ctxFor(t), &partitionpb.SettleRequest{Settle: &partitionpb.Settle{
		EntityId: entity, SubQueue: partitionpb.SubQueue_SUB_QUEUE_DEAD_LETTER, LockTokens: [][]byte{resp.Result.Messages[0].LockToken},
	}})
	if err != nil || sr.Result.Code != partitionpb.ResultCode_RESULT_OK {
		t.Fatalf("complete in the dead-letter queue: %v, %v", sr, err)
	}
	if p := peek(t, cl, partitionpb.SubQueue_SUB_QUEUE_DEAD_LETTER, 0); len(p) != 0 {
		t.Fatalf("dead-letter queue after complete: %v", p)
	}
}

// TestDedupSurvivesFailover: a message id sent before a leader dies is a
// duplicate for the new leader: acknowledged with the first number, dropped.
func TestDedupSurvivesFailover(t *testing.T) {
	c := nodetest.Start(t, nodetest.Options{Groups: []uint64{group}, Configure: fastElections})
	cl := c.Client(group)
	upsertConfig(t, cl, &partitionpb.EntityConfig{RequiresDuplicateDetection: true})
	first := sendMessages(t, cl, &partitionpb.NewMessage{MessageId: "X", Bare: []byte("x1")})[0]
	old := c.Leader(group)
	c.Kill(old)
	again := sendMessages(t, cl, &partitionpb.NewMessage{MessageId: "X", Bare: []byte("x2")},
		&partitionpb.NewMessage{MessageId: "Y", Bare: []byte("y")})
	if again[0] != first || again[1] == first {
		t.Fatalf("after failover: numbers %v, want %d first", again, first)
	}
	if st := stats(t, cl); st.ActiveMessages != 2 {
		t.Fatalf("stats %v, want 2 active", st)
	}
	if p := peek(t, cl, partitionpb.SubQueue_SUB_QUEUE_MAIN, 0); len(p) != 2 || string(p[0].Bare) != "x1" {
		t.Fatalf("peek %v", p)
	}
}

// TestReceiveDeferred: a deferred message is not received by Receive, only
// by its sequence number; abandoned it stays deferred; completed it is
// gone, and asking again finds nothing.
func TestReceiveDeferred(t *testing.T) {
	c := nodetest.StartCluster(t, 3, group)
	cl := c.Client(group)
	upsertEntity(t, cl, 60_000)
	seq := sendMessages(t, cl, &partitionpb.NewMessage{MessageId: "d", Bare: []byte("d")})[0]
	msgs := receive(t, cl, 1, false, 0)
	if r := settle(t, cl, partitionpb.Disposition_DISPOSITION_DEFER, msgs...); r.Code != partitionpb.ResultCode_RESULT_OK {
		t.Fatalf("defer: %v", r)
	}
	if got := receive(t, cl, 1, false, 0); len(got) != 0 {
		t.Fatalf("Receive returned a deferred message: %v", got)
	}
	deferred := func() *partitionpb.Result {
		resp, err := cl.ReceiveDeferred(ctxFor(t), &partitionpb.ReceiveDeferredRequest{EntityId: entity, SequenceNumbers: []uint64{seq}})
		if err != nil {
			t.Fatalf("ReceiveDeferred: %v", err)
		}
		return resp.Result
	}
	r := deferred()
	if r.Code != partitionpb.ResultCode_RESULT_OK || len(r.Messages) != 1 || len(r.Messages[0].LockToken) != 16 ||
		r.Messages[0].State != partitionpb.MessageState_MESSAGE_STATE_DEFERRED {
		t.Fatalf("ReceiveDeferred: %v", r)
	}
	if r := settle(t, cl, partitionpb.Disposition_DISPOSITION_ABANDON, r.Messages...); r.Code != partitionpb.ResultCode_RESULT_OK {
		t.Fatalf("abandon: %v", r)
	}
	if p := peek(t, cl, partitionpb.SubQueue_SUB_QUEUE_MAIN, 0); len(p) != 1 || p[0].State != partitionpb.MessageState_MESSAGE_STATE_DEFERRED {
		t.Fatalf("peek after abandon: %v", p)
	}
	r = deferred()
	if r.Code != partitionpb.ResultCode_RESULT_OK || len(r.Messages) != 1 || r.Messages[0].DeliveryCount != 1 {
		t.Fatalf("ReceiveDeferred after abandon: %v", r)
	}
	if r := settle(t, cl, partitionpb.Disposition_DISPOSITION_COMPLETE, r.Messages...); r.Code != partitionpb.ResultCode_RESULT_OK {
		t.Fatalf("complete: %v", r)
	}
	if r := deferred(); r.Code != partitionpb.ResultCode_RESULT_INVALID {
		t.Fatalf("ReceiveDeferred of a completed message: %v, want INVALID (message not found)", r)
	}
}
