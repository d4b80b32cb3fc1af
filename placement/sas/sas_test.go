package sas

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"
)

var now = time.Unix(1795240000, 0)

// The signature the Go SDK sent for this audience, key and expiry, as
// captured on the wire: HMAC-SHA256 with the key's UTF-8 bytes (not
// base64-decoded) over the escaped, lowercased audience, a newline and
// the expiry in Unix seconds.
func TestSignatureMatchesTheGoSDKCapture(t *testing.T) {
	tok := Sign("RootManageSharedAccessKey", "SAS_KEY_VALUE", "amqp://localhost/q", time.Unix(1795244313, 0))
	parsed, err := Parse(tok)
	if err != nil {
		t.Fatal(err)
	}
	if got := base64.StdEncoding.EncodeToString(parsed.Signature); got != "FFrOljPH0tN7UTb6dHT2Mdxc4B7odutBVIMMHIMnpco=" {
		t.Fatalf("signature %s", got)
	}
	if parsed.RawResource != "amqp%3a%2f%2flocalhost%2fq" || parsed.Resource != "amqp://localhost/q" || parsed.KeyName != "RootManageSharedAccessKey" {
		t.Fatalf("parsed %+v", parsed)
	}
}

// jsSign signs as @azure/core-amqp does: encodeURIComponent (upper-case
// escapes, case kept), expiry in seconds, the key name escaped too.
func jsSign(keyName, key, audience string, expiry time.Time) string {
	sr := strings.ReplaceAll(url.QueryEscape(audience), "+", "%20")
	se := strconv.FormatInt(expiry.Unix(), 10)
	h := hmac.New(sha256.New, []byte(key))
	h.Write([]byte(sr + "\n" + se))
	sig := base64.StdEncoding.EncodeToString(h.Sum(nil))
	return "SharedAccessSignature sr=" + sr + "&sig=" + url.QueryEscape(sig) + "&se=" + se + "&skn=" + url.QueryEscape(keyName)
}

