package compat

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/quorumbus/quorumbus/cmd/quorumbus/cluster"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// TestSDKReleaserOnASession: the Go SDK's session receiver, received from
// in short windows with slow completions in between, as an application
// under load does. Between two ReceiveMessages calls the SDK's releaser
// releases whatever arrives on the link's remaining credit, so messages
// go out, come back released and go out again, out of order with the
// later ones the application already holds. Every message must still be
// received, exactly once, within the test's time, however often it went
// out and came back.
//
// The order the application sees is not the session's: a message the
// releaser gave back arrives after later ones that were already on their
// way (m00 m01 m03 m04 m02 in one run), as it would from Service Bus. The
// broker's own order, a released message before the session's later
// undelivered ones, is TestSessionReleaseOnTheLink's.
func TestSDKReleaserOnASession(t *testing.T) {
	t.Parallel()
	c := startTestDev(t, cluster.QueueSpec{Name: "churn", Props: &placementpb.QueueProperties{RequiresSession: true}})
	client := devClient(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const n = 60
	snd, err := client.NewSender("churn", nil)
	if err != nil {
		t.Fatal(err)
	}
	var bodies []string
	for i := range n {
		bodies = append(bodies, fmt.Sprintf("m%02d", i))
	}
	sendSession(t, ctx, snd, "s", bodies[0]) // the partition has the queue

	r, err := client.AcceptSessionForQueue(ctx, "churn", "s", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	// The rest trickle in while the receiver works, so that a receive
	// returns with few messages and credit left for the releaser.
	sent := make(chan error, 1)
	go func() {
		defer close(sent)
		for _, b := range bodies[1:] {
			sid := "s"
			if err := snd.SendMessage(ctx, &azservicebus.Message{SessionID: &sid, Body: []byte(b)}, nil); err != nil {
				sent <- err
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	var got []string
	var received []*azservicebus.ReceivedMessage
	deadline := time.Now().Add(45 * time.Second)
	for len(got) < n && time.Now().Before(deadline) {
		// A short window, so that most calls return with credit left.
		rctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		msgs, _ := r.ReceiveMessages(rctx, 7, nil)
		cancel()
		for _, m := range msgs {
			got = append(got, string(m.Body))
			received = append(received, m)
			// Slow completions: the releaser runs meanwhile.
			time.Sleep(15 * time.Millisecond)
			if err := r.CompleteMessage(ctx, m, nil); err != nil {
				t.Fatalf("complete %s after %v: %v", m.Body, got, err)
			}
		}
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	if len(got) != n {
		t.Fatalf("received %d of %d: %v; the session still holds %v", len(got), n, got, sessionHolds(ctx, r, n))
	}
	// In sequence order, what was received is what was sent, each once.
	inOrder := bodiesOf(bySequence(received))
	if !slices.Equal(inOrder, bodies) {
		t.Fatalf("received %v, in sequence order %v; want each message sent, once", got, inOrder)
	}
}
