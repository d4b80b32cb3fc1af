package node

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// TestBusyLeaderRefusesSends: with a queue bound of one byte, concurrent
// sends of 64 KiB fill the proposer's batches and queue behind them; those
// that find the queue over the bound (64 senders: 4 MiB at once, twice
// what the four entries in flight carry) are refused with ResourceExhausted
// naming the full queue, are never stored, and every acknowledged send is
// received exactly once.
func TestBusyLeaderRefusesSends(t *testing.T) {
	n, s := soloNode(t, Config{MaxQueuedSendBytes: 1})
	ctx := context.Background()
	if err := n.EnsureGroup(1, []Peer{{ID: "solo", Addr: n.Addr()}}); err != nil {
		t.Fatal(err)
	}
	waitServing(t, n, 1)
	if _, err := s.UpsertEntity(ctx, &partitionpb.UpsertEntityRequest{GroupId: 1, Config: &partitionpb.EntityConfig{
		EntityId: 5, Name: "q", LockDurationMs: 5000, MaxDeliveryCount: 10}}); err != nil {
		t.Fatal(err)
	}
	const senders, each = 64, 4
	var (
		mu      sync.Mutex
		acked   = map[string]bool{}
		refused = map[string]bool{}
		wg      sync.WaitGroup
	)
	pad := strings.Repeat("x", 64<<10)
	for i := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range each {
				id := fmt.Sprintf("s%d-%d", i, j)
				_, err := s.Send(ctx, &partitionpb.SendRequest{GroupId: 1, EntityId: 5, Messages: []*partitionpb.NewMessage{{Bare: []byte(id + " " + pad)}}})
				mu.Lock()
				switch {
				case err == nil:
					acked[id] = true
				case status.Code(err) == codes.ResourceExhausted && strings.Contains(status.Convert(err).Message(), "proposal queue full"):
					refused[id] = true
				default:
					t.Errorf("send %s: %v, want success or ResourceExhausted for a full proposal queue", id, err)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(refused) == 0 {
		t.Fatalf("no send of %d refused with a one-byte queue bound", senders*each)
	}
	if len(acked) == 0 {
		t.Fatal("every send refused: the bound refuses even an empty queue")
	}
	got := map[string]int{}
	for {
		res, err := s.Receive(ctx, &partitionpb.ReceiveRequest{GroupId: 1, EntityId: 5, MaxCount: 64, ReceiveAndDelete: true})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Result.Messages) == 0 {
			break
		}
		for _, m := range res.Result.Messages {
			got[strings.Fields(string(m.Bare))[0]]++
		}
	}
	for id := range acked {
		if got[id] != 1 {
			t.Errorf("acknowledged send %s received %d times", id, got[id])
		}
	}
	for id := range refused {
		if got[id] != 0 {
			t.Errorf("refused send %s was stored", id)
		}
	}
	t.Logf("%d acknowledged, %d refused as busy", len(acked), len(refused))
}