func testRules(t testing.TB) *Ruleset {
	rs, err := NewRuleset(
		Rule{Name: "RootManageSharedAccessKey", Rights: Manage | Listen | Send, PrimaryKey: "root-primary", SecondaryKey: "root-secondary"},
		Rule{Name: "listener", Rights: Listen, PrimaryKey: "listen-key"},
		Rule{Name: "sender", Rights: Send, PrimaryKey: "send-key"},
		Rule{Name: "qonly", Entity: "Orders", Rights: Listen | Send, PrimaryKey: "orders-key"},
		Rule{Name: "topiconly", Entity: "events", Rights: Listen, PrimaryKey: "events-key"},
		// Same name as a namespace rule's, on an entity, with another key.
		Rule{Name: "listener", Entity: "other", Rights: Listen | Send, PrimaryKey: "other-key"},
	)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

func TestValidate(t *testing.T) {
	rs := testRules(t)
	exp := now.Add(time.Hour)
	reorder := func(tok string) string { // skn, se, sig, sr
		f := strings.Split(strings.TrimPrefix(tok, "SharedAccessSignature "), "&")
		return "SharedAccessSignature " + f[3] + "&" + f[2] + "&" + f[1] + "&" + f[0]
	}
	for _, tc := range []struct {
		name, token, namespace string
		want                   error
		rights                 Rights
		scope                  string
	}{
		{"go sdk entity audience", Sign("RootManageSharedAccessKey", "root-primary", "amqp://localhost:5672/q", exp), "localhost:5672", nil, Listen | Send | Manage, "q"},
		{"secondary key", Sign("RootManageSharedAccessKey", "root-secondary", "amqps://ns.example/q/$management", exp), "ns.example", nil, Listen | Send | Manage, "q/$management"},
		{"namespace audience", Sign("listener", "listen-key", "sb://ns.example/", exp), "ns.example", nil, Listen, ""},
		{"js sdk encoding", jsSign("sender", "send-key", "sb://ns.example/Some Queue", exp), "ns.example", nil, Send, "some queue"},
		{"https scheme", Sign("sender", "send-key", "https://ns.example/q", exp), "", nil, Send, "q"},
		{"fields in any order", reorder(Sign("sender", "send-key", "amqp://ns.example/q", exp)), "ns.example", nil, Send, "q"},
		{"rule name case-insensitive", Sign("SENDER", "send-key", "amqp://ns.example/q", exp), "", nil, Send, "q"},
		{"port ignored", Sign("sender", "send-key", "amqps://ns.example:5671/q", exp), "ns.example:5672", nil, Send, "q"},
		{"entity rule on its entity", Sign("qonly", "orders-key", "amqp://h/orders", exp), "h", nil, Listen | Send, "orders"},
		{"entity rule below its entity", Sign("qonly", "orders-key", "amqp://h/ORDERS/$DeadLetterQueue", exp), "h", nil, Listen | Send, "orders/$deadletterqueue"},
		{"topic rule covers a subscription", Sign("topiconly", "events-key", "amqp://h/events/Subscriptions/s1", exp), "h", nil, Listen, "events/subscriptions/s1"},
		{"shared name, entity key", Sign("listener", "other-key", "amqp://h/other", exp), "h", nil, Listen | Send, "other"},

		{"wrong key", Sign("RootManageSharedAccessKey", "guess", "amqp://h/q", exp), "h", ErrSignature, 0, ""},
		{"another rule's key", Sign("listener", "send-key", "amqp://h/q", exp), "h", ErrSignature, 0, ""},
		{"expired", Sign("sender", "send-key", "amqp://h/q", now), "h", ErrExpired, 0, ""},
		{"unknown rule", Sign("nobody", "send-key", "amqp://h/q", exp), "h", ErrUnknownRule, 0, ""},
		{"other namespace", Sign("sender", "send-key", "amqp://evil.example/q", exp), "ns.example", ErrNamespace, 0, ""},
		{"entity rule on another entity", Sign("qonly", "orders-key", "amqp://h/ordersarchive", exp), "h", ErrAudience, 0, ""},
		{"entity rule on the namespace", Sign("qonly", "orders-key", "amqp://h/", exp), "h", ErrAudience, 0, ""},
		{"shared name, entity key elsewhere", Sign("listener", "other-key", "amqp://h/q", exp), "h", ErrSignature, 0, ""},
		{"tampered audience", strings.Replace(Sign("sender", "send-key", "amqp://h/q", exp), "sr=amqp%3a%2f%2fh%2fq", "sr=amqp%3a%2f%2fh%2fr", 1), "h", ErrSignature, 0, ""},
		{"tampered expiry", strings.Replace(Sign("sender", "send-key", "amqp://h/q", exp), "&se=", "&se=1", 1), "h", ErrSignature, 0, ""},
		{"bad scheme", Sign("sender", "send-key", "ftp://h/q", exp), "h", ErrMalformed, 0, ""},
		{"no prefix", "sr=a&sig=b&se=1&skn=c", "", ErrMalformed, 0, ""},
		{"missing field", "SharedAccessSignature sr=amqp%3a%2f%2fh%2fq&se=1&skn=c", "", ErrMalformed, 0, ""},
		{"duplicate field", Sign("sender", "send-key", "amqp://h/q", exp) + "&se=1", "", ErrMalformed, 0, ""},
		{"unknown field", Sign("sender", "send-key", "amqp://h/q", exp) + "&x=1", "", ErrMalformed, 0, ""},
		{"too long", Sign("sender", "send-key", "amqp://h/"+strings.Repeat("q", MaxTokenLength), exp), "", ErrMalformed, 0, ""},
		{"empty", "", "", ErrMalformed, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := rs.Validate(tc.token, tc.namespace, now)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err %v, want %v", err, tc.want)
			}
			if err != nil {
				for _, k := range []string{"root-primary", "root-secondary", "listen-key", "send-key", "orders-key", "other-key"} {
					if strings.Contains(err.Error(), k) {
						t.Fatalf("error %q carries a key", err)
					}
				}
				return
			}
			if c.Rights != tc.rights || c.Scope != tc.scope || c.Expires.Unix() != exp.Unix() {
				t.Fatalf("claim %+v, want rights %s scope %q", c, tc.rights, tc.scope)
			}
		})
	}
}

func TestClaimAllows(t *testing.T) {
	c := Claim{Rights: Listen, Scope: "q", Expires: now.Add(time.Minute)}
	for _, tc := range []struct {
		path string
		want Rights
		at   time.Time
		ok   bool
	}{
		{"q", Listen, now, true},
		{"Q/$management", Listen, now, true},
		{"q/$DeadLetterQueue", Listen, now, true},
		{"q", Send, now, false},
		{"q2", Listen, now, false},
		{"", Listen, now, false},
		{"q", Listen, now.Add(time.Minute), false},
	} {
		if got := c.Allows(tc.path, tc.want, tc.at); got != tc.ok {
			t.Errorf("Allows(%q, %s, %s) = %v", tc.path, tc.want, tc.at, got)
		}
	}
	ns := Claim{Rights: Manage.Effective(), Scope: ""}
	if !ns.Allows("anything/at/all", Listen|Send|Manage, now.Add(100*365*24*time.Hour)) {
		t.Error("a namespace claim without expiry must allow everything")
	}
}

