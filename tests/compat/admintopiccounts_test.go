package compat

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"

	"github.com/quorumbus/quorumbus/cmd/quorumbus/cluster"
	"github.com/quorumbus/quorumbus/placement/sas"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// topicFigures are what the Go admin client reads of a topic's size and
// scheduled messages.
type topicFigures struct {
	size      int64
	scheduled int32
}

// waitTopicFigures polls the topic's runtime properties until ok accepts
// them (the counts are the partitions' counters, read within a second)
// and returns the last read.
func waitTopicFigures(ctx context.Context, t *testing.T, ac *admin.Client, topic string, ok func(topicFigures) bool) topicFigures {
	t.Helper()
	var got topicFigures
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		rt, err := ac.GetTopicRuntimeProperties(ctx, topic, nil)
		if err != nil || rt == nil {
			t.Fatalf("GetTopicRuntimeProperties %s: %v, %v", topic, rt, err)
		}
		got = topicFigures{rt.SizeInBytes, rt.ScheduledMessageCount}
		if ok(got) || time.Now().After(deadline) {
			return got
		}
	}
}

// TestAdminTopicSizeAndScheduled: a topic's SizeInBytes and
// ScheduledMessageCount through the Go admin client follow what the Go
// SDK sends, schedules, cancels and completes, on a plain and a
// partitioned topic: the size counts each message once whatever the
// number of subscriptions that hold it (the same messages sent to a
// queue make the same size), the scheduled count counts the messages
// scheduled on the topic, and both go to 0 when every message is gone.
// The topics list reads the same figures.
func TestAdminTopicSizeAndScheduled(t *testing.T) {
	t.Parallel()
	c := startAdminDev(t)
	ac := adminClient(t, c, sas.DevKeyName, sas.DevKey)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	client := devClient(t, c)
	for _, topic := range []struct {
		name        string
		partitioned bool
	}{{"plain", false}, {"parted", true}} {
		queue := topic.name + "-q"
		if _, err := ac.CreateQueue(ctx, queue, &admin.CreateQueueOptions{Properties: &admin.QueueProperties{EnablePartitioning: to.Ptr(topic.partitioned)}}); err != nil {
			t.Fatalf("CreateQueue %s: %v", queue, err)
		}
		if _, err := ac.CreateTopic(ctx, topic.name, &admin.CreateTopicOptions{Properties: &admin.TopicProperties{EnablePartitioning: to.Ptr(topic.partitioned)}}); err != nil {
			t.Fatalf("CreateTopic %s: %v", topic.name, err)
		}
		if _, err := ac.CreateSubscription(ctx, topic.name, "all", nil); err != nil {
			t.Fatal(err)
		}
		if _, err := ac.CreateSubscription(ctx, topic.name, "red", &admin.CreateSubscriptionOptions{Properties: &admin.SubscriptionProperties{
			DefaultRule: &admin.RuleProperties{Name: "red", Filter: &admin.SQLFilter{Expression: "color = 'red'"}},
		}}); err != nil {
			t.Fatal(err)
		}
		color := func(i int) string { return map[bool]string{true: "red", false: "blue"}[i%2 == 0] }
		message := func(kind string, i int) *azservicebus.Message {
			return &azservicebus.Message{
				MessageID:             to.Ptr(fmt.Sprintf("%s-%d", kind, i)),
				Body:                  fmt.Appendf(nil, "%s body %d of some length", kind, i),
				ApplicationProperties: map[string]any{"color": color(i)},
			}
		}
		at := time.Now().Add(time.Hour)
		var schedSeqs []int64
		for _, dest := range []string{queue, topic.name} {
			sender, err := client.NewSender(dest, nil)
			if err != nil {
				t.Fatal(err)
			}
			for i := range 4 { // 2 red: on the topic, 6 copies of 4 messages
				if err := sender.SendMessage(ctx, message("now", i), nil); err != nil {
					t.Fatalf("send to %s: %v", dest, err)
				}
			}
			later := []*azservicebus.Message{message("later", 0), message("later", 1), message("later", 2)} // 2 red
			seqs, err := sender.ScheduleMessages(ctx, later, at, nil)
			if err != nil {
				t.Fatalf("schedule on %s: %v", dest, err)
			}
			if dest == topic.name {
				schedSeqs = seqs
				// Cancel one: later-1, the blue one.
				if err := sender.CancelScheduledMessages(ctx, seqs[1:2], nil); err != nil {
					t.Fatalf("cancel on %s: %v", dest, err)
				}
			} else if err := sender.CancelScheduledMessages(ctx, seqs[1:2], nil); err != nil {
				t.Fatalf("cancel on %s: %v", dest, err)
			}
			sender.Close(ctx)
		}
		var queueSize int64
		for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			rq, err := ac.GetQueueRuntimeProperties(ctx, queue, nil)
			if err != nil || rq == nil {
				t.Fatalf("GetQueueRuntimeProperties %s: %v, %v", queue, rq, err)
			}
			queueSize = rq.SizeInBytes
			if (rq.ActiveMessageCount == 4 && rq.ScheduledMessageCount == 2) || time.Now().After(deadline) {
				break
			}
		}
		if queueSize <= 0 {
			t.Fatalf("%s: queue size %d", queue, queueSize)
		}
		full := waitTopicFigures(ctx, t, ac, topic.name, func(f topicFigures) bool { return f.scheduled == 2 && f.size == queueSize })
		if full.scheduled != 2 || full.size != queueSize {
			t.Fatalf("%s: topic holds %d bytes and %d scheduled; want the 6 messages once, as queue %s holds them (%d bytes), 2 scheduled",
				topic.name, full.size, full.scheduled, queue, queueSize)
		}

		// Receive and complete every active copy: only the scheduled
		// ones are left, whole (each held by every subscription it
		// went to).
		for sub, n := range map[string]int{"all": 4, "red": 2} {
			receiver, err := client.NewReceiverForSubscription(topic.name, sub, nil)
			if err != nil {
				t.Fatal(err)
			}
			for got := 0; got < n; {
				msgs, err := receiver.ReceiveMessages(ctx, n-got, nil)
				if err != nil {
					t.Fatalf("receive from %s/%s: %v", topic.name, sub, err)
				}
				for _, m := range msgs {
					if err := receiver.CompleteMessage(ctx, m, nil); err != nil {
						t.Fatal(err)
					}
				}
				got += len(msgs)
			}
			receiver.Close(ctx)
		}
		left := waitTopicFigures(ctx, t, ac, topic.name, func(f topicFigures) bool { return f.size < full.size })
		if left.scheduled != 2 || left.size <= 0 || left.size >= full.size {
			t.Fatalf("%s: after completing the active copies, %d bytes and %d scheduled; want fewer bytes than %d, more than 0, 2 scheduled",
				topic.name, left.size, left.scheduled, full.size)
		}

		// The topics list reads the same figures.
		listed := map[string]topicFigures{}
		for pager := ac.NewListTopicsRuntimePropertiesPager(&admin.ListTopicsRuntimePropertiesOptions{MaxPageSize: 1}); pager.More(); {
			page, err := pager.NextPage(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, tp := range page.TopicRuntimeProperties {
				listed[tp.TopicName] = topicFigures{tp.SizeInBytes, tp.ScheduledMessageCount}
			}
		}
		if listed[topic.name] != left {
			t.Errorf("%s: listed %+v, read alone %+v", topic.name, listed[topic.name], left)
		}

		// Cancelling the rest leaves nothing.
		sender, err := client.NewSender(topic.name, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := sender.CancelScheduledMessages(ctx, []int64{schedSeqs[0], schedSeqs[2]}, nil); err != nil {
			t.Fatalf("cancel on %s: %v", topic.name, err)
		}
		sender.Close(ctx)
		empty := waitTopicFigures(ctx, t, ac, topic.name, func(f topicFigures) bool { return f == topicFigures{} })
		if empty != (topicFigures{}) {
			t.Fatalf("%s: with no message left, %d bytes and %d scheduled", topic.name, empty.size, empty.scheduled)
		}
	}
}

// TestAdminTopicCountsSurviveRestart: a topic's size and scheduled count
// read through the Go admin client are the same after the whole cluster
// restarts (its partitions' counters are in their entity records).
func TestAdminTopicCountsSurviveRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	port := freePortRun(t, 3)
	start := func() *cluster.Dev {
		t.Helper()
		c, err := cluster.StartDev(context.Background(), cluster.DevOptions{
			DataDir: dir, AMQPAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", Nodes: 3, NodePort: port, Groups: 3, CacheMB: 16, LogLevel: "error",
		})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := start()
	err := cluster.CreateQueues(ctx, c.NodeAddrs, c.Creds, []cluster.QueueSpec{
		{Name: "rt", Kind: placementpb.EntityKind_ENTITY_KIND_TOPIC, Props: &placementpb.QueueProperties{PartitionCount: 2}},
		{Name: "rt/Subscriptions/a", Kind: placementpb.EntityKind_ENTITY_KIND_SUBSCRIPTION},
		{Name: "rt/Subscriptions/b", Kind: placementpb.EntityKind_ENTITY_KIND_SUBSCRIPTION},
	}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		c.Close()
		t.Fatal(err)
	}
	client := devClient(t, c)
	var sender *azservicebus.Sender
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if sender, err = client.NewSender("rt", nil); err == nil {
			if err = sender.SendMessage(ctx, &azservicebus.Message{Body: []byte("first")}, nil); err == nil {
				break
			}
			sender.Close(ctx)
		}
		if time.Now().After(deadline) {
			c.Close()
			t.Fatalf("send to rt: %v", err)
		}
	}
	for i := range 5 {
		if err := sender.SendMessage(ctx, &azservicebus.Message{Body: fmt.Appendf(nil, "m%d", i)}, nil); err != nil {
			c.Close()
			t.Fatal(err)
		}
	}
	var later []*azservicebus.Message
	for i := range 3 {
		later = append(later, &azservicebus.Message{Body: fmt.Appendf(nil, "later%d", i)})
	}
	if _, err := sender.ScheduleMessages(ctx, later, time.Now().Add(time.Hour), nil); err != nil {
		c.Close()
		t.Fatal(err)
	}
	sender.Close(ctx)
	before := waitTopicFigures(ctx, t, adminClient(t, c, sas.DevKeyName, sas.DevKey), "rt", func(f topicFigures) bool { return f.scheduled == 3 && f.size > 0 })
	client.Close(ctx)
	c.Close()
	if before.scheduled != 3 || before.size <= 0 {
		t.Fatalf("before the restart: %d bytes, %d scheduled; want some bytes, 3 scheduled", before.size, before.scheduled)
	}

	c = start()
	defer c.Close()
	after := waitTopicFigures(ctx, t, adminClient(t, c, sas.DevKeyName, sas.DevKey), "rt", func(f topicFigures) bool { return f == before })
	if after != before {
		t.Fatalf("after the restart: %+v, before %+v", after, before)
	}
}
