package frontend_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	goamqp "github.com/Azure/go-amqp"

	"github.com/quorumbus/quorumbus/frontend"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// TestSDKThrottledBurstDelivered: a burst of sends beyond the namespace's
// credits is refused with server-busy in Azure's words, retried by the Go
// SDK with its default policy and finally delivered, each message once;
// receiving waits for credits instead of failing; the throttled counter
// moves for the entity.
func TestSDKThrottledBurstDelivered(t *testing.T) {
	b := newMemBackend("q")
	srv, err := frontend.New(frontend.Config{Backend: b, Rules: devRules(t), ReceiveWait: 500 * time.Millisecond, ThrottleCredits: 10})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Shutdown(context.Background())
	addr := ln.Addr().String()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// The raw refusal first: what the SDK sees and retries.
	snd := amqpSender(t, ctx, addr, "q")
	var busy *goamqp.Error
	for i := 0; i < 50 && busy == nil; i++ {
		err := snd.Send(ctx, goamqp.NewMessage([]byte("raw")), nil)
		if err != nil {
			if ae, ok := err.(*goamqp.Error); ok {
				busy = ae
				continue
			}
			t.Fatal(err)
		}
	}
	if busy == nil || busy.Condition != "com.microsoft:server-busy" ||
		!contains(busy.Description, "The request was terminated because the entity is being throttled. Error code: 50009. Please wait 2 seconds and try again.") ||
		!contains(busy.Description, "TrackingId:") {
		t.Fatalf("past the credits: %v, want server-busy in Azure's words", busy)
	}
	raw := b.left("q")

	c := sdkClient(t, addr)
	sender, err := c.NewSender("q", nil)
	if err != nil {
		t.Fatal(err)
	}
	const burst = 30
	var wg sync.WaitGroup
	errs := make(chan error, burst)
	for i := range burst {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- sender.SendMessage(ctx, &azservicebus.Message{Body: []byte(fmt.Sprint(i))}, nil)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("a throttled send was not retried to success: %v", err)
		}
	}
	if got := b.left("q") - raw; got != burst {
		t.Fatalf("%d of the burst's %d messages stored", got, burst)
	}
	rcv, err := c.NewReceiverForQueue("q", &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for len(seen) < burst {
		msgs, err := rcv.ReceiveMessages(ctx, burst, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			if string(m.Body) != "raw" {
				seen[string(m.Body)]++
			}
		}
	}
	for body, n := range seen {
		if n != 1 {
			t.Fatalf("message %s received %d times", body, n)
		}
	}
	if got := srv.Throttled()["q"]; got == 0 {
		t.Fatal("the throttled counter did not move")
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// filteredBackend makes one entity of a memBackend a topic with a number
// of filters, as the router reports them from the routing table.
type filteredBackend struct {
	*memBackend
	filters int
}

func (b filteredBackend) Filters(topic string) int { return b.filters }

// TestSDKTopicSendsPayPerFilter: a message sent to a topic costs a credit
// per filter it is evaluated against besides its own (seed 003), so a
// topic with 49 filters runs through a budget of 100 credits a second
// within a few sends, which the Go SDK retries to success; as many sends
// to a queue (1 credit each) are never throttled.
func TestSDKTopicSendsPayPerFilter(t *testing.T) {
	mem := newMemBackend("q", "t")
	mem.entities["t"].Kind = placementpb.EntityKind_ENTITY_KIND_TOPIC
	b := filteredBackend{mem, 49}
	srv, err := frontend.New(frontend.Config{Backend: b, Rules: devRules(t), ReceiveWait: 500 * time.Millisecond, ThrottleCredits: 100})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Shutdown(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := sdkClient(t, ln.Addr().String())
	const n = 8 // 8 credits to the queue; 400 to the topic
	for _, entity := range []string{"q", "t"} {
		snd, err := c.NewSender(entity, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i := range n {
			if err := snd.SendMessage(ctx, &azservicebus.Message{Body: []byte(fmt.Sprint(i))}, nil); err != nil {
				t.Fatalf("send %d to %s: %v", i, entity, err)
			}
		}
		snd.Close(ctx)
	}
	if got := srv.Throttled()["q"]; got != 0 {
		t.Fatalf("%d sends of 1 credit each to the queue were throttled %d times", n, got)
	}
	if got := srv.Throttled()["t"]; got == 0 {
		t.Fatal("sends of 50 credits each to the topic were never throttled")
	}
	if mem.left("q") != n || mem.left("t") != n {
		t.Fatalf("stored %d in q and %d in t, want %d each", mem.left("q"), mem.left("t"), n)
	}
}
