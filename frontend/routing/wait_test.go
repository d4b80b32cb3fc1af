package routing

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// pollNode answers long-poll receives: as a leader that holds the poll
// for hold and then loses its term, pointing at hint; or, without a hint,
// as the leader, at once and empty.
type pollNode struct {
	partitionpb.UnimplementedPartitionServiceServer
	hold time.Duration
	hint string

	mu       sync.Mutex
	receives []*partitionpb.ReceiveRequest
	accepts  []*partitionpb.AcceptSessionRequest
}

// holdAndLose keeps a long poll for p.hold, then refuses it as a leader that lost
// its term.
func (p *pollNode) holdAndLose(ctx context.Context) error {
	select {
	case <-time.After(p.hold):
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	}
	st, err := status.New(codes.FailedPrecondition, "not the leader").WithDetails(&partitionpb.LeaderHint{LeaderId: p.hint})
	if err != nil {
		panic(err)
	}
	return st.Err()
}

func (p *pollNode) AcceptSession(ctx context.Context, req *partitionpb.AcceptSessionRequest) (*partitionpb.AcceptSessionResponse, error) {
	p.mu.Lock()
	p.accepts = append(p.accepts, req)
	p.mu.Unlock()
	if p.hint == "" {
		return &partitionpb.AcceptSessionResponse{Result: &partitionpb.Result{SessionId: "s1"}, Token: req.Token}, nil
	}
	return nil, p.holdAndLose(ctx)
}

func (p *pollNode) Receive(ctx context.Context, req *partitionpb.ReceiveRequest) (*partitionpb.ReceiveResponse, error) {
	p.mu.Lock()
	p.receives = append(p.receives, req)
	p.mu.Unlock()
	if p.hint == "" {
		return &partitionpb.ReceiveResponse{Result: &partitionpb.Result{}}, nil
	}
	return nil, p.holdAndLose(ctx)
}

// TestRetriedPollWaitsWhatIsLeft: a long-poll receive whose leader lost
// its term two seconds into a five-second wait goes on at the new leader
// for the three seconds left, not five more (a client's receive would
// otherwise outlast its timeout), as a repeat of the same request. Under
// testing/synctest the router's clock is virtual, so the wait left is
// exact.
func TestRetriedPollWaitsWhatIsLeft(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := &pollNode{hold: 2 * time.Second, hint: "b"}
		b := &pollNode{}
		r, e := localRouter(t, "a", []string{"a", "b"}, a, b)
		start := time.Now()
		if _, err := r.Receive(t.Context(), e, &partitionpb.ReceiveRequest{MaxCount: 1, WaitMs: 5000}); err != nil {
			t.Fatal(err)
		}
		if len(a.receives) != 1 || len(b.receives) != 1 {
			t.Fatalf("receives a %d, b %d; want one each", len(a.receives), len(b.receives))
		}
		first, retry := a.receives[0], b.receives[0]
		if first.WaitMs != 5000 || retry.WaitMs != 3000 {
			t.Fatalf("waits %d ms then %d ms; want 5000 then the 3000 left", first.WaitMs, retry.WaitMs)
		}
		if first.Repeat || !retry.Repeat || len(first.RequestId) != 16 || !bytes.Equal(first.RequestId, retry.RequestId) {
			t.Fatalf("request ids %x, %x, repeat %v, %v; want one id, the retry a repeat", first.RequestId, retry.RequestId, first.Repeat, retry.Repeat)
		}
		if took := time.Since(start); took != 2*time.Second {
			t.Fatalf("the receive took %v; want the 2 s a held it", took)
		}
	})
}

// TestRetriedAcceptNextRepeats: an accept-next whose leader lost its term
// two seconds into its wait (it may have committed the lock before) goes
// on at the new leader under the same request id and token, marked a
// repeat, for the wait left: the node then proposes at once, and a session
// the first attempt locked comes back to this receiver instead of staying
// locked for nobody (node.TestRetriedAcceptNext). An accept of a named
// session needs no mark: the node always proposes it.
func TestRetriedAcceptNextRepeats(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := &pollNode{hold: 2 * time.Second, hint: "b"}
		b := &pollNode{}
		r, e := localRouter(t, "a", []string{"a", "b"}, a, b)
		res, token, err := r.AcceptSession(t.Context(), e, &partitionpb.AcceptSessionRequest{Next: true, WaitMs: 5000})
		if err != nil || res.GetSessionId() != "s1" {
			t.Fatalf("accept next: %v, %v", res, err)
		}
		if len(a.accepts) != 1 || len(b.accepts) != 1 {
			t.Fatalf("accepts a %d, b %d; want one each", len(a.accepts), len(b.accepts))
		}
		first, retry := a.accepts[0], b.accepts[0]
		if first.Repeat || !retry.Repeat {
			t.Fatalf("repeat %v, then %v; want the retry marked a repeat", first.Repeat, retry.Repeat)
		}
		if len(first.RequestId) != 16 || !bytes.Equal(first.RequestId, retry.RequestId) || !bytes.Equal(first.Token, retry.Token) || !bytes.Equal(token, first.Token) {
			t.Fatalf("request ids %x, %x, tokens %x, %x, answered %x; want one id and token throughout", first.RequestId, retry.RequestId, first.Token, retry.Token, token)
		}
		if first.WaitMs != 5000 || retry.WaitMs != 3000 {
			t.Fatalf("waits %d ms then %d ms; want 5000 then the 3000 left", first.WaitMs, retry.WaitMs)
		}
	})
}

// unconfiguredNode answers AcceptSession as a partition that does not know
// the entity yet (it was created a moment ago) for its first misses
// attempts, then with a session.
type unconfiguredNode struct {
	partitionpb.UnimplementedPartitionServiceServer
	misses  int
	accepts []*partitionpb.AcceptSessionRequest
}

func (n *unconfiguredNode) AcceptSession(_ context.Context, req *partitionpb.AcceptSessionRequest) (*partitionpb.AcceptSessionResponse, error) {
	n.accepts = append(n.accepts, req)
	if len(n.accepts) <= n.misses {
		return &partitionpb.AcceptSessionResponse{Result: &partitionpb.Result{Code: partitionpb.ResultCode_RESULT_ENTITY_NOT_FOUND, Description: "partition: entity not found"}}, nil
	}
	return &partitionpb.AcceptSessionResponse{Result: &partitionpb.Result{SessionId: "s1"}, Token: req.Token}, nil
}

// TestAcceptOfANewEntityWaitsForItsPartition: an accept that reaches a
// partition that does not know the entity the routing table names yet is
// tried again, as a send or a receive is, instead of failing the client's
// attach with not-found (TestDevSessionsConcurrent's first accept-next,
// made at once after the queue's creation, saw that under load).
func TestAcceptOfANewEntityWaitsForItsPartition(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := &unconfiguredNode{misses: 2}
		r, e := localRouter(t, "a", []string{"a"}, n)
		res, _, err := r.AcceptSession(t.Context(), e, &partitionpb.AcceptSessionRequest{Next: true, WaitMs: 5000})
		if err != nil || res.GetSessionId() != "s1" {
			t.Fatalf("accept next of a new entity: %v, %v; want s1 once the partition knows it", res, err)
		}
		if len(n.accepts) != 3 {
			t.Fatalf("%d attempts; want 3", len(n.accepts))
		}
	})
}
