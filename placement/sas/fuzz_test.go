package sas

import (
	"strings"
	"testing"
	"time"
)

// FuzzValidate feeds arbitrary tokens to the parser and the validator: no
// panic, a token that validates parses, and a claim never reaches beyond
// its rule's scope or lives past its token.
func FuzzValidate(f *testing.F) {
	exp := now.Add(time.Hour)
	for _, s := range []string{
		Sign("RootManageSharedAccessKey", "root-primary", "amqp://localhost/q", exp),
		Sign("qonly", "orders-key", "sb://h/orders/$management", exp),
		jsSign("sender", "send-key", "sb://h/a b", exp),
		"SharedAccessSignature sr=&sig=&se=&skn=",
		"SharedAccessSignature sr=%zz&sig=%&se=-1&skn=%",
		"SharedAccessSignature sr=amqp%3a%2f%2f%2f&sig=AAAA&se=99999999999999999999&skn=x",
	} {
		f.Add(s, "localhost")
	}
	rs := testRules(f)
	f.Fuzz(func(t *testing.T, token, namespace string) {
		tok, perr := Parse(token)
		c, err := rs.Validate(token, namespace, now)
		if err != nil {
			return
		}
		if perr != nil {
			t.Fatalf("validated a token Parse refuses: %v", perr)
		}
		if !now.Before(c.Expires) || !c.Expires.Equal(tok.Expiry) {
			t.Fatalf("claim expires %s at %s", c.Expires, now)
		}
		if len(token) > MaxTokenLength {
			t.Fatal("validated an over-long token")
		}
		for _, r := range rs.byName[strings.ToLower(c.Rule)] {
			if r.Name == c.Rule && within(c.Scope, r.scope()) && r.Rights.Effective() == c.Rights {
				return
			}
		}
		t.Fatalf("claim %+v matches no rule", c)
	})
}
