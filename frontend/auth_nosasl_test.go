package frontend_test

import (
	"context"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"

	"github.com/quorumbus/quorumbus/frontend"
	"github.com/quorumbus/quorumbus/placement/sas"
)

// TestAllowNoSASL: with AllowNoSASL a peer that skips the SASL layer (the
// JavaScript SDK with a SharedAccessSignature connection string) is served
// as an anonymous one: nothing without a claim, a queue once it put a
// token on $cbs. Without it such a peer is refused (TestClaimPresentationBounded).
func TestAllowNoSASL(t *testing.T) {
	b := newMemBackend("q")
	_, addr := serveFrontend(t, frontend.Config{Backend: b, Rules: authRules(t), AllowNoSASL: true, ReceiveWait: 500 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := goamqp.Dial(ctx, "amqp://"+addr, nil) // no SASLType: an AMQP header first
	if err != nil {
		t.Fatalf("a peer without SASL was refused: %v", err)
	}
	defer conn.Close()
	s, err := conn.NewSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.NewSender(ctx, "q", nil); !isCond(err, goamqp.ErrCondUnauthorizedAccess) {
		t.Fatalf("attach without a claim: %v, want unauthorized-access", err)
	}
	aud := "amqp://" + addr + "/q"
	if status, desc := putToken(t, ctx, conn, aud, sas.Sign("sender", "send-key", aud, time.Now().Add(time.Hour))); status != 202 {
		t.Fatalf("put-token: %d %s", status, desc)
	}
	snd, err := s.NewSender(ctx, "q", nil)
	if err != nil {
		t.Fatalf("attach with a claim: %v", err)
	}
	if err := snd.Send(ctx, goamqp.NewMessage([]byte("x")), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.NewReceiver(ctx, "q", nil); !isCond(err, goamqp.ErrCondUnauthorizedAccess) {
		t.Fatalf("a Send claim receiving: %v, want unauthorized-access", err)
	}
	if n := b.left("q"); n != 1 {
		t.Fatalf("q holds %d messages, want 1", n)
	}
}
