package compat

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/quorumbus/quorumbus/cmd/quorumbus/cluster"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// TestDevSDKTopicLargeMessage: a message of 6 MB sent to a topic (staged
// in chunks under the topic, stored once) reaches each subscription its
// rules match intact, with its properties, once; so does one forwarded to
// the topic from a queue (the forwarder's send is staged too, keeping its
// origin and view); a subscription that matches nothing gets none.
func TestDevSDKTopicLargeMessage(t *testing.T) {
	t.Parallel()
	sub := placementpb.EntityKind_ENTITY_KIND_SUBSCRIPTION
	c := startTestDev(t,
		cluster.QueueSpec{Name: "bigt", Kind: placementpb.EntityKind_ENTITY_KIND_TOPIC,
			Props: &placementpb.QueueProperties{MaxMessageSizeInKilobytes: 16 << 10}},
		cluster.QueueSpec{Name: "bigin", Props: &placementpb.QueueProperties{MaxMessageSizeInKilobytes: 16 << 10, ForwardTo: "bigt"}},
		cluster.QueueSpec{Name: "bigt/Subscriptions/a", Kind: sub},
		cluster.QueueSpec{Name: "bigt/Subscriptions/b", Kind: sub, Rules: []*placementpb.Rule{{Name: "big",
			Filter: &placementpb.Rule_SqlFilter{SqlFilter: &placementpb.SqlFilter{Expression: "kind = 'big'"}},
			Action: &placementpb.SqlRuleAction{Expression: "SET seen = 'b'"}}}},
		cluster.QueueSpec{Name: "bigt/Subscriptions/none", Kind: sub, Rules: []*placementpb.Rule{{Name: "no",
			Filter: &placementpb.Rule_FalseFilter{FalseFilter: true}}}})
	client := devClient(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	body := make([]byte, 6<<20)
	for i := range body {
		body[i] = byte(i*31 + i>>11)
	}
	snd, err := client.NewSender("bigt", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer snd.Close(ctx)
	if err := snd.SendMessage(ctx, &azservicebus.Message{Body: body, ApplicationProperties: map[string]any{"kind": "big"}}, nil); err != nil {
		t.Fatalf("send 6 MB to a topic: %v", err)
	}
	in, err := client.NewSender("bigin", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close(ctx)
	fwdBody := body[:3<<20]
	if err := in.SendMessage(ctx, &azservicebus.Message{Body: fwdBody, ApplicationProperties: map[string]any{"kind": "big"}}, nil); err != nil {
		t.Fatalf("send 3 MB to the queue forwarding to the topic: %v", err)
	}
	for _, name := range []string{"a", "b"} {
		r := subscriptionReceiver(t, client, "bigt", name)
		got := drainReceiver(t, ctx, r, "bigt/"+name, 2)
		var direct, forwarded int
		for _, m := range got {
			switch {
			case bytes.Equal(m.Body, body):
				direct++
			case bytes.Equal(m.Body, fwdBody):
				forwarded++
			default:
				t.Errorf("bigt/%s: a message of %d bytes, not one sent", name, len(m.Body))
			}
			if m.ApplicationProperties["kind"] != "big" || name == "b" && m.ApplicationProperties["seen"] != "b" {
				t.Errorf("bigt/%s: a copy with properties %v", name, m.ApplicationProperties)
			}
		}
		if direct != 1 || forwarded != 1 {
			t.Fatalf("bigt/%s: %d copies sent directly and %d forwarded, want one each", name, direct, forwarded)
		}
	}
	none := subscriptionReceiver(t, client, "bigt", "none")
	if got := drainReceiver(t, ctx, none, "bigt/none", 0); len(got) != 0 {
		t.Fatalf("bigt/none received %d messages", len(got))
	}
}
