package node_test

import (
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/quorumbus/quorumbus/node/nodetest"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// TestRetriedAcceptNext: an accept-next whose AcceptSession committed but
// whose answer was lost (the attempt timed out, or the leader lost its
// term after proposing) is tried again under the same request id and
// token. The session it locked is no longer available, so a retry that
// proposed only when a session looks available waited its whole wait and
// answered none, and the session stayed locked for nobody until its lock
// ran out (TestDevSessionsConcurrent once ended with a session nobody
// could accept). A retry marked repeat proposes at once, and the next
// leader answers it with the session the first attempt locked; the
// receiver can release it.
func TestRetriedAcceptNext(t *testing.T) {
	c := nodetest.Start(t, nodetest.Options{Groups: []uint64{group}, Configure: fastElections})
	cl := c.Client(group)
	upsertConfig(t, cl, &partitionpb.EntityConfig{EntityId: entity, Name: "orders", LockDurationMs: 60_000, MaxDeliveryCount: 10, RequiresSession: true})
	sendMessages(t, cl, &partitionpb.NewMessage{MessageId: "m1", SessionId: "s1", Bare: []byte("m1")})

	id := []byte("accept-next-1---") // a lock token's 16 bytes
	req := &partitionpb.AcceptSessionRequest{EntityId: entity, Next: true, WaitMs: 5000, Token: id, RequestId: id}
	first, err := cl.AcceptSession(ctxFor(t), req)
	if err != nil || first.Result.SessionId != "s1" {
		t.Fatalf("accept next: %v, %v", first, err)
	}

	// The answer is lost with the leader, and the retry comes to the next
	// one as a repeat.
	old := c.Leader(group)
	c.Kill(old)
	if now := c.Leader(group); now == old {
		t.Fatalf("n%d still leads after it was killed", old)
	}
	retry := proto.CloneOf(req)
	retry.Repeat = true
	start := time.Now()
	again, err := cl.AcceptSession(ctxFor(t), retry)
	if err != nil || again.Result.SessionId != "s1" || !proto.Equal(again.Result, first.Result) {
		t.Fatalf("repeated accept next: %v, %v; want the first answer %v", again, err, first)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("the repeat answered after %v; want at once, not after waiting for another session", took)
	}
	// The receiver now holds the lock's token and gives the session back.
	rel, err := cl.ReleaseSession(ctxFor(t), &partitionpb.ReleaseSessionRequest{Release: &partitionpb.ReleaseSession{
		EntityId: entity, SessionId: "s1", Token: again.Token}})
	if err != nil || rel.Result.Code != partitionpb.ResultCode_RESULT_OK {
		t.Fatalf("release of the session the repeat answered: %v, %v", rel, err)
	}
	next, err := cl.AcceptSession(ctxFor(t), &partitionpb.AcceptSessionRequest{EntityId: entity, Next: true, WaitMs: 1000})
	if err != nil || next.Result.SessionId != "s1" {
		t.Fatalf("accept next after the release: %v, %v; want s1 at once", next, err)
	}

	// A repeat whose first attempt locked nothing waits as a first attempt
	// does, and gets a session that arrives meanwhile.
	other := []byte("accept-next-2---")
	late := &partitionpb.AcceptSessionRequest{EntityId: entity, Next: true, WaitMs: 10_000, Token: other, RequestId: other, Repeat: true}
	got := make(chan *partitionpb.AcceptSessionResponse, 1)
	go func() {
		r, err := cl.AcceptSession(ctxFor(t), late)
		if err != nil {
			t.Errorf("repeated accept next that waits: %v", err)
		}
		got <- r
	}()
	time.Sleep(200 * time.Millisecond)
	sendMessages(t, cl, &partitionpb.NewMessage{MessageId: "m2", SessionId: "s2", Bare: []byte("m2")})
	if r := <-got; r.GetResult().GetSessionId() != "s2" {
		t.Fatalf("repeated accept next that waited: %v; want s2, which arrived meanwhile", r)
	}
}
