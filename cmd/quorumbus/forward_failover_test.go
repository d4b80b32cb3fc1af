package main

import (
	"context"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/quorumbus/quorumbus/cmd/quorumbus/cluster"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// TestFailoverAutoForward runs three `quorumbus node` processes and a
// `quorumbus frontend`, sends numbered messages through the Go SDK to a
// queue that forwards to another, and kill -9s the leader of the source's
// partition group while its forwarder is moving them. A send that fails
// is retried with the same message id (the source detects duplicates).
// Afterwards every acknowledged message is in the destination exactly
// once and the source is empty: the new leader's forwarder sent again what
// the old one had locked, and the destination dropped what it had.
func TestFailoverAutoForward(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	pc := startPlainCluster(t)
	procs, grpcAddrs, amqpAddr := pc.procs, pc.grpcAddrs, pc.amqpAddr

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	specs := []cluster.QueueSpec{
		{Name: "fdst", Props: &placementpb.QueueProperties{}},
		// A short lock: what the dead leader's forwarder had locked comes
		// back soon.
		{Name: "fsrc", Props: &placementpb.QueueProperties{ForwardTo: "fdst", RequiresDuplicateDetection: true, LockDurationMs: 5000}},
	}
	if err := cluster.CreateQueues(ctx, grpcAddrs, nil, specs, quiet); err != nil {
		t.Fatal(err)
	}
	group := queueGroup(t, ctx, grpcAddrs[0], "fsrc")
	dialUntil(t, ctx, amqpAddr).Close()

	client, err := azservicebus.NewClientFromConnectionString(cluster.ConnectionString(amqpAddr), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close(context.Background())

	const n = 400
	send := func(i int) error {
		snd, err := client.NewSender("fsrc", nil)
		if err != nil {
			return err
		}
		defer snd.Close(ctx)
		id := strconv.Itoa(i)
		return snd.SendMessage(ctx, &azservicebus.Message{MessageID: &id, Body: []byte(id)}, nil)
	}
	var mu sync.Mutex
	acked := map[int]bool{}
	var wg sync.WaitGroup
	next := make(chan int)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				for ctx.Err() == nil {
					if err := send(i); err == nil {
						mu.Lock()
						acked[i] = true
						mu.Unlock()
						break
					}
					time.Sleep(200 * time.Millisecond) // the same id again: the source drops a duplicate
				}
			}
		}()
	}
	for i := range n {
		if i == n/2 {
			leader := leaderIndex(t, ctx, grpcAddrs, group)
			procs[leader].kill9()
			t.Logf("killed n%d, the leader of the source's group %d, after %d sends were handed out", leader+1, group, i)
		}
		next <- i
	}
	close(next)
	wg.Wait()
	if len(acked) != n {
		t.Fatalf("%d of %d sends acknowledged", len(acked), n)
	}

	// Receive until every message came, then until a quiet spell longer
	// than the source's lock (a duplicate would come after a lock ran out).
	r, err := client.NewReceiverForQueue("fdst", &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	got := map[int]int{}
	deadline := time.Now().Add(90 * time.Second)
	quietSince := time.Now()
	for time.Now().Before(deadline) && (len(got) < n || time.Since(quietSince) < 8*time.Second) {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		msgs, _ := r.ReceiveMessages(rctx, 100, nil)
		cancel()
		if len(msgs) > 0 {
			quietSince = time.Now()
		}
		for _, m := range msgs {
			i, _ := strconv.Atoi(string(m.Body))
			got[i]++
		}
	}
	for i := range n {
		if got[i] != 1 {
			t.Errorf("message %d is %d times in the destination, want once", i, got[i])
		}
	}
	peeker, err := client.NewReceiverForQueue("fsrc", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer peeker.Close(ctx)
	if left, err := peeker.PeekMessages(ctx, 10, nil); err != nil || len(left) != 0 {
		t.Errorf("the source still holds %d messages (%v)", len(left), err)
	}
	t.Logf("destination: %d distinct messages", len(got))
}