func TestAuthenticate(t *testing.T) {
	rs := testRules(t)
	for _, tc := range []struct {
		name, key string
		want      error
		scope     string
		rights    Rights
	}{
		{"RootManageSharedAccessKey", "root-primary", nil, "", Listen | Send | Manage},
		{"RootManageSharedAccessKey", "root-secondary", nil, "", Listen | Send | Manage},
		{"listener", "listen-key", nil, "", Listen},
		{"listener", "other-key", nil, "other", Listen | Send},
		{"qonly", "orders-key", nil, "orders", Listen | Send},
		{"RootManageSharedAccessKey", "root-primar", ErrSignature, "", 0},
		{"RootManageSharedAccessKey", "", ErrSignature, "", 0},
		{"nobody", "root-primary", ErrUnknownRule, "", 0},
	} {
		c, err := rs.Authenticate(tc.name, tc.key)
		if !errors.Is(err, tc.want) {
			t.Errorf("%s/%s: err %v, want %v", tc.name, tc.key, err, tc.want)
			continue
		}
		if err == nil && (c.Scope != tc.scope || c.Rights != tc.rights || !c.Expires.IsZero()) {
			t.Errorf("%s/%s: claim %+v", tc.name, tc.key, c)
		}
	}
}

func TestRuleCheck(t *testing.T) {
	good := Rule{Name: "r", Rights: Listen, PrimaryKey: "k"}
	if err := good.Check(); err != nil {
		t.Fatal(err)
	}
	for _, r := range []Rule{
		{Rights: Listen, PrimaryKey: "k"},
		{Name: "r", PrimaryKey: "k"},
		{Name: "r", Rights: 8, PrimaryKey: "k"},
		{Name: "r", Rights: Listen},
		{Name: "r", Rights: Manage, PrimaryKey: "k"},
		{Name: strings.Repeat("r", MaxNameLength+1), Rights: Listen, PrimaryKey: "k"},
		{Name: "r", Rights: Listen, PrimaryKey: strings.Repeat("k", MaxKeyLength+1)},
	} {
		if r.Check() == nil {
			t.Errorf("%+v passes", r)
		}
	}
	if _, err := NewRuleset(good, good); err == nil {
		t.Error("a rule given twice on one scope passes")
	}
	if s := (Rule{Name: "r", Entity: "q", Rights: Listen, PrimaryKey: "secret"}).String(); strings.Contains(s, "secret") {
		t.Errorf("String shows the key: %s", s)
	}
}

func TestParseRights(t *testing.T) {
	for in, want := range map[string]Rights{"Listen": Listen, "send,listen": Listen | Send, "Manage|Listen|Send": Manage | Listen | Send, "listen send": Listen | Send} {
		if got, err := ParseRights(in); err != nil || got != want {
			t.Errorf("ParseRights(%q) = %s, %v", in, got, err)
		}
		if got, _ := ParseRights(want.String()); got != want {
			t.Errorf("String round trip of %s gives %s", want, got)
		}
	}
	for _, in := range []string{"", "read", ","} {
		if _, err := ParseRights(in); err == nil {
			t.Errorf("ParseRights(%q) passes", in)
		}
	}
}

// BenchmarkValidate is the cost of one put-token: the front-end validates
// a token when the client presents it, never per message.
func BenchmarkValidate(b *testing.B) {
	rs := testRules(b)
	tok := Sign("RootManageSharedAccessKey", "root-secondary", "amqps://ns.servicebus.example/orders/$management", now.Add(time.Hour))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := rs.Validate(tok, "ns.servicebus.example", now); err != nil {
			b.Fatal(err)
		}
	}
}

func TestDevRuleset(t *testing.T) {
	rs := DevRuleset()
	c, err := rs.Authenticate(DevKeyName, DevKey)
	if err != nil || c.Rights != Listen|Send|Manage || c.Scope != "" {
		t.Fatalf("dev rule: %+v, %v", c, err)
	}
}
