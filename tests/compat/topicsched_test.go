package compat

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/quorumbus/quorumbus/cmd/quorumbus/cluster"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// TestDevSDKTopicCancelScheduled: CancelScheduledMessages on a topic
// sender, with the sequence numbers ScheduleMessages answered, takes the
// message out of every subscription it was scheduled in (a two-partition
// topic: the numbers name either partition); what was not cancelled
// arrives when due.
func TestDevSDKTopicCancelScheduled(t *testing.T) {
	t.Parallel()
	c := startTestDev(t,
		cluster.QueueSpec{Name: "ts", Kind: placementpb.EntityKind_ENTITY_KIND_TOPIC, Props: &placementpb.QueueProperties{PartitionCount: 2}},
		cluster.QueueSpec{Name: "ts/Subscriptions/a", Kind: placementpb.EntityKind_ENTITY_KIND_SUBSCRIPTION},
		cluster.QueueSpec{Name: "ts/Subscriptions/b", Kind: placementpb.EntityKind_ENTITY_KIND_SUBSCRIPTION})
	client := devClient(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	snd, err := client.NewSender("ts", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer snd.Close(ctx)
	due := time.Now().Add(4 * time.Second)
	var msgs []*azservicebus.Message
	for _, b := range []string{"k0", "x1", "k2", "x3", "x4", "k5"} {
		msgs = append(msgs, &azservicebus.Message{Body: []byte(b)})
	}
	seqs, err := snd.ScheduleMessages(ctx, msgs, due, nil)
	if err != nil || len(seqs) != len(msgs) {
		t.Fatalf("schedule: %v, %v", seqs, err)
	}
	var cancelSeqs []int64
	for i, m := range msgs {
		if m.Body[0] == 'x' {
			cancelSeqs = append(cancelSeqs, seqs[i])
		}
	}
	if err := snd.CancelScheduledMessages(ctx, cancelSeqs, nil); err != nil {
		t.Fatalf("cancel on the topic: %v", err)
	}
	for _, sub := range []string{"a", "b"} {
		r, err := client.NewReceiverForSubscription("ts", sub, nil)
		if err != nil {
			t.Fatal(err)
		}
		// A page holds one partition's messages, as on Service Bus:
		// page on until an empty one.
		peeked := 0
		for {
			page, err := r.PeekMessages(ctx, 20, nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(page) == 0 {
				break
			}
			peeked += len(page)
		}
		r.Close(ctx)
		if peeked != 3 {
			t.Errorf("ts/%s holds %d scheduled messages after the cancel, want 3", sub, peeked)
		}
	}
	for _, sub := range []string{"a", "b"} {
		got := drainReceiver(t, ctx, subscriptionReceiver(t, client, "ts", sub), "ts/"+sub, 3)
		if b := bodiesSorted(got); strings.Join(b, " ") != "k0 k2 k5" {
			t.Errorf("ts/%s received %v, want k0 k2 k5", sub, b)
		}
	}
}
