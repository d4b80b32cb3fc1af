package frontend_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"
)

// TestSendRejectsMalformedSections: through go-amqp, a message whose
// application-properties hold a list, or whose body nests 7,000 lists, is
// rejected with a decode error and not stored; the link goes on.
func TestSendRejectsMalformedSections(t *testing.T) {
	b := newMemBackend("q")
	addr := startFrontend(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	snd := amqpSender(t, ctx, addr, "q")
	deep := any("leaf")
	for range 7000 {
		deep = []any{deep}
	}
	for name, msg := range map[string]*goamqp.Message{
		"a list in application-properties": {Data: [][]byte{[]byte("x")}, ApplicationProperties: map[string]any{"l": []any{int64(1)}}},
		"7000 nested lists as the body":    {Value: deep},
	} {
		err := snd.Send(ctx, msg, nil)
		var ae *goamqp.Error
		if !errors.As(err, &ae) || ae.Condition != goamqp.ErrCondDecodeError {
			t.Errorf("%s: %v, want a rejection with %s", name, err, goamqp.ErrCondDecodeError)
		} else if !strings.Contains(ae.Description, "simple type") && !strings.Contains(ae.Description, "nested deeper") {
			t.Errorf("%s: description %q does not say why", name, ae.Description)
		}
	}
	if err := snd.Send(ctx, &goamqp.Message{Data: [][]byte{[]byte("ok")}, ApplicationProperties: map[string]any{"k": "v"}}, nil); err != nil {
		t.Fatalf("a well-formed message after the rejected ones: %v", err)
	}
	if n := b.left("q"); n != 1 {
		t.Fatalf("queue holds %d messages, want only the well-formed one", n)
	}
}
