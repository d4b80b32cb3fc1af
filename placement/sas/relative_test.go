package sas

import (
	"errors"
	"testing"
	"time"
)

// TestValidateRelative: the audiences the admin clients sign a
// forwarding target's supplementary authorization for.
func TestValidateRelative(t *testing.T) {
	rs := testRules(t)
	exp := now.Add(time.Hour)
	for _, tc := range []struct {
		name, token, host string
		want              error
		scope             string
	}{
		{"go sdk entity name", Sign("sender", "send-key", "Orders", exp), "localhost:5300", nil, "orders"},
		{"go sdk subscription path", Sign("sender", "send-key", "t/Subscriptions/s", exp), "localhost:5300", nil, "t/subscriptions/s"},
		{"go sdk URL", Sign("sender", "send-key", "sb://localhost:5300/orders", exp), "localhost:5300", nil, "orders"},
		{"js sdk namespace host", jsSign("sender", "send-key", "localhost:5300", exp), "localhost:5300", nil, ""},
		{"host with another port", jsSign("sender", "send-key", "localhost:443/orders", exp), "localhost:5300", nil, "orders"},
		{"entity rule on its entity", Sign("qonly", "orders-key", "orders", exp), "h", nil, "orders"},

		{"entity rule on another entity", Sign("qonly", "orders-key", "other", exp), "h", ErrAudience, ""},
		{"entity rule on the namespace host", jsSign("qonly", "orders-key", "h", exp), "h", ErrAudience, ""},
		{"URL of another namespace", Sign("sender", "send-key", "sb://evil.example/orders", exp), "h", ErrNamespace, ""},
		{"wrong key", Sign("sender", "guess", "orders", exp), "h", ErrSignature, ""},
		{"expired", Sign("sender", "send-key", "orders", now), "h", ErrExpired, ""},
		{"query in a relative audience", Sign("sender", "send-key", "orders?x=1", exp), "h", ErrMalformed, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := rs.ValidateRelative(tc.token, tc.host, now)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err %v, want %v", err, tc.want)
			}
			if err == nil && c.Scope != tc.scope {
				t.Fatalf("scope %q, want %q", c.Scope, tc.scope)
			}
		})
	}
}
