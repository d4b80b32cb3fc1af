package routing

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quorumbus/quorumbus/frontend"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// TestSendOnceGivesUpAndServingFollows: SendOnce asks each replica once
// and fails with ErrUnavailable when none leads (a that does not answer,
// b that knows no leader), without waiting for an election; from then on
// the group does not serve although the routing table records it with a
// quorum, until a call to it succeeds.
func TestSendOnceGivesUpAndServingFollows(t *testing.T) {
	a, b := &fakeNode{unavailable: true}, &fakeNode{noLeader: true}
	r, e := localRouter(t, "a", []string{"a", "b"}, a, b)
	r.mu.Lock()
	r.table.groups[7].HasQuorum = true
	r.mu.Unlock()
	if !r.Serving(e, 0) {
		t.Fatal("a group recorded with a quorum does not serve before any call")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	_, err := r.SendOnce(ctx, e, 0, []*partitionpb.NewMessage{{MessageId: "1"}})
	if !errors.Is(err, frontend.ErrUnavailable) {
		t.Fatalf("SendOnce to a group without a leader: %v, want ErrUnavailable", err)
	}
	if len(a.sends) != 1 || len(b.sends) != 1 {
		t.Fatalf("attempts: a %d, b %d; want one each", len(a.sends), len(b.sends))
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("SendOnce gave up after %v", took)
	}
	if r.Serving(e, 0) {
		t.Fatal("the group serves after no replica took a send")
	}
	a.unavailable = false
	if _, err := r.Send(ctx, e, 0, []*partitionpb.NewMessage{{MessageId: "2"}}); err != nil {
		t.Fatal(err)
	}
	if !r.Serving(e, 0) {
		t.Fatal("the group does not serve after a send succeeded")
	}
}

// TestLeaderHealthForgets: a group whose calls failed serves again after
// failedFor without a call, and a leader change (a refusal naming the
// leader) or a call its caller cancelled is no failure.
func TestLeaderHealthForgets(t *testing.T) {
	var h leaderHealth
	now := time.Now()
	h.noted(1, context.Canceled, now)
	h.noted(1, hintError("b"), now)
	if !h.answering(1, now) {
		t.Fatal("a cancelled call or a leader hint counted as a failure")
	}
	h.noted(1, hintError(""), now)
	if h.answering(1, now.Add(failedFor-time.Millisecond)) {
		t.Fatal("a refusal naming no leader did not count")
	}
	if !h.answering(1, now.Add(failedFor)) {
		t.Fatalf("still failed after %v", failedFor)
	}
}

// hintError is a follower's refusal naming leader ("": none known).
func hintError(leader string) error {
	st, err := status.New(codes.FailedPrecondition, "not the leader").WithDetails(&partitionpb.LeaderHint{LeaderId: leader})
	if err != nil {
		panic(err)
	}
	return st.Err()
}
