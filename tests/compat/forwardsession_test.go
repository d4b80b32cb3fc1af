package compat

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/quorumbus/quorumbus/cmd/quorumbus/cluster"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// TestDevSDKForwardFromSessions: an entity that requires sessions
// forwards its messages with their session ids, in order per session: to
// a queue that requires sessions (each session received whole, in send
// order, by a session receiver) and to a plain queue; the sources end
// empty.
func TestDevSDKForwardFromSessions(t *testing.T) {
	t.Parallel()
	c := startTestDev(t,
		cluster.QueueSpec{Name: "ss", Props: &placementpb.QueueProperties{RequiresSession: true, ForwardTo: "sdest"}},
		cluster.QueueSpec{Name: "sdest", Props: &placementpb.QueueProperties{RequiresSession: true}},
		cluster.QueueSpec{Name: "ss2", Props: &placementpb.QueueProperties{RequiresSession: true, ForwardTo: "plain"}},
		cluster.QueueSpec{Name: "plain"})
	client := devClient(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sessions := []string{"a", "b", "c"}
	const per = 15
	for _, q := range []string{"ss", "ss2"} {
		snd, err := client.NewSender(q, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i := range per {
			for _, sid := range sessions {
				body := fmt.Sprintf("%s%02d", sid, i)
				if err := snd.SendMessage(ctx, &azservicebus.Message{SessionID: &sid, Body: []byte(body)}, nil); err != nil {
					t.Fatal(err)
				}
			}
		}
		snd.Close(ctx)
	}

	for _, sid := range sessions {
		r, err := client.AcceptSessionForQueue(ctx, "sdest", sid, nil)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		var received []*azservicebus.ReceivedMessage
		deadline := time.Now().Add(30 * time.Second)
		for len(got) < per && time.Now().Before(deadline) {
			rctx, cancel := context.WithTimeout(ctx, time.Second)
			msgs, _ := r.ReceiveMessages(rctx, per, nil)
			cancel()
			for _, m := range msgs {
				got = append(got, string(m.Body))
				received = append(received, m)
				if m.SessionID == nil || *m.SessionID != sid {
					t.Errorf("sdest session %s: message %s with session id %v", sid, m.Body, m.SessionID)
				}
				if err := r.CompleteMessage(ctx, m, nil); err != nil {
					t.Fatal(err)
				}
			}
		}
		if len(got) != per {
			// What the session holds, for the next reader of this failure:
			// locked (held under the session), available or missing.
			t.Fatalf("sdest session %s: %d messages %v, want %d; the session still holds %v", sid, len(got), got, per, sessionHolds(ctx, r, 2*per))
		}
		r.Close(ctx)
		// The forwarder keeps the session's order in the sequence numbers
		// it gives sdest; the order of arrival here can differ where the
		// SDK released a message (TestSDKReleaserOnASession).
		for i, m := range bySequence(received) {
			if want := fmt.Sprintf("%s%02d", sid, i); string(m.Body) != want {
				t.Fatalf("sdest session %s: received %v, %s at %d in sequence order, want %s", sid, got, m.Body, i, want)
			}
		}
	}

	plain, err := client.NewReceiverForQueue("plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close(ctx)
	got := drainReceiver(t, ctx, plain, "plain", per*len(sessions))
	if len(got) != per*len(sessions) {
		t.Fatalf("plain received %d messages, want %d once each", len(got), per*len(sessions))
	}
	// Forwarding keeps each session's order in the sequence numbers it
	// gives the plain queue. The order of arrival at this receiver is not
	// that order: when a ReceiveMessages call times out, the Go SDK
	// releases the messages that were already on their way, and the next
	// call may get later messages before the released ones come back.
	next := map[string]int{}
	for _, m := range bySequence(got) {
		sid := ""
		if m.SessionID != nil {
			sid = *m.SessionID
		}
		if want := fmt.Sprintf("%s%02d", sid, next[sid]); string(m.Body) != want {
			t.Fatalf("plain: %s (session %q, sequence number %d) where %s was next", m.Body, sid, *m.SequenceNumber, want)
		}
		next[sid]++
	}

	// The sources are empty: no session there has a message.
	for _, q := range []string{"ss", "ss2"} {
		actx, cancel := context.WithTimeout(ctx, 3*time.Second)
		r, err := client.AcceptNextSessionForQueue(actx, q, nil)
		cancel()
		if err == nil {
			rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			msgs, _ := r.ReceiveMessages(rctx, 10, nil)
			cancel()
			r.Close(ctx)
			if len(msgs) > 0 {
				t.Fatalf("%s still holds messages of session %s", q, r.SessionID())
			}
		}
	}
}
