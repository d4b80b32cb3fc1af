package compat

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	goamqp "github.com/Azure/go-amqp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quorumbus/quorumbus/cmd/quorumbus/cluster"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// topicSpecs: topic "shop" with four subscriptions (every message; a SQL
// filter on a user and a system property; a correlation filter on the
// correlation id and a user property, beside a second rule that also
// matches, so one message gets two copies; nothing), and topic "quiet"
// whose only subscription matches nothing.
func topicSpecs() []cluster.QueueSpec {
	topic := placementpb.EntityKind_ENTITY_KIND_TOPIC
	sub := placementpb.EntityKind_ENTITY_KIND_SUBSCRIPTION
	sql := func(name, expr string) *placementpb.Rule {
		return &placementpb.Rule{Name: name, Filter: &placementpb.Rule_SqlFilter{SqlFilter: &placementpb.SqlFilter{Expression: expr}}}
	}
	never := &placementpb.Rule{Name: "never", Filter: &placementpb.Rule_FalseFilter{FalseFilter: true}}
	return []cluster.QueueSpec{
		{Name: "shop", Kind: topic, Props: &placementpb.QueueProperties{}},
		{Name: "shop/Subscriptions/all", Kind: sub, Props: &placementpb.QueueProperties{MaxDeliveryCount: 2}},
		{Name: "shop/Subscriptions/red", Kind: sub, Rules: []*placementpb.Rule{sql("red", "color = 'red' AND sys.Label = 'paint' AND qty > 2")}},
		{Name: "shop/Subscriptions/corr", Kind: sub, Rules: []*placementpb.Rule{
			{Name: "c1", Filter: &placementpb.Rule_CorrelationFilter{CorrelationFilter: &placementpb.CorrelationFilter{
				CorrelationId: "c-1",
				Properties:    map[string]*placementpb.RuleValue{"region": {Value: &placementpb.RuleValue_StringValue{StringValue: "eu"}}},
			}}},
			sql("big", "qty >= 100"),
		}},
		{Name: "shop/Subscriptions/none", Kind: sub, Rules: []*placementpb.Rule{never}},
		{Name: "shop/Subscriptions/tagged", Kind: sub, Rules: []*placementpb.Rule{{
			Name: "tag", Filter: &placementpb.Rule_SqlFilter{SqlFilter: &placementpb.SqlFilter{Expression: "qty = 7"}},
			Action: &placementpb.SqlRuleAction{Expression: "SET sys.To = 'paint-shop'; SET qty = qty * 2; SET note = 'seen'; REMOVE region"},
		}}},
		{Name: "quiet", Kind: topic, Props: &placementpb.QueueProperties{}},
		{Name: "quiet/Subscriptions/never", Kind: sub, Rules: []*placementpb.Rule{never}},
	}
}

func shopMessage(body, color, subject, correlation, region string, qty int64) *azservicebus.Message {
	m := &azservicebus.Message{Body: []byte(body), ApplicationProperties: map[string]any{"color": color, "qty": qty, "region": region}}
	if subject != "" {
		m.Subject = &subject
	}
	if correlation != "" {
		m.CorrelationID = &correlation
	}
	return m
}

// receiveBodies receives from a subscription (or its dead-letter queue)
// with peek-lock until it has been quiet for a second, completes each,
// and returns the bodies sorted.
func receiveBodies(t *testing.T, ctx context.Context, client *azservicebus.Client, topic, sub string, opts *azservicebus.ReceiverOptions, want int) []string {
	t.Helper()
	r, err := client.NewReceiverForSubscription(topic, sub, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	var got []string
	for {
		// Until want have come, wait as long as the test may (a loaded
		// machine can take seconds to attach and lock); past it, a
		// second without one says no extra copy is on its way.
		rctx, cancel := ctx, context.CancelFunc(func() {})
		if len(got) >= want {
			rctx, cancel = context.WithTimeout(ctx, time.Second)
		}
		msgs, err := r.ReceiveMessages(rctx, 100, nil)
		cancel()
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("%s/%s: receive: %v", topic, sub, err)
		}
		if len(msgs) == 0 && (len(got) >= want || ctx.Err() != nil) {
			break
		}
		for _, m := range msgs {
			got = append(got, string(m.Body))
			if err := r.CompleteMessage(ctx, m, nil); err != nil {
				t.Fatalf("%s/%s: complete: %v", topic, sub, err)
			}
		}
	}
	slices.Sort(got)
	return got
}

