package frontend_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	goamqp "github.com/Azure/go-amqp"

	"github.com/quorumbus/quorumbus/frontend"
	"github.com/quorumbus/quorumbus/placement/sas"
)

// received is what one Receive on a go-amqp link came back with.
type received struct {
	msg *goamqp.Message
	err error
}

// receiveAsync runs one Receive on r and hands its outcome over, so that
// a test in virtual time can look whether it is there yet (receivedYet)
// at chosen instants.
func receiveAsync(ctx context.Context, r *goamqp.Receiver) <-chan received {
	ch := make(chan received, 1)
	go func() {
		m, err := r.Receive(ctx, nil)
		ch <- received{m, err}
	}()
	return ch
}

// receivedYet returns the Receive's outcome if it has one by now. Call it
// after synctest.Wait, so that everything due at this instant has run.
func receivedYet(ch <-chan received) (received, bool) {
	select {
	case r := <-ch:
		return r, true
	default:
		return received{}, false
	}
}

// sleepUntil sleeps until t of the bubble's clock, then waits until every
// other goroutine of the bubble is blocked: whatever was due by t has
// happened.
func sleepUntil(t time.Time) {
	time.Sleep(time.Until(t))
	synctest.Wait()
}

// wantExpiredDetach fails unless r ended with the detach of a link whose
// token expired.
func wantExpiredDetach(t *testing.T, what string, r received) {
	t.Helper()
	var le *goamqp.LinkError
	if !errors.As(r.err, &le) || le.RemoteErr == nil || le.RemoteErr.Condition != goamqp.ErrCondUnauthorizedAccess {
		t.Fatalf("%s: receive ended with %v (message %v), want a detach with unauthorized-access", what, r.err, r.msg)
	}
	if !strings.Contains(le.RemoteErr.Description, "expired") {
		t.Fatalf("%s: detach description %q does not say the token expired", what, le.RemoteErr.Description)
	}
}

// TestClaimExpiryInVirtualTime: a link is detached with
// amqp:unauthorized-access at the instant its token expires, not a
// millisecond before; a link whose token was renewed before then stays,
// works, and is detached when the renewed token expires in turn. The
// tokens last minutes, which pass in virtual time.
func TestClaimExpiryInVirtualTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newMemBackend("q", "kept")
		f := serveInMemory(t, frontend.Config{Backend: b, Rules: authRules(t)})
		ctx := t.Context()
		conn := f.dial(t, ctx, nil)
		putUntil := func(queue string, until time.Time) {
			t.Helper()
			aud := "amqp://" + memHost + "/" + queue
			if status, desc := putToken(t, ctx, conn, aud, sas.Sign(sas.DevKeyName, sas.DevKey, aud, until)); status != 202 {
				t.Fatalf("put-token for %s: %d %s", queue, status, desc)
			}
		}
		// A token's expiry is in whole seconds.
		expiry := time.Now().Truncate(time.Second).Add(5 * time.Minute)
		putUntil("q", expiry)
		putUntil("kept", expiry)
		s, err := conn.NewSession(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		lost, err := s.NewReceiver(ctx, "q", &goamqp.ReceiverOptions{Credit: 1})
		if err != nil {
			t.Fatal(err)
		}
		kept, err := s.NewReceiver(ctx, "kept", &goamqp.ReceiverOptions{Credit: 1})
		if err != nil {
			t.Fatal(err)
		}
		lostEnd, keptEnd := receiveAsync(ctx, lost), receiveAsync(ctx, kept)

		// kept's token is renewed a minute before it expires.
		sleepUntil(expiry.Add(-time.Minute))
		renewed := expiry.Add(time.Hour)
		putUntil("kept", renewed)

		sleepUntil(expiry.Add(-time.Millisecond))
		if r, ok := receivedYet(lostEnd); ok {
			t.Fatalf("q's link ended before its token expired: %v", r.err)
		}
		sleepUntil(expiry)
		r, ok := receivedYet(lostEnd)
		if !ok {
			t.Fatal("q's link is still attached when its token expired")
		}
		wantExpiredDetach(t, "q's link", r)
		if r, ok := receivedYet(keptEnd); ok {
			t.Fatalf("kept's link, whose token was renewed, ended: %v", r.err)
		}

		// The renewed link still receives.
		if err := amqpSendWithClaim(t, ctx, conn, "kept"); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		r, ok = receivedYet(keptEnd)
		if !ok || r.err != nil || string(r.msg.GetData()) != "renewed" {
			t.Fatalf("receive on the renewed link: %v (answered: %v)", r.err, ok)
		}
		if err := kept.AcceptMessage(ctx, r.msg); err != nil {
			t.Fatal(err)
		}

		// Until its renewed token expires.
		keptEnd = receiveAsync(ctx, kept)
		sleepUntil(renewed.Add(-time.Millisecond))
		if r, ok := receivedYet(keptEnd); ok {
			t.Fatalf("kept's link ended before its renewed token expired: %v", r.err)
		}
		sleepUntil(renewed)
		r, ok = receivedYet(keptEnd)
		if !ok {
			t.Fatal("kept's link is still attached when its renewed token expired")
		}
		wantExpiredDetach(t, "kept's link", r)
	})
}

// TestSDKExpiredTokenInVirtualTime: a Go SDK receiver whose connection
// string carries a SAS token, which the SDK cannot renew, receives until
// the token expires ten minutes on; then its link is detached, and the
// SDK, putting the expired token again, ends with unauthorized: not
// before the expiry, and within a second of it.
func TestSDKExpiredTokenInVirtualTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newMemBackend("q")
		f := serveInMemory(t, frontend.Config{Backend: b, Rules: authRules(t)})
		ctx := t.Context()
		if err := sendOne(ctx, f.sdkClient(t), "q"); err != nil {
			t.Fatal(err)
		}
		expiry := time.Now().Truncate(time.Second).Add(10 * time.Minute)
		token := sas.Sign("listener", "listen-key", "sb://"+memHost+"/q", expiry)
		rcv, err := f.sdkClientOf(t, "SharedAccessSignature="+token).NewReceiverForQueue("q", &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
		if err != nil {
			t.Fatal(err)
		}
		defer rcv.Close(ctx)
		msgs, err := rcv.ReceiveMessages(ctx, 1, nil)
		if err != nil || len(msgs) != 1 {
			t.Fatalf("receive before the token expired: %d messages, %v", len(msgs), err)
		}
		for {
			rctx, rcancel := context.WithTimeout(ctx, 70*time.Second) // not due at the expiry
			_, err = rcv.ReceiveMessages(rctx, 1, nil)
			rcancel()
			if err != nil && !errors.Is(err, context.DeadlineExceeded) {
				break
			}
			if time.Now().After(expiry.Add(time.Hour)) {
				t.Fatal("the receiver still works an hour after its token expired")
			}
		}
		if !isUnauthorized(err) {
			t.Fatalf("the receiver after its token expired: %v, want unauthorized", err)
		}
		if late := time.Since(expiry); late < 0 || late >= time.Second {
			t.Fatalf("the receiver failed %v after its token expired: %v; want within a second of it", late, err)
		}
	})
}
