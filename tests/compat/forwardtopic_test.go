package compat

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/quorumbus/quorumbus/cmd/quorumbus/cluster"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// drainReceiver receives with peek-lock from r until want messages came or 30
// seconds passed, completes each, then looks once more for duplicates.
func drainReceiver(t *testing.T, ctx context.Context, r *azservicebus.Receiver, what string, want int) []*azservicebus.ReceivedMessage {
	t.Helper()
	var got []*azservicebus.ReceivedMessage
	deadline := time.Now().Add(30 * time.Second)
	for {
		if len(got) >= want && want > 0 || time.Now().After(deadline) {
			break
		}
		wait := time.Second
		if len(got) >= want {
			wait = 1500 * time.Millisecond // want 0: one look
		}
		rctx, cancel := context.WithTimeout(ctx, wait)
		msgs, err := r.ReceiveMessages(rctx, 100, nil)
		cancel()
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("receive from %s: %v", what, err)
		}
		for _, m := range msgs {
			if err := r.CompleteMessage(ctx, m, nil); err != nil {
				t.Fatalf("complete on %s: %v", what, err)
			}
		}
		got = append(got, msgs...)
		if want == 0 {
			return got
		}
	}
	rctx, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
	msgs, err := r.ReceiveMessages(rctx, 100, nil)
	cancel()
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("receive from %s: %v", what, err)
	}
	return append(got, msgs...)
}

func subscriptionReceiver(t *testing.T, client *azservicebus.Client, topic, sub string) *azservicebus.Receiver {
	t.Helper()
	r, err := client.NewReceiverForSubscription(topic, sub, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(context.Background()) })
	return r
}

