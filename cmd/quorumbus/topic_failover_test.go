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

// TestFailoverTopicFanOut runs three `quorumbus node` processes and a
// `quorumbus frontend`, sends numbered messages to a topic with two
// subscriptions (every message; the even ones) through the Go SDK, and
// kill -9s the leader of the topic's partition group in the middle. A send
// that fails is retried with the same message id (the topic detects
// duplicates). Afterwards every acknowledged message is in "all" exactly
// once, and "even" holds exactly the even numbers of "all": a fan-out is
// in every matching subscription or in none, whoever led when it applied.
func TestFailoverTopicFanOut(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	pc := startPlainCluster(t)
	procs, grpcAddrs, amqpAddr := pc.procs, pc.grpcAddrs, pc.amqpAddr

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	sub := placementpb.EntityKind_ENTITY_KIND_SUBSCRIPTION
	specs := []cluster.QueueSpec{
		{Name: "tfo", Kind: placementpb.EntityKind_ENTITY_KIND_TOPIC, Props: &placementpb.QueueProperties{RequiresDuplicateDetection: true}},
		{Name: "tfo/Subscriptions/all", Kind: sub},
		{Name: "tfo/Subscriptions/even", Kind: sub, Rules: []*placementpb.Rule{
			{Name: "even", Filter: &placementpb.Rule_SqlFilter{SqlFilter: &placementpb.SqlFilter{Expression: "n % 2 = 0"}}},
		}},
	}
	if err := cluster.CreateQueues(ctx, grpcAddrs, nil, specs, quiet); err != nil {
		t.Fatal(err)
	}
	group := queueGroup(t, ctx, grpcAddrs[0], "tfo")
	dialUntil(t, ctx, amqpAddr).Close()

	client, err := azservicebus.NewClientFromConnectionString(cluster.ConnectionString(amqpAddr), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close(context.Background())

	const n = 400
	send := func(i int) error {
		snd, err := client.NewSender("tfo", nil)
		if err != nil {
			return err
		}
		defer snd.Close(ctx)
		id := strconv.Itoa(i)
		return snd.SendMessage(ctx, &azservicebus.Message{MessageID: &id, Body: []byte(id), ApplicationProperties: map[string]any{"n": int64(i)}}, nil)
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
					time.Sleep(200 * time.Millisecond) // the same id again: the topic drops a duplicate
				}
			}
		}()
	}
	for i := range n {
		if i == n/2 {
			leader := leaderIndex(t, ctx, grpcAddrs, group)
			procs[leader].kill9()
			t.Logf("killed n%d, the leader of group %d, after %d sends were handed out", leader+1, group, i)
		}
		next <- i
	}
	close(next)
	wg.Wait()
	if len(acked) != n {
		t.Fatalf("%d of %d sends acknowledged", len(acked), n)
	}

	drain := func(name string) map[int]int {
		r, err := client.NewReceiverForSubscription("tfo", name, &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close(ctx)
		got := map[int]int{}
		for {
			rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			msgs, err := r.ReceiveMessages(rctx, 100, nil)
			cancel()
			if len(msgs) == 0 {
				if err != nil && ctx.Err() != nil {
					t.Fatal(err)
				}
				return got
			}
			for _, m := range msgs {
				i, _ := strconv.Atoi(string(m.Body))
				got[i]++
			}
		}
	}
	all, even := drain("all"), drain("even")
	for i := range n {
		if all[i] != 1 {
			t.Errorf("message %d is %d times in all, want once", i, all[i])
		}
		if want := 1 - i%2; even[i] != want {
			t.Errorf("message %d is %d times in even, want %d", i, even[i], want)
		}
	}
	t.Logf("all: %d messages, even: %d", len(all), len(even))
}
