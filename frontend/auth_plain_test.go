package frontend_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"

	"github.com/quorumbus/quorumbus/frontend"
	"github.com/quorumbus/quorumbus/placement/sas"
)

// swappableRules is a RuleSource whose rule set a test replaces, as the
// router does when a routing table brings the catalog's changes.
type swappableRules struct{ cur atomic.Pointer[sas.Ruleset] }

func (s *swappableRules) Ruleset() *sas.Ruleset { return s.cur.Load() }

func (s *swappableRules) set(t *testing.T, rules ...sas.Rule) {
	t.Helper()
	rs, err := sas.NewRuleset(rules...)
	if err != nil {
		t.Fatal(err)
	}
	s.cur.Store(rs)
}

// TestSASLPlainFollowsItsRule: a SASL PLAIN login lasts as long as its
// rule does. When the rule is deleted (or its key regenerated), the
// connection's attached links are detached with unauthorized-access and
// new attaches are refused; a change of the rule set that keeps the rule
// leaves the login alone, and narrowed rights take effect at once.
func TestSASLPlainFollowsItsRule(t *testing.T) {
	b := newMemBackend("q", "other")
	dev := sas.DevRule()
	temp := sas.Rule{Name: "temp", Rights: sas.Listen | sas.Send, PrimaryKey: "temp-key", SecondaryKey: "temp-key-2"}
	rules := &swappableRules{}
	rules.set(t, dev, temp)
	_, addr := serveFrontend(t, frontend.Config{Backend: b, Rules: rules, ReceiveWait: 500 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	login := func(key string) *goamqp.Session {
		conn, err := goamqp.Dial(ctx, "amqp://"+addr, &goamqp.ConnOptions{SASLType: goamqp.SASLTypePlain("temp", key)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		s, err := conn.NewSession(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	isUnauthorizedLink := func(err error) bool {
		var le *goamqp.LinkError
		if errors.As(err, &le) {
			return le.RemoteErr != nil && le.RemoteErr.Condition == goamqp.ErrCondUnauthorizedAccess
		}
		var ae *goamqp.Error // a refused attach
		return errors.As(err, &ae) && ae.Condition == goamqp.ErrCondUnauthorizedAccess
	}

	s := login("temp-key")
	rcv, err := s.NewReceiver(ctx, "q", &goamqp.ReceiverOptions{Credit: 1})
	if err != nil {
		t.Fatal(err)
	}
	snd, err := s.NewSender(ctx, "q", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := snd.Send(ctx, goamqp.NewMessage([]byte("one")), nil); err != nil {
		t.Fatal(err)
	}
	m, err := rcv.Receive(ctx, nil)
	if err != nil || string(m.GetData()) != "one" {
		t.Fatalf("receive before the change: %v", err)
	}
	if err := rcv.AcceptMessage(ctx, m); err != nil {
		t.Fatal(err)
	}

	// Another rule set that still holds the rule (as every new routing
	// table is) keeps the login.
	rules.set(t, dev, temp, sas.Rule{Name: "added", Rights: sas.Listen, PrimaryKey: "k"})
	time.Sleep(1500 * time.Millisecond) // past one recheck; nothing may happen
	if err := snd.Send(ctx, goamqp.NewMessage([]byte("two")), nil); err != nil {
		t.Fatalf("send after an unrelated rule change: %v", err)
	}

	// Narrowed to Listen: the sender goes, the receiver stays.
	rules.set(t, dev, sas.Rule{Name: "temp", Rights: sas.Listen, PrimaryKey: "temp-key", SecondaryKey: "temp-key-2"})
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := snd.Send(ctx, goamqp.NewMessage([]byte("refused")), nil)
		if isUnauthorizedLink(err) {
			break
		}
		if err != nil {
			t.Fatalf("send after Send was withdrawn: %v, want unauthorized-access", err)
		}
		if time.Now().After(deadline) {
			t.Fatal("the sender kept sending after its rule lost Send")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := s.NewSender(ctx, "q", nil); !isUnauthorizedLink(err) {
		t.Fatalf("attach of a sender after Send was withdrawn: %v", err)
	}

	// Deleted: the receiver is detached, nothing more can be attached.
	rules.set(t, dev)
	rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
	defer rcancel()
	for {
		m, err := rcv.Receive(rctx, nil)
		if err != nil {
			if !isUnauthorizedLink(err) {
				t.Fatalf("receive after the rule was deleted: %v, want a detach with unauthorized-access", err)
			}
			break
		}
		rcv.AcceptMessage(ctx, m)
	}
	if _, err := s.NewReceiver(ctx, "q", nil); !isUnauthorizedLink(err) {
		t.Fatalf("attach after the rule was deleted: %v", err)
	}
	if _, err := goamqp.Dial(ctx, "amqp://"+addr, &goamqp.ConnOptions{SASLType: goamqp.SASLTypePlain("temp", "temp-key")}); err == nil {
		t.Fatal("a new login with the deleted rule succeeded")
	}

	// A regenerated key ends a login with the old one; the new key's
	// login holds.
	rules.set(t, dev, temp)
	old := login("temp-key-2")
	rules.set(t, dev, sas.Rule{Name: "temp", Rights: sas.Listen | sas.Send, PrimaryKey: "temp-key", SecondaryKey: "regenerated"})
	if _, err := old.NewSender(ctx, "other", nil); !isUnauthorizedLink(err) {
		t.Fatalf("attach with a regenerated key's login: %v", err)
	}
	if _, err := login("temp-key").NewSender(ctx, "other", nil); err != nil {
		t.Fatalf("login with the key that stayed: %v", err)
	}
	if b.left("other") != 0 {
		t.Fatal("other received a message")
	}
}
