package compat

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"

	"github.com/quorumbus/quorumbus/placement/sas"
)

// TestAdminUpdateRuleIsAtomic sends to a topic while the admin client
// updates its subscription's only rule over and over, between two filters
// that both take every message. An update that removed the rule and then
// added the new one would let some messages meet the subscription without
// a rule (lost to it); one that added before removing, with both (two
// copies). Every message must reach the subscription exactly once.
func TestAdminUpdateRuleIsAtomic(t *testing.T) {
	t.Parallel()
	c := startAdminDev(t)
	ac := adminClient(t, c, sas.DevKeyName, sas.DevKey)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := ac.CreateTopic(ctx, "flip", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ac.CreateSubscription(ctx, "flip", "all", nil); err != nil {
		t.Fatal(err)
	}
	client := devClient(t, c)
	sender, err := client.NewSender("flip", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sender.Close(ctx)

	done := make(chan struct{})
	var updates atomic.Int64
	updated := make(chan error, 1)
	go func() {
		filters := []string{"n >= 0", "n < 1000000"}
		for i := 0; ; i++ {
			select {
			case <-done:
				updated <- nil
				return
			default:
			}
			_, err := ac.UpdateRule(ctx, "flip", "all", admin.RuleProperties{Name: "$Default", Filter: &admin.SQLFilter{Expression: filters[i%2]}})
			if err != nil {
				updated <- err
				return
			}
			updates.Add(1)
		}
	}()
	const sends = 300
	for i := range sends {
		if err := sender.SendMessage(ctx, &azservicebus.Message{Body: []byte(fmt.Sprint(i)), ApplicationProperties: map[string]any{"n": int64(i)}}, nil); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	close(done)
	if err := <-updated; err != nil {
		t.Fatalf("UpdateRule: %v", err)
	}
	t.Logf("%d sends during %d rule updates", sends, updates.Load())
	if updates.Load() < 5 {
		t.Logf("few updates overlapped the sends: the test proves little this run")
	}

	receiver, err := client.NewReceiverForSubscription("flip", "all", &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
	if err != nil {
		t.Fatal(err)
	}
	defer receiver.Close(ctx)
	seen := map[string]int{}
	total := 0
	for {
		// Once all arrived, wait a little longer for a duplicate.
		wait := 10 * time.Second
		if total >= sends {
			wait = 2 * time.Second
		}
		rctx, rcancel := context.WithTimeout(ctx, wait)
		msgs, err := receiver.ReceiveMessages(rctx, 100, nil)
		rcancel()
		if err != nil && rctx.Err() == nil {
			t.Fatal(err)
		}
		if len(msgs) == 0 {
			break
		}
		for _, m := range msgs {
			seen[string(m.Body)]++
			total++
		}
	}
	var lost, doubled []string
	for i := range sends {
		switch n := seen[fmt.Sprint(i)]; {
		case n == 0:
			lost = append(lost, fmt.Sprint(i))
		case n > 1:
			doubled = append(doubled, fmt.Sprint(i))
		}
	}
	if len(lost) > 0 || len(doubled) > 0 {
		t.Fatalf("%d received of %d sent; missed by the subscription: %v; received twice: %v", total, sends, lost, doubled)
	}
}