// TestDevSDKTopicFanOut sends to a topic through the Go SDK and receives
// from its subscriptions: each gets exactly the messages its rules match,
// one copy per matching rule; a send that matches no subscription is
// accepted; settlement on one subscription leaves the others' copies.
func TestDevSDKTopicFanOut(t *testing.T) {
	t.Parallel()
	c := startTestDev(t, topicSpecs()...)
	client := devClient(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	snd, err := client.NewSender("shop", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer snd.Close(ctx)
	msgs := []*azservicebus.Message{
		shopMessage("m1", "red", "paint", "", "us", 3),      // all, red
		shopMessage("m2", "red", "paint", "", "us", 1),      // all (qty too small for red)
		shopMessage("m3", "blue", "paint", "c-1", "eu", 5),  // all, corr
		shopMessage("m4", "red", "tools", "c-1", "us", 7),   // all (region and subject differ)
		shopMessage("m5", "red", "paint", "c-1", "eu", 500), // all, red, corr twice (c1 and big)
	}
	for _, m := range msgs {
		if err := snd.SendMessage(ctx, m, nil); err != nil {
			t.Fatal(err)
		}
	}
	// A batch goes through the same fan-out.
	batch, err := snd.NewMessageBatch(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []*azservicebus.Message{shopMessage("b1", "red", "paint", "", "", 9), shopMessage("b2", "green", "", "", "", 0)} {
		if err := batch.AddMessage(m, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := snd.SendMessageBatch(ctx, batch, nil); err != nil {
		t.Fatal(err)
	}

	// Settlement on one subscription leaves the others' copies alone:
	// abandon m1 on "all" until it is dead-lettered (max delivery count
	// 2), and dead-letter the copy of m3 there directly.
	all, err := client.NewReceiverForSubscription("shop", "all", nil)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for seen["m1"] < 2 || seen["m3"] < 1 {
		got, err := all.ReceiveMessages(ctx, 10, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range got {
			b := string(m.Body)
			seen[b]++
			switch b {
			case "m1":
				err = all.AbandonMessage(ctx, m, nil)
			case "m3":
				reason := "checked"
				err = all.DeadLetterMessage(ctx, m, &azservicebus.DeadLetterOptions{Reason: &reason})
			default:
				err = all.CompleteMessage(ctx, m, nil)
			}
			if err != nil {
				t.Fatalf("settle %s: %v", b, err)
			}
		}
	}
	all.Close(ctx)

	for _, c := range []struct {
		sub  string
		opts *azservicebus.ReceiverOptions
		want string
	}{
		{"all", nil, ""},
		{"all", &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter}, "m1 m3"},
		{"red", nil, "b1 m1 m5"},
		{"corr", nil, "m3 m5 m5"},
		{"none", nil, ""},
	} {
		if got := strings.Join(receiveBodies(t, ctx, client, "shop", c.sub, c.opts, len(strings.Fields(c.want))), " "); got != c.want {
			t.Errorf("shop/%s %v: got %q, want %q", c.sub, c.opts, got, c.want)
		}
	}

	// A topic whose subscriptions match nothing accepts the send.
	quiet, err := client.NewSender("quiet", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := quiet.SendMessage(ctx, shopMessage("q", "red", "", "", "", 1), nil); err != nil {
		t.Fatalf("send to a topic that matches nothing: %v", err)
	}
	if got := receiveBodies(t, ctx, client, "quiet", "never", nil, 0); len(got) != 0 {
		t.Fatalf("quiet/never got %v", got)
	}
}

// TestDevSDKSubscriptionReceive: receive-and-delete, peek, defer and
// receive deferred on a subscription, as on a queue; a receiver on the
// topic itself and a sender to a subscription are refused.
func TestDevSDKSubscriptionReceive(t *testing.T) {
	t.Parallel()
	c := startTestDev(t, topicSpecs()...)
	client := devClient(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	snd, err := client.NewSender("shop", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer snd.Close(ctx)
	for _, b := range []string{"p1", "p2", "p3"} {
		if err := snd.SendMessage(ctx, shopMessage(b, "red", "paint", "", "", 5), nil); err != nil {
			t.Fatal(err)
		}
	}

	red, err := client.NewReceiverForSubscription("shop", "red", nil)
	if err != nil {
		t.Fatal(err)
	}
	peeked, err := red.PeekMessages(ctx, 10, nil)
	if err != nil || len(peeked) != 3 || string(peeked[0].Body) != "p1" {
		t.Fatalf("peek: %d messages, %v", len(peeked), err)
	}
	got, err := red.ReceiveMessages(ctx, 1, nil)
	if err != nil || len(got) != 1 {
		t.Fatalf("receive: %v %v", got, err)
	}
	seq := *got[0].SequenceNumber
	if err := red.DeferMessage(ctx, got[0], nil); err != nil {
		t.Fatal(err)
	}
	deferred, err := red.ReceiveDeferredMessages(ctx, []int64{seq}, nil)
	if err != nil || len(deferred) != 1 || string(deferred[0].Body) != "p1" {
		t.Fatalf("receive deferred: %v %v", deferred, err)
	}
	if err := red.CompleteMessage(ctx, deferred[0], nil); err != nil {
		t.Fatal(err)
	}
	red.Close(ctx)

	rd, err := client.NewReceiverForSubscription("shop", "red", &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
	if err != nil {
		t.Fatal(err)
	}
	var bodies []string
	for len(bodies) < 2 {
		got, err := rd.ReceiveMessages(ctx, 10, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range got {
			bodies = append(bodies, string(m.Body))
		}
	}
	rd.Close(ctx)
	if strings.Join(bodies, " ") != "p2 p3" {
		t.Fatalf("receive-and-delete: %v", bodies)
	}
	// The copies in "all" are still there.
	if got := receiveBodies(t, ctx, client, "shop", "all", nil, 3); strings.Join(got, " ") != "p1 p2 p3" {
		t.Fatalf("all: %v", got)
	}

	// A receiver on a topic, a sender to a subscription: refused.
	topicRecv, err := client.NewReceiverForQueue("shop", nil)
	if err == nil {
		_, err = topicRecv.ReceiveMessages(ctx, 1, nil)
	}
	if err == nil || !strings.Contains(err.Error(), "not-allowed") {
		t.Fatalf("receive from a topic: %v, want amqp:not-allowed", err)
	}
	subSnd, err := client.NewSender("shop/Subscriptions/red", nil)
	if err == nil {
		err = subSnd.SendMessage(ctx, &azservicebus.Message{Body: []byte("x")}, nil)
	}
	if err == nil || !strings.Contains(err.Error(), "not-allowed") {
		t.Fatalf("send to a subscription: %v, want amqp:not-allowed", err)
	}
}

// TestDevSDKDeleteTopic: deleting a topic deletes its subscriptions and
// their messages; a receiver on one of them then gets not-found.
func TestDevSDKDeleteTopic(t *testing.T) {
	t.Parallel()
	c := startTestDev(t, topicSpecs()...)
	client := devClient(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	snd, err := client.NewSender("shop", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := snd.SendMessage(ctx, shopMessage("d1", "red", "paint", "", "", 5), nil); err != nil {
		t.Fatal(err)
	}
	snd.Close(ctx)

	pc, closePC, err := cluster.DialPlacementMembers(c.NodeAddrs, c.Creds)
	if err != nil {
		t.Fatal(err)
	}
	defer closePC()
	if _, err := pc.DeleteEntity(ctx, &placementpb.DeleteEntityRequest{Name: "shop"}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"shop", "shop/Subscriptions/all", "shop/Subscriptions/red"} {
		if _, err := pc.GetEntity(ctx, &placementpb.GetEntityRequest{Name: name}); status.Code(err) != codes.NotFound {
			t.Fatalf("%s after deleting the topic: %v, want NotFound", name, err)
		}
	}
	// The front-end's routing table follows.
	deadline := time.Now().Add(30 * time.Second)
	for {
		r, err := client.NewReceiverForSubscription("shop", "all", nil)
		if err == nil {
			rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_, err = r.ReceiveMessages(rctx, 1, nil)
			cancel()
			r.Close(ctx)
		}
		var sbErr *azservicebus.Error
		var amqpErr *goamqp.Error
		if errors.As(err, &sbErr) && sbErr.Code == azservicebus.CodeNotFound ||
			errors.As(err, &amqpErr) && amqpErr.Condition == goamqp.ErrCondNotFound {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("receive from a subscription of a deleted topic: %v, want not-found", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestDevSDKRuleChangeReachesPartitions: a rule added to a subscription
// through PlacementService reaches its partitions (an upsert of the
// subscription), after which sends to the topic match it and only it.
func TestDevSDKRuleChangeReachesPartitions(t *testing.T) {
	t.Parallel()
	c := startTestDev(t, topicSpecs()...)
	client := devClient(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pc, closePC, err := cluster.DialPlacementMembers(c.NodeAddrs, c.Creds)
	if err != nil {
		t.Fatal(err)
	}
	defer closePC()
	if _, err := pc.AddRule(ctx, &placementpb.AddRuleRequest{Subscription: "shop/Subscriptions/none", Rule: &placementpb.Rule{
		Name: "green", Filter: &placementpb.Rule_SqlFilter{SqlFilter: &placementpb.SqlFilter{Expression: "color = 'green'"}}}}); err != nil {
		t.Fatal(err)
	}
	snd, err := client.NewSender("shop", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer snd.Close(ctx)
	r, err := client.NewReceiverForSubscription("shop", "none", &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	// The upsert is asynchronous: send until a green message arrives.
	deadline := time.Now().Add(30 * time.Second)
	for got := false; !got; {
		if err := snd.SendMessage(ctx, shopMessage("g", "green", "", "", "", 0), nil); err != nil {
			t.Fatal(err)
		}
		if err := snd.SendMessage(ctx, shopMessage("b", "blue", "", "", "", 0), nil); err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		msgs, _ := r.ReceiveMessages(rctx, 10, nil)
		cancel()
		for _, m := range msgs {
			if string(m.Body) != "g" {
				t.Fatalf("shop/none got %q", m.Body)
			}
			got = true
		}
		if !got && time.Now().After(deadline) {
			t.Fatal("the added rule never matched")
		}
	}
}

// TestDevSDKRuleAction: a rule's SQL action changes its subscription's
// copy (a system property, a user property set from an expression, one
// added, one removed) and leaves every other copy as it was sent.
func TestDevSDKRuleAction(t *testing.T) {
	t.Parallel()
	c := startTestDev(t, topicSpecs()...)
	client := devClient(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	snd, err := client.NewSender("shop", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer snd.Close(ctx)
	to := "warehouse"
	m := shopMessage("a1", "red", "tools", "", "us", 7)
	m.To = &to
	if err := snd.SendMessage(ctx, m, nil); err != nil {
		t.Fatal(err)
	}
	receiveOne := func(sub string) *azservicebus.ReceivedMessage {
		t.Helper()
		r, err := client.NewReceiverForSubscription("shop", sub, &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close(ctx)
		got, err := r.ReceiveMessages(ctx, 1, nil)
		if err != nil || len(got) != 1 {
			t.Fatalf("%s: %v %v", sub, got, err)
		}
		return got[0]
	}
	tagged := receiveOne("tagged")
	if string(tagged.Body) != "a1" || tagged.To == nil || *tagged.To != "paint-shop" || tagged.Subject == nil || *tagged.Subject != "tools" {
		t.Fatalf("tagged copy: body %q to %v subject %v", tagged.Body, tagged.To, tagged.Subject)
	}
	p := tagged.ApplicationProperties
	if p["qty"] != int64(14) || p["note"] != "seen" || p["color"] != "red" || p["region"] != nil {
		t.Fatalf("tagged copy's properties: %v", p)
	}
	plain := receiveOne("all")
	if *plain.To != "warehouse" || plain.ApplicationProperties["qty"] != int64(7) || plain.ApplicationProperties["region"] != "us" || plain.ApplicationProperties["note"] != nil {
		t.Fatalf("the copy without an action changed: to %v, %v", *plain.To, plain.ApplicationProperties)
	}
}

// TestDevSDKTopicScheduled: a message scheduled on a topic reaches the
// subscriptions it matches when it is due, not before.
func TestDevSDKTopicScheduled(t *testing.T) {
	t.Parallel()
	c := startTestDev(t, topicSpecs()...)
	client := devClient(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	snd, err := client.NewSender("shop", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer snd.Close(ctx)
	due := time.Now().Add(3 * time.Second)
	if _, err := snd.ScheduleMessages(ctx, []*azservicebus.Message{shopMessage("s1", "red", "paint", "", "", 5)}, due, nil); err != nil {
		t.Fatal(err)
	}
	r, err := client.NewReceiverForSubscription("shop", "red", &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	peeked, err := r.PeekMessages(ctx, 5, nil)
	if err != nil || len(peeked) != 1 || peeked[0].State != azservicebus.MessageStateScheduled {
		t.Fatalf("peek before it is due: %v %v", peeked, err)
	}
	got, err := r.ReceiveMessages(ctx, 1, nil)
	if err != nil || len(got) != 1 || string(got[0].Body) != "s1" {
		t.Fatalf("receive: %v %v", got, err)
	}
	if time.Now().Before(due.Add(-200 * time.Millisecond)) {
		t.Fatalf("received at %v, before it was due at %v", time.Now(), due)
	}
}

// TestDevSDKSubscriptionSessions: a subscription that requires sessions
// takes the copies of session messages and serves them to a session
// receiver, as a session queue does.
func TestDevSDKSubscriptionSessions(t *testing.T) {
	t.Parallel()
	c := startTestDev(t,
		cluster.QueueSpec{Name: "st", Kind: placementpb.EntityKind_ENTITY_KIND_TOPIC, Props: &placementpb.QueueProperties{}},
		cluster.QueueSpec{Name: "st/Subscriptions/s", Kind: placementpb.EntityKind_ENTITY_KIND_SUBSCRIPTION, Props: &placementpb.QueueProperties{RequiresSession: true}})
	client := devClient(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	snd, err := client.NewSender("st", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer snd.Close(ctx)
	for _, m := range []struct{ sid, body string }{{"a", "a1"}, {"b", "b1"}, {"a", "a2"}} {
		sid := m.sid
		if err := snd.SendMessage(ctx, &azservicebus.Message{SessionID: &sid, Body: []byte(m.body)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	r, err := client.AcceptSessionForSubscription(ctx, "st", "s", "a", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	var got []string
	for len(got) < 2 {
		msgs, err := r.ReceiveMessages(ctx, 10, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			got = append(got, string(m.Body))
			if err := r.CompleteMessage(ctx, m, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	if strings.Join(got, " ") != "a1 a2" {
		t.Fatalf("session a: %v", got)
	}
	// A message without a session id is refused whole: the subscription
	// requires sessions.
	if err := snd.SendMessage(ctx, &azservicebus.Message{Body: []byte("none")}, nil); err == nil {
		t.Fatal("a message without a session id was accepted for a subscription that requires sessions")
	}
}

// TestDevSDKPartitionedTopic: on a topic of two partitions, each
// subscription partition receives from the topic partition of its index;
// every message reaches each subscription once.
func TestDevSDKPartitionedTopic(t *testing.T) {
	t.Parallel()
	c := startTestDev(t,
		cluster.QueueSpec{Name: "pt", Kind: placementpb.EntityKind_ENTITY_KIND_TOPIC, Props: &placementpb.QueueProperties{PartitionCount: 2}},
		cluster.QueueSpec{Name: "pt/Subscriptions/a", Kind: placementpb.EntityKind_ENTITY_KIND_SUBSCRIPTION},
		cluster.QueueSpec{Name: "pt/Subscriptions/b", Kind: placementpb.EntityKind_ENTITY_KIND_SUBSCRIPTION})
	for _, name := range []string{"pt", "pt/Subscriptions/a"} {
		if e, err := c.Router.Entity(name); err != nil || len(e.PartitionGroups) != 2 {
			t.Fatalf("%s: %v, %v: want two partitions", name, e, err)
		}
	}
	client := devClient(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	snd, err := client.NewSender("pt", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer snd.Close(ctx)
	var want []string
	for i := range 20 {
		body := fmt.Sprintf("m%02d", i)
		want = append(want, body)
		if err := snd.SendMessage(ctx, &azservicebus.Message{Body: []byte(body)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, sub := range []string{"a", "b"} {
		if got := receiveBodies(t, ctx, client, "pt", sub, nil, len(want)); strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("pt/%s: %v", sub, got)
		}
	}
}
