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

// receiveForwarded receives with peek-lock from a queue (or its
// dead-letter queue) until want messages came or the deadline passed,
// completes each, and returns them. Forwarding is asynchronous, so the
// receive waits for them rather than for quiet.
func receiveForwarded(t *testing.T, ctx context.Context, client *azservicebus.Client, queue string, sub azservicebus.SubQueue, want int) []*azservicebus.ReceivedMessage {
	t.Helper()
	r, err := client.NewReceiverForQueue(queue, &azservicebus.ReceiverOptions{SubQueue: sub})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	var got []*azservicebus.ReceivedMessage
	deadline := time.Now().Add(30 * time.Second)
	for len(got) < want && time.Now().Before(deadline) {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		msgs, err := r.ReceiveMessages(rctx, 100, nil)
		cancel()
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("receive from %s: %v", queue, err)
		}
		for _, m := range msgs {
			if err := r.CompleteMessage(ctx, m, nil); err != nil {
				t.Fatalf("complete on %s: %v", queue, err)
			}
		}
		got = append(got, msgs...)
	}
	// Anything more than want is a duplicate: look once more.
	rctx, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
	msgs, err := r.ReceiveMessages(rctx, 100, nil)
	cancel()
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("receive from %s: %v", queue, err)
	}
	return append(got, msgs...)
}

func bodiesSorted(ms []*azservicebus.ReceivedMessage) []string {
	var out []string
	for _, m := range ms {
		out = append(out, string(m.Body))
	}
	slices.Sort(out)
	return out
}