// TestDevSDKForwardToTopic: auto-forwarding to a topic through the Go SDK
// against a three-node dev cluster. A queue forwards to a topic of two
// partitions (in other groups than the queue, as placed here), which fans
// each message out by its subscriptions' rules (an action included); one
// subscription forwards on to a queue: queue -> topic -> subscription ->
// queue, every message once where its rules send it. A chain through a
// topic counts its hops: the message that would take a fifth is
// dead-lettered.
func TestDevSDKForwardToTopic(t *testing.T) {
	t.Parallel()
	sql := func(name, expr, action string) []*placementpb.Rule {
		r := &placementpb.Rule{Name: name, Filter: &placementpb.Rule_SqlFilter{SqlFilter: &placementpb.SqlFilter{Expression: expr}}}
		if action != "" {
			r.Action = &placementpb.SqlRuleAction{Expression: action}
		}
		return []*placementpb.Rule{r}
	}
	topic := placementpb.EntityKind_ENTITY_KIND_TOPIC
	subscription := placementpb.EntityKind_ENTITY_KIND_SUBSCRIPTION
	specs := []cluster.QueueSpec{
		{Name: "in", Props: &placementpb.QueueProperties{ForwardTo: "orders"}},
		{Name: "orders", Kind: topic, Props: &placementpb.QueueProperties{PartitionCount: 2}},
		{Name: "orders/Subscriptions/all", Kind: subscription},
		{Name: "orders/Subscriptions/big", Kind: subscription, Rules: sql("big", "n >= 10", "SET tagged = 'yes'")},
		{Name: "orders/Subscriptions/hot", Kind: subscription, Props: &placementpb.QueueProperties{ForwardTo: "sink"}, Rules: sql("hot", "hot = 1", "")},
		{Name: "sink"},
		// h1 -> h2 -> h3 -> ht (topic), whose subscription s forwards to
		// h5 -> h6: the message reaches h5 in four hops.
		{Name: "h1", Props: &placementpb.QueueProperties{ForwardTo: "h2"}},
		{Name: "h2", Props: &placementpb.QueueProperties{ForwardTo: "h3"}},
		{Name: "h3", Props: &placementpb.QueueProperties{ForwardTo: "ht"}},
		{Name: "ht", Kind: topic, Props: &placementpb.QueueProperties{}},
		{Name: "ht/Subscriptions/s", Kind: subscription, Props: &placementpb.QueueProperties{ForwardTo: "h5"}},
		{Name: "h5", Props: &placementpb.QueueProperties{ForwardTo: "h6"}},
		{Name: "h6"},
	}
	c := startTestDev(t, specs...)
	in, err := c.Router.Entity("in")
	if err != nil {
		t.Fatal(err)
	}
	orders, err := c.Router.Entity("orders")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("in lives in group %v, orders in groups %v", in.PartitionGroups, orders.PartitionGroups)
	client := devClient(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	snd, err := client.NewSender("in", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer snd.Close(ctx)
	const n = 20
	for i := range n {
		id := fmt.Sprintf("m%02d", i)
		if err := snd.SendMessage(ctx, &azservicebus.Message{Body: []byte(id), MessageID: &id,
			ApplicationProperties: map[string]any{"n": int64(i), "hot": int64(i % 2)}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	want := func(keep func(i int) bool) []string {
		var out []string
		for i := range n {
			if keep(i) {
				out = append(out, fmt.Sprintf("m%02d", i))
			}
		}
		return out
	}
	all := drainReceiver(t, ctx, subscriptionReceiver(t, client, "orders", "all"), "orders/all", n)
	if got := bodiesSorted(all); !slices.Equal(got, want(func(int) bool { return true })) {
		t.Fatalf("orders/all received %v, want each message once", got)
	}
	for _, m := range all {
		if m.MessageID != string(m.Body) || m.ApplicationProperties["n"] == nil {
			t.Errorf("message %s lost its properties: id %q props %v", m.Body, m.MessageID, m.ApplicationProperties)
		}
	}
	big := drainReceiver(t, ctx, subscriptionReceiver(t, client, "orders", "big"), "orders/big", n/2)
	if got := bodiesSorted(big); !slices.Equal(got, want(func(i int) bool { return i >= 10 })) {
		t.Fatalf("orders/big received %v, want m10..m19 once", got)
	}
	for _, m := range big {
		if m.ApplicationProperties["tagged"] != "yes" {
			t.Errorf("message %s in big without its rule action's property: %v", m.Body, m.ApplicationProperties)
		}
	}
	sink, err := client.NewReceiverForQueue("sink", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close(ctx)
	if got := bodiesSorted(drainReceiver(t, ctx, sink, "sink", n/2)); !slices.Equal(got, want(func(i int) bool { return i%2 == 1 })) {
		t.Fatalf("sink received %v, want the hot ones once", got)
	}
	peeker, err := client.NewReceiverForQueue("in", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer peeker.Close(ctx)
	if left, err := peeker.PeekMessages(ctx, 10, nil); err != nil || len(left) != 0 {
		t.Fatalf("in still holds %d messages (%v)", len(left), err)
	}

	// Four hops through a topic, then the fifth is refused.
	h1, err := client.NewSender("h1", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer h1.Close(ctx)
	if err := h1.SendMessage(ctx, &azservicebus.Message{Body: []byte("far")}, nil); err != nil {
		t.Fatal(err)
	}
	dlq, err := client.NewReceiverForQueue("h5", &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter})
	if err != nil {
		t.Fatal(err)
	}
	defer dlq.Close(ctx)
	got := drainReceiver(t, ctx, dlq, "h5's dead-letter queue", 1)
	if len(got) != 1 || got[0].DeadLetterReason == nil || *got[0].DeadLetterReason != "MaxTransferHopCountExceeded" {
		t.Fatalf("h5's dead-letter queue: %d messages %v", len(got), bodiesSorted(got))
	}
	h6, err := client.NewReceiverForQueue("h6", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer h6.Close(ctx)
	if got := drainReceiver(t, ctx, h6, "h6", 0); len(got) != 0 {
		t.Fatalf("h6 received %d messages: a fifth hop", len(got))
	}
}
