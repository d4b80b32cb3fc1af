package frontend_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	goamqp "github.com/Azure/go-amqp"
	"google.golang.org/protobuf/proto"

	"github.com/quorumbus/quorumbus/frontend"
	"github.com/quorumbus/quorumbus/placement/sas"
)

// TestAcceptNextDeadlineInVirtualTime: the Go SDK's accept-next with 3 s
// left, on a partition whose answer comes a second after the wait it was
// given (lateSessions), as a leader's does under load: its timer, then the
// way back. The front-end asks the partition to wait until its own
// deadline, a second before the client's (acceptWait), and answers none
// at that deadline exactly, not when the partition answers: with only the
// margin before the client's timeout left, the SDK would fail with its
// context's deadline instead of the service's timeout. The session that
// the late answer brings is released the instant it comes, not left
// locked for nobody until its lock runs out.
func TestAcceptNextDeadlineInVirtualTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newLateSessions(time.Second, "late")
		f := serveInMemory(t, frontend.Config{Backend: b, Rules: devRules(t)})
		client := f.sdkClient(t)
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
		defer cancel()
		start := time.Now()
		_, err := client.AcceptNextSessionForQueue(ctx, "sq", nil)
		took := time.Since(start)
		var sbErr *azservicebus.Error
		if !errors.As(err, &sbErr) || sbErr.Code != azservicebus.CodeTimeout {
			t.Fatalf("accept next with none available in time, after %v: %v; want the service's timeout", took, err)
		}
		b.mu.Lock()
		waits := b.waits
		b.mu.Unlock()
		// The SDK sends its time left (3 s: claims and attaches take no
		// virtual time) less a jitter of up to 30 ms.
		if len(waits) != 1 || waits[0] > 2*time.Second || waits[0] < 1970*time.Millisecond {
			t.Fatalf("the partition was asked to wait %v; want one wait of 1.97-2 s, a second before the client's 3 s", waits)
		}
		if took != waits[0] {
			t.Fatalf("the accept was answered %v after it was asked; want at the front-end's deadline, %v", took, waits[0])
		}

		late := start.Add(waits[0] + b.lateBy)
		sleepUntil(late.Add(-time.Millisecond))
		select {
		case r := <-b.released:
			t.Fatalf("session %q released before the partition locked it", r.SessionId)
		default:
		}
		sleepUntil(late)
		select {
		case r := <-b.released:
			b.mu.Lock()
			token := b.token
			b.mu.Unlock()
			if r.SessionId != "late" || !bytes.Equal(r.Token, token) {
				t.Fatalf("released session %q token %x; want late under %x", r.SessionId, r.Token, token)
			}
		default:
			t.Fatal("the session the partition locked after the answer was not released when its lock came")
		}
	})
}

// TestAcceptNextDefaultWaitInVirtualTime: an accept-next that names no
// timeout (a raw client; the SDKs name one) waits the front-end's
// SessionAcceptWait, or its entity's shorter wait, and is refused with
// com.microsoft:timeout at that wait's end, however late the partition
// answers.
func TestAcceptNextDefaultWaitInVirtualTime(t *testing.T) {
	for _, tc := range []struct {
		name     string
		frontend time.Duration // Config.SessionAcceptWait; 0: the default
		entityMs *int64        // QueueProperties.SessionAcceptWaitMs
		want     time.Duration
	}{
		{"default", 0, nil, frontend.DefaultSessionAcceptWait},
		{"front-end", 5 * time.Minute, nil, 5 * time.Minute},
		{"entity", 0, proto.Int64(10_000), 10 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := newLateSessions(time.Second, "")
				b.entities["sq"].Properties.SessionAcceptWaitMs = tc.entityMs
				f := serveInMemory(t, frontend.Config{Backend: b, Rules: devRules(t), SessionAcceptWait: tc.frontend})
				conn := f.dial(t, t.Context(), &goamqp.ConnOptions{SASLType: goamqp.SASLTypePlain(sas.DevKeyName, sas.DevKey)})
				s, err := conn.NewSession(t.Context(), nil)
				if err != nil {
					t.Fatal(err)
				}
				start := time.Now()
				_, err = s.NewReceiver(t.Context(), "sq", &goamqp.ReceiverOptions{
					Filters: []goamqp.LinkFilter{goamqp.NewLinkFilter("com.microsoft:session-filter", 0x137000000C, nil)},
				})
				took := time.Since(start)
				if cond, desc := amqpCondition(err); cond != "com.microsoft:timeout" {
					t.Fatalf("accept next with none available: %v (%s %q); want refused with com.microsoft:timeout", err, cond, desc)
				}
				b.mu.Lock()
				waits := b.waits
				b.mu.Unlock()
				if len(waits) != 1 || waits[0] != tc.want {
					t.Fatalf("the partition was asked to wait %v; want one wait of %v", waits, tc.want)
				}
				if took != tc.want {
					t.Fatalf("the accept was refused %v after it was asked; want %v", took, tc.want)
				}
			})
		})
	}
}

// TestSessionAcceptNotServingInVirtualTime: accepting a named session
// whose partition's group has no quorum is refused with
// com.microsoft:timeout, which the SDKs retry, once the partition has read
// not serving for 5 s, not after sendTimeout (30 s).
func TestSessionAcceptNotServingInVirtualTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &unservedSessions{newLateSessions(0, "s")}
		f := serveInMemory(t, frontend.Config{Backend: b, Rules: devRules(t)})
		ctx := t.Context()
		s, err := plainConn(t, f).NewSession(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		_, err = s.NewReceiver(ctx, "sq", &goamqp.ReceiverOptions{
			Filters: []goamqp.LinkFilter{goamqp.NewLinkFilter("com.microsoft:session-filter", 0x137000000C, "s")},
		})
		took := time.Since(start)
		var amqpErr *goamqp.Error
		if !errors.As(err, &amqpErr) || amqpErr.Condition != "com.microsoft:timeout" {
			t.Fatalf("accepting a session of a partition not serving: %v, want com.microsoft:timeout", err)
		}
		if took < 5*time.Second || took > 6*time.Second {
			t.Fatalf("accepting a session of a partition not serving was refused after %v, want 5 s", took)
		}
	})
}