// TestDevSDKAutoForward: auto-forwarding through the Go SDK against a
// three-node dev cluster: queue to queue (properties kept, the
// destination's own sequence numbers, the source left empty), subscription
// to queue, dead-lettered messages to another queue (with their reason and
// DeadLetterSource), and a chain of forwards that dead-letters the message
// that would take a fifth hop.
func TestDevSDKAutoForward(t *testing.T) {
	t.Parallel()
	q := func(name, to, dlqTo string) cluster.QueueSpec {
		return cluster.QueueSpec{Name: name, Props: &placementpb.QueueProperties{ForwardTo: to, ForwardDeadLetteredMessagesTo: dlqTo}}
	}
	specs := []cluster.QueueSpec{
		q("dest", "", ""), q("src", "dest", ""),
		{Name: "news", Kind: placementpb.EntityKind_ENTITY_KIND_TOPIC, Props: &placementpb.QueueProperties{}},
		{Name: "news/Subscriptions/fwd", Kind: placementpb.EntityKind_ENTITY_KIND_SUBSCRIPTION, Props: &placementpb.QueueProperties{ForwardTo: "subdest"},
			Rules: []*placementpb.Rule{{Name: "hot", Filter: &placementpb.Rule_SqlFilter{SqlFilter: &placementpb.SqlFilter{Expression: "hot = 1"}}}}},
		q("subdest", "", ""),
		q("dl", "", "dldest"), q("dldest", "", ""),
	}
	// h1 -> h2 -> h3 -> h4 -> h5 -> h6: the message reaches h5 in four
	// hops and is dead-lettered there.
	for i := 1; i <= 5; i++ {
		specs = append(specs, q(fmt.Sprintf("h%d", i), fmt.Sprintf("h%d", i+1), ""))
	}
	specs = append(specs, q("h6", "", ""))
	c := startTestDev(t, specs...)
	client := devClient(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	send := func(entity string, msgs ...*azservicebus.Message) {
		t.Helper()
		s, err := client.NewSender(entity, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close(ctx)
		for _, m := range msgs {
			if err := s.SendMessage(ctx, m, nil); err != nil {
				t.Fatalf("send to %s: %v", entity, err)
			}
		}
	}

	t.Run("queue to queue", func(t *testing.T) {
		var msgs []*azservicebus.Message
		for i := range 20 {
			id, subject := fmt.Sprintf("m%02d", i), "s"
			msgs = append(msgs, &azservicebus.Message{Body: []byte(id), MessageID: &id, Subject: &subject,
				ApplicationProperties: map[string]any{"n": int64(i)}})
		}
		send("src", msgs...)
		got := receiveForwarded(t, ctx, client, "dest", 0, 20)
		if len(got) != 20 {
			t.Fatalf("dest received %d messages, want 20 once each: %v", len(got), bodiesSorted(got))
		}
		seqs := map[int64]bool{}
		for _, m := range got {
			if m.MessageID != string(m.Body) || m.Subject == nil || *m.Subject != "s" || m.ApplicationProperties["n"] == nil {
				t.Errorf("message %s lost its properties: id %q subject %v props %v", m.Body, m.MessageID, m.Subject, m.ApplicationProperties)
			}
			seqs[*m.SequenceNumber] = true
		}
		if len(seqs) != 20 {
			t.Errorf("sequence numbers not distinct: %v", seqs)
		}
		peeker, err := client.NewReceiverForQueue("src", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer peeker.Close(ctx)
		if left, err := peeker.PeekMessages(ctx, 10, nil); err != nil || len(left) != 0 {
			t.Fatalf("src still holds %d messages (%v)", len(left), err)
		}
	})

	t.Run("subscription to queue", func(t *testing.T) {
		send("news",
			&azservicebus.Message{Body: []byte("h1"), ApplicationProperties: map[string]any{"hot": int64(1)}},
			&azservicebus.Message{Body: []byte("c1"), ApplicationProperties: map[string]any{"hot": int64(0)}},
			&azservicebus.Message{Body: []byte("h2"), ApplicationProperties: map[string]any{"hot": int64(1)}})
		got := bodiesSorted(receiveForwarded(t, ctx, client, "subdest", 0, 2))
		if !slices.Equal(got, []string{"h1", "h2"}) {
			t.Fatalf("subdest received %v, want [h1 h2]", got)
		}
	})

	t.Run("dead letters forwarded", func(t *testing.T) {
		send("dl", &azservicebus.Message{Body: []byte("bad")})
		r, err := client.NewReceiverForQueue("dl", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close(ctx)
		msgs, err := r.ReceiveMessages(ctx, 1, nil)
		if err != nil || len(msgs) != 1 {
			t.Fatalf("receive from dl: %d messages, %v", len(msgs), err)
		}
		reason, desc := "poison", "cannot parse"
		if err := r.DeadLetterMessage(ctx, msgs[0], &azservicebus.DeadLetterOptions{Reason: &reason, ErrorDescription: &desc}); err != nil {
			t.Fatal(err)
		}
		got := receiveForwarded(t, ctx, client, "dldest", 0, 1)
		if len(got) != 1 {
			t.Fatalf("dldest received %d messages, want 1", len(got))
		}
		m := got[0]
		if string(m.Body) != "bad" || m.DeadLetterReason == nil || *m.DeadLetterReason != reason ||
			m.DeadLetterSource == nil || *m.DeadLetterSource != "dl" {
			t.Fatalf("forwarded dead letter: body %q reason %v source %v", m.Body, m.DeadLetterReason, m.DeadLetterSource)
		}
		if left := receiveForwarded(t, ctx, client, "dl", azservicebus.SubQueueDeadLetter, 0); len(left) != 0 {
			t.Fatalf("dl's dead-letter queue still holds %d", len(left))
		}
	})

	t.Run("hop limit", func(t *testing.T) {
		send("h1", &azservicebus.Message{Body: []byte("far")})
		got := receiveForwarded(t, ctx, client, "h5", azservicebus.SubQueueDeadLetter, 1)
		if len(got) != 1 || got[0].DeadLetterReason == nil || *got[0].DeadLetterReason != "MaxTransferHopCountExceeded" {
			t.Fatalf("h5's dead-letter queue: %d messages %v", len(got), bodiesSorted(got))
		}
		if n := receiveForwarded(t, ctx, client, "h6", 0, 0); len(n) != 0 {
			t.Fatalf("h6 received %d messages: a fifth hop", len(n))
		}
	})
}
