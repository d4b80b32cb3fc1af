package amqptest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"

	"github.com/quorumbus/quorumbus/frontend/amqp"
	"github.com/quorumbus/quorumbus/frontend/amqp/amqptest"
)

// TestConnectionLimitRefusal: go-amqp, refused past MaxConnections, gets
// an error carrying amqp:resource-limit-exceeded, not a bare EOF.
func TestConnectionLimitRefusal(t *testing.T) {
	_, addr := amqptest.Start(t, &amqp.Server{MaxConnections: 1})
	dial(t, addr, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := goamqp.Dial(ctx, "amqp://"+addr, &goamqp.ConnOptions{SASLType: goamqp.SASLTypeAnonymous()})
	if err == nil {
		// go-amqp returns from Dial on our open; the close that follows
		// it fails the connection's first use.
		defer c.Close()
		_, err = c.NewSession(ctx, nil)
		if err == nil {
			t.Fatal("a connection past MaxConnections opened a session")
		}
	}
	var ce *goamqp.ConnError
	if !errors.As(err, &ce) || ce.RemoteErr == nil || ce.RemoteErr.Condition != goamqp.ErrCondResourceLimitExceeded {
		t.Fatalf("dial past the limit: %v, want a ConnError with %s", err, goamqp.ErrCondResourceLimitExceeded)
	}
}

// TestPartialBudgetRefusal: a message larger than the connection's
// partial-bytes budget (but within the link's maximum) detaches the link
// with amqp:resource-limit-exceeded; a new link on the same connection
// sends a message that fits.
func TestPartialBudgetRefusal(t *testing.T) {
	srv := &amqp.Server{MaxMessageSize: 16 << 20, MaxConnPartialBytes: 4 << 20}
	b, addr := amqptest.Start(t, srv)
	c := dial(t, addr, nil)
	s := session(t, c)
	ctx := ctxT(t)
	snd, err := s.NewSender(ctx, "q", nil)
	if err != nil {
		t.Fatal(err)
	}
	err = snd.Send(ctx, goamqp.NewMessage(make([]byte, 8<<20)), nil)
	var le *goamqp.LinkError
	if !errors.As(err, &le) || le.RemoteErr == nil || le.RemoteErr.Condition != goamqp.ErrCondResourceLimitExceeded {
		t.Fatalf("an 8 MiB message against a 4 MiB budget: %v, want a LinkError with %s", err, goamqp.ErrCondResourceLimitExceeded)
	}
	if st := srv.Stats(); st.PartialRefusals != 1 || st.PartialBytes != 0 {
		t.Errorf("Stats %+v, want one refusal and nothing held", st)
	}
	snd, err = s.NewSender(ctx, "q", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := snd.Send(ctx, goamqp.NewMessage(make([]byte, 3<<20)), nil); err != nil {
		t.Fatalf("a 3 MiB message within the budget: %v", err)
	}
	if b.Len("q") != 1 {
		t.Fatalf("queue holds %d messages, want 1", b.Len("q"))
	}
}
