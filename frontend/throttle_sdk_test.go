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
