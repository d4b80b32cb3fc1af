package compat

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"

	"github.com/quorumbus/quorumbus/placement/sas"
)

// TestAdminTopicRuntimeCounts: after real sends, schedules and a
// dead-letter through the Go SDK, the Go admin client reads each
// subscription's active, dead-lettered and scheduled counts (one entity,
// and in the runtime-properties lists), on a plain and a partitioned
// topic, and the topic's own figures.
func TestAdminTopicRuntimeCounts(t *testing.T) {
	t.Parallel()
	c := startAdminDev(t)
	ac := adminClient(t, c, sas.DevKeyName, sas.DevKey)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	client := devClient(t, c)
	// The Go client reads no ScheduledMessageCount of a subscription
	// (v1.11.0): the scheduled are what TotalMessageCount (Service Bus's
	// MessageCount) holds besides the active and dead-lettered.
	type counts struct{ active, dead, scheduled, total int64 }
	for _, topic := range []struct {
		name        string
		partitioned bool
	}{{"plain", false}, {"parted", true}} {
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
		sender, err := client.NewSender(topic.name, nil)
		if err != nil {
			t.Fatal(err)
		}
		color := func(i int) string { return map[bool]string{true: "red", false: "blue"}[i%2 == 0] }
		for i := range 4 { // 2 red
			if err := sender.SendMessage(ctx, &azservicebus.Message{Body: fmt.Appendf(nil, "m%d", i), ApplicationProperties: map[string]any{"color": color(i)}}, nil); err != nil {
				t.Fatalf("send to %s: %v", topic.name, err)
			}
		}
		later := []*azservicebus.Message{ // 1 red
			{Body: []byte("later0"), ApplicationProperties: map[string]any{"color": "red"}},
			{Body: []byte("later1"), ApplicationProperties: map[string]any{"color": "blue"}},
		}
		if _, err := sender.ScheduleMessages(ctx, later, time.Now().Add(time.Hour), nil); err != nil {
			t.Fatalf("schedule on %s: %v", topic.name, err)
		}
		sender.Close(ctx)
		receiver, err := client.NewReceiverForSubscription(topic.name, "all", nil)
		if err != nil {
			t.Fatal(err)
		}
		msgs, err := receiver.ReceiveMessages(ctx, 1, nil)
		if err != nil || len(msgs) != 1 {
			t.Fatalf("receive from %s/all: %d messages, %v", topic.name, len(msgs), err)
		}
		if err := receiver.DeadLetterMessage(ctx, msgs[0], nil); err != nil {
			t.Fatal(err)
		}
		receiver.Close(ctx)

		want := map[string]counts{"all": {3, 1, 2, 6}, "red": {2, 0, 1, 3}}
		for sub, w := range want {
			var got counts
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
				rp, err := ac.GetSubscriptionRuntimeProperties(ctx, topic.name, sub, nil)
				if err != nil || rp == nil {
					t.Fatalf("GetSubscriptionRuntimeProperties %s/%s: %v, %v", topic.name, sub, rp, err)
				}
				r := rp.SubscriptionRuntimeProperties
				got = counts{int64(r.ActiveMessageCount), int64(r.DeadLetterMessageCount), r.TotalMessageCount - int64(r.ActiveMessageCount) - int64(r.DeadLetterMessageCount), r.TotalMessageCount}
				if got == w || time.Now().After(deadline) {
					// A subscription is accessed by its receivers, not
					// by the sends to its topic (docs/gateway.md).
					if r.TransferMessageCount != 0 || r.TransferDeadLetterMessageCount != 0 || r.CreatedAt.IsZero() || r.AccessedAt.IsZero() != (sub == "red") {
						t.Errorf("%s/%s: %+v", topic.name, sub, r)
					}
					break
				}
			}
			if got != w {
				t.Errorf("%s/%s counts %+v, want %+v", topic.name, sub, got, w)
			}
		}
		listed := map[string]counts{}
		for pager := ac.NewListSubscriptionsRuntimePropertiesPager(topic.name, &admin.ListSubscriptionsRuntimePropertiesOptions{MaxPageSize: 1}); pager.More(); {
			page, err := pager.NextPage(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range page.SubscriptionRuntimeProperties {
				listed[s.SubscriptionName] = counts{int64(s.ActiveMessageCount), int64(s.DeadLetterMessageCount), s.TotalMessageCount - int64(s.ActiveMessageCount) - int64(s.DeadLetterMessageCount), s.TotalMessageCount}
			}
		}
		if len(listed) != 2 || listed["all"] != want["all"] || listed["red"] != want["red"] {
			t.Errorf("%s: listed subscription counts %+v, want %+v", topic.name, listed, want)
		}

		rt, err := ac.GetTopicRuntimeProperties(ctx, topic.name, nil)
		if err != nil || rt == nil {
			t.Fatalf("GetTopicRuntimeProperties %s: %v, %v", topic.name, rt, err)
		}
		r := rt.TopicRuntimeProperties
		t.Logf("%s: topic runtime properties %+v", topic.name, r)
		if r.SubscriptionCount != 2 || r.SQLFilterCount != 1 || r.AccessedAt.IsZero() || r.CreatedAt.IsZero() {
			t.Errorf("%s: topic runtime properties %+v", topic.name, r)
		}
	}
	listed := map[string]admin.TopicRuntimeProperties{}
	for pager := ac.NewListTopicsRuntimePropertiesPager(&admin.ListTopicsRuntimePropertiesOptions{MaxPageSize: 1}); pager.More(); {
		page, err := pager.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, tp := range page.TopicRuntimeProperties {
			listed[tp.TopicName] = tp.TopicRuntimeProperties
		}
	}
	for _, name := range []string{"plain", "parted"} {
		rt, err := ac.GetTopicRuntimeProperties(ctx, name, nil)
		if err != nil {
			t.Fatal(err)
		}
		l, one := listed[name], rt.TopicRuntimeProperties
		if l.SubscriptionCount != 2 || l.ScheduledMessageCount != one.ScheduledMessageCount || l.SizeInBytes != one.SizeInBytes {
			t.Errorf("listed topic %s: %+v, one by one %+v", name, l, one)
		}
	}
}
