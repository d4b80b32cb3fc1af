package frontend_test

import (
	"context"
	"sync"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"

	"github.com/quorumbus/quorumbus/proto/partitionpb"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// slowBackend answers sends late, so that a link's transfers queue up and
// are packed, and records the largest request.
type slowBackend struct {
	*memBackend
	mu      sync.Mutex
	largest int
}

func (b *slowBackend) Send(ctx context.Context, e *placementpb.Entity, part uint32, msgs []*partitionpb.NewMessage) (*partitionpb.Result, error) {
	n := 0
	for _, m := range msgs {
		n += len(m.Header) + len(m.Annotations) + len(m.Bare)
	}
	b.mu.Lock()
	b.largest = max(b.largest, n)
	b.mu.Unlock()
	time.Sleep(20 * time.Millisecond)
	return b.memBackend.Send(ctx, e, part, msgs)
}

// TestSendPackingBoundedInBytes: the transfers of a busy link are packed
// into partition requests of about SendBatchBytes (1 MiB), not of
// SendBatch messages whatever their size.
func TestSendPackingBoundedInBytes(t *testing.T) {
	b := &slowBackend{memBackend: newMemBackend("q")}
	addr := startFrontend(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := goamqp.Dial(ctx, "amqp://"+addr, &goamqp.ConnOptions{SASLType: goamqp.SASLTypeAnonymous()})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	sess, err := conn.NewSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	snd, err := sess.NewSender(ctx, "q", nil)
	if err != nil {
		t.Fatal(err)
	}
	const senders, each, size = 32, 3, 200 << 10
	var wg sync.WaitGroup
	for range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				if err := snd.Send(ctx, goamqp.NewMessage(make([]byte, size)), nil); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if got := b.left("q"); got != senders*each {
		t.Fatalf("%d messages stored, want %d", got, senders*each)
	}
	// The transfer that reaches 1 MiB is the last of its request.
	if limit := 1<<20 + size + 1024; b.largest > limit {
		t.Fatalf("a partition request of %d bytes, over %d", b.largest, limit)
	}
}
