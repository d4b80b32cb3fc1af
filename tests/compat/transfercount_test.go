package compat

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"

	"github.com/quorumbus/quorumbus/cmd/quorumbus/cluster"
	"github.com/quorumbus/quorumbus/placement/sas"
)

// TestAdminTransferCounts: the messages of a queue and of a subscription
// that forward to a queue that does not exist yet wait in them, and the
// admin client reads them as TransferMessageCount, not as active (one
// entity, and in a list); once the destination is created they move, the
// sources count none, and the destination counts them as active.
// TransferDeadLetterMessageCount stays 0 (there is no transfer
// dead-letter queue).
func TestAdminTransferCounts(t *testing.T) {
	t.Parallel()
	c := startAdminDev(t)
	ac := adminClient(t, c, sas.DevKeyName, sas.DevKey)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := ac.CreateQueue(ctx, "src", &admin.CreateQueueOptions{Properties: &admin.QueueProperties{ForwardTo: to.Ptr("later")}}); err != nil {
		t.Fatal(err)
	}
	if _, err := ac.CreateTopic(ctx, "news", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ac.CreateSubscription(ctx, "news", "fwd", &admin.CreateSubscriptionOptions{Properties: &admin.SubscriptionProperties{ForwardTo: to.Ptr("later")}}); err != nil {
		t.Fatal(err)
	}
	if _, err := ac.CreateSubscription(ctx, "news", "keep", nil); err != nil {
		t.Fatal(err)
	}
	client, err := azservicebus.NewClientFromConnectionString(cluster.ConnectionString(c.AMQPAddr), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close(ctx)
	send := func(entity string, n int) {
		t.Helper()
		snd, err := client.NewSender(entity, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer snd.Close(ctx)
		for i := range n {
			if err := snd.SendMessage(ctx, &azservicebus.Message{Body: fmt.Appendf(nil, "%s-%d", entity, i)}, nil); err != nil {
				t.Fatalf("send to %s: %v", entity, err)
			}
		}
	}
	send("src", 3)
	send("news", 2)

	type counts struct{ active, transfer, transferDLQ, total int64 }
	queueCounts := func(name string) counts {
		t.Helper()
		r, err := ac.GetQueueRuntimeProperties(ctx, name, nil)
		if err != nil || r == nil {
			t.Fatalf("GetQueueRuntimeProperties %s: %v", name, err)
		}
		return counts{int64(r.ActiveMessageCount), int64(r.TransferMessageCount), int64(r.TransferDeadLetterMessageCount), r.TotalMessageCount}
	}
	subCounts := func(name string) counts {
		t.Helper()
		r, err := ac.GetSubscriptionRuntimeProperties(ctx, "news", name, nil)
		if err != nil || r == nil {
			t.Fatalf("GetSubscriptionRuntimeProperties %s: %v", name, err)
		}
		return counts{int64(r.ActiveMessageCount), int64(r.TransferMessageCount), int64(r.TransferDeadLetterMessageCount), r.TotalMessageCount}
	}
	waitFor := func(what string, read func() counts, want counts) {
		t.Helper()
		var got counts
		start := time.Now()
		// A forwarder whose sends failed retries every second; a lock
		// it could not release runs out after the source's lock
		// duration (a minute).
		for deadline := start.Add(90 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			if got = read(); got == want {
				t.Logf("%s: %+v after %v", what, got, time.Since(start).Round(time.Millisecond))
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: counts %+v, want %+v", what, got, want)
			}
		}
	}
	waitFor("src before its destination exists", func() counts { return queueCounts("src") }, counts{transfer: 3, total: 3})
	waitFor("news/fwd before its destination exists", func() counts { return subCounts("fwd") }, counts{transfer: 2, total: 2})
	waitFor("news/keep, which does not forward", func() counts { return subCounts("keep") }, counts{active: 2, total: 2})

	// A list reads the counts by group (GroupStats): the same figures.
	listed := map[string]admin.QueueRuntimeProperties{}
	for pager := ac.NewListQueuesRuntimePropertiesPager(nil); pager.More(); {
		page, err := pager.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range page.QueueRuntimeProperties {
			listed[q.QueueName] = q.QueueRuntimeProperties
		}
	}
	if r := listed["src"]; r.TransferMessageCount != 3 || r.ActiveMessageCount != 0 || r.TransferDeadLetterMessageCount != 0 {
		t.Fatalf("src listed with %+v", r)
	}

	if _, err := ac.CreateQueue(ctx, "later", nil); err != nil {
		t.Fatal(err)
	}
	waitFor("src after its destination was created", func() counts { return queueCounts("src") }, counts{})
	waitFor("news/fwd after its destination was created", func() counts { return subCounts("fwd") }, counts{})
	waitFor("later, the destination", func() counts { return queueCounts("later") }, counts{active: 5, total: 5})
}
