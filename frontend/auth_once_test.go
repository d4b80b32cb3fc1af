package frontend_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/quorumbus/quorumbus/frontend"
	"github.com/quorumbus/quorumbus/placement/sas"
)

// countingRules counts how often the front-end reaches for the rules:
// every token validation and SASL PLAIN login does, so the count bounds
// the validations.
type countingRules struct {
	frontend.RuleSource
	reads atomic.Int64
}

func (c *countingRules) Ruleset() *sas.Ruleset {
	c.reads.Add(1)
	return c.RuleSource.Ruleset()
}

// TestTokenValidatedOncePerPutToken: a token is validated when it is put
// on $cbs, and the claim it gives is what later transfers are checked
// against; sending 1,000 more messages on the same links validates
// nothing more. (Issue 22: validation once per put-token, not per
// message; its cost is BenchmarkValidate in placement/sas.)
func TestTokenValidatedOncePerPutToken(t *testing.T) {
	rules := &countingRules{RuleSource: authRules(t)}
	b := newMemBackend("q")
	_, addr := serveFrontend(t, frontend.Config{Backend: b, Rules: rules, ReceiveWait: 500 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	c := keyClient(t, addr, "sender", "send-key")
	snd, err := c.NewSender("q", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer snd.Close(ctx)
	send := func(n int) {
		t.Helper()
		for i := range n {
			if err := snd.SendMessage(ctx, &azservicebus.Message{Body: fmt.Appendf(nil, "m%d", i)}, nil); err != nil {
				t.Fatalf("send %d: %v", i, err)
			}
		}
	}
	send(10)
	after10 := rules.reads.Load()
	if after10 == 0 {
		t.Fatal("the rules were never read: the test does not see validations")
	}
	send(1000)
	if more := rules.reads.Load() - after10; more != 0 {
		t.Fatalf("1,000 sends on a claimed link read the rules %d more times, want 0 (validation per message)", more)
	}
	if n := b.left("q"); n != 1010 {
		t.Fatalf("%d messages in the queue, want 1,010", n)
	}
}
