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
}

func (p *pollNode) Receive(ctx context.Context, req *partitionpb.ReceiveRequest) (*partitionpb.ReceiveResponse, error) {
	p.mu.Lock()
	p.receives = append(p.receives, req)
	p.mu.Unlock()
	if p.hint == "" {
		return &partitionpb.ReceiveResponse{Result: &partitionpb.Result{}}, nil
	}
	select {
	case <-time.After(p.hold):
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	st, err := status.New(codes.FailedPrecondition, "not the leader").WithDetails(&partitionpb.LeaderHint{LeaderId: p.hint})
	if err != nil {
		panic(err)
	}
	return nil, st.Err()
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
