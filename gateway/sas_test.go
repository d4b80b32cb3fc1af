package gateway

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/placement/sas"
)

// sign makes a token as the Azure SDKs do (placement/sas.Sign).
func sign(uri, keyName, key string, expiry time.Time) string {
	return sas.Sign(keyName, key, uri, expiry)
}

// rules is a RuleSource of fixed rules.
type rules struct{ rs *sas.Ruleset }

func (r rules) Ruleset() *sas.Ruleset { return r.rs }

func validator(t *testing.T, rs ...sas.Rule) RulesValidator {
	t.Helper()
	set, err := sas.NewRuleset(rs...)
	if err != nil {
		t.Fatal(err)
	}
	return RulesValidator{Rules: rules{set}}
}

func TestParseTokenOfTheSDK(t *testing.T) {
	// Captured on the wire from azservicebus/admin v1.11.0.
	const captured = "SharedAccessSignature sr=https%3a%2f%2flocalhost%3a5300%2fq%3fapi-version%3d2024-05&sig=GBFxkCu%2F7lcQK6fzmVDpNgMVjJs%2F7VEiltSCImEl3Gg%3D&se=1795244525&skn=RootManageSharedAccessKey"
	tok, err := ParseToken(captured)
	if err != nil {
		t.Fatal(err)
	}
	if tok.Resource != "https://localhost:5300/q?api-version=2024-05" || tok.KeyName != sas.DevKeyName || tok.Expiry.Unix() != 1795244525 {
		t.Fatalf("parsed %+v", tok)
	}
	v := RulesValidator{Rules: rules{sas.DevRuleset()}}
	rights, err := v.Validate(tok, time.Unix(1795244525-60, 0))
	if err != nil || rights&RightManage == 0 {
		t.Fatalf("the SDK's token does not validate with the emulator's rule: %v, %v", rights, err)
	}
	if _, err := v.Validate(tok, time.Unix(1795244525, 0)); !errors.Is(err, sas.ErrExpired) {
		t.Fatalf("at its expiry: %v, want expired", err)
	}
	if !tok.Covers("localhost:5300", "/q") || !tok.Covers("LOCALHOST:5300", "/Q") {
		t.Fatal("the token does not cover its own request")
	}
	if tok.Covers("localhost:5300", "/q2") || tok.Covers("localhost:5300", "/other") || tok.Covers("elsewhere:5300", "/q") {
		t.Fatal("the token covers another resource")
	}
}

func TestNamespaceTokenCoversEverything(t *testing.T) {
	tok, err := ParseToken(sign("sb://localhost:5300/", sas.DevKeyName, sas.DevKey, time.Now().Add(time.Hour)))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/q", "/$Resources/Queues", "/t/Subscriptions/s"} {
		if !tok.Covers("localhost:5300", p) {
			t.Errorf("a namespace token does not cover %s", p)
		}
	}
}

func TestParseTokenRefusesMalformed(t *testing.T) {
	good := sign("https://h/q", "k", "key", time.Now().Add(time.Hour))
	for _, tc := range []struct {
		name, header string
		want         error
	}{
		{"empty", "", ErrNoToken},
		{"bearer", "Bearer abc", ErrNoToken},
		{"no fields", "SharedAccessSignature ", ErrBadToken},
		{"missing skn", strings.Replace(good, "&skn=k", "", 1), ErrBadToken},
		{"twice", good + "&skn=k", ErrBadToken},
		{"unknown field", good + "&x=1", ErrBadToken},
		{"bad expiry", strings.Replace(good, "&se=", "&se=x", 1), ErrBadToken},
		{"bad base64", strings.Replace(good, "sig=", "sig=%21", 1), ErrBadToken},
		{"no value", "SharedAccessSignature sr=&sig=a&se=1&skn=k", ErrBadToken},
		{"huge", "SharedAccessSignature sr=" + strings.Repeat("a", maxTokenLen), ErrBadToken},
	} {
		if _, err := ParseToken(tc.header); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	tok, err := ParseToken(good)
	if err != nil {
		t.Fatal(err)
	}
	all := sas.Listen | sas.Send | sas.Manage
	if _, err := validator(t, sas.Rule{Name: "k", Rights: all, PrimaryKey: "other"}).Validate(tok, time.Now()); !errors.Is(err, sas.ErrSignature) {
		t.Fatalf("wrong key: %v", err)
	}
	if _, err := validator(t, sas.Rule{Name: "k2", Rights: all, PrimaryKey: "key"}).Validate(tok, time.Now()); !errors.Is(err, sas.ErrUnknownRule) {
		t.Fatalf("wrong key name: %v", err)
	}
	rights, err := validator(t, sas.Rule{Name: "k", Rights: sas.Listen, PrimaryKey: "key"}).Validate(tok, time.Now())
	if err != nil || rights != RightListen {
		t.Fatalf("a Listen rule: %v, %v; want Listen only", rights, err)
	}
}

// FuzzParseToken: any header is parsed or refused with ErrNoToken or
// ErrBadToken, never a panic; a parsed token's signed string starts with
// its escaped audience.
func FuzzParseToken(f *testing.F) {
	f.Add(sign("https://localhost:5300/q?api-version=2024-05", sas.DevKeyName, sas.DevKey, time.Unix(1795244525, 0)))
	f.Add("SharedAccessSignature sr=a&sig=&se=1&skn=k")
	f.Add("SharedAccessSignature sr=%zz&sig=QQ==&se=1&skn=k")
	f.Add("sharedaccesssignature skn=k&se=99&sig=QQ%3D%3D&sr=x")
	f.Fuzz(func(t *testing.T, header string) {
		tok, err := ParseToken(header)
		if err != nil {
			if !errors.Is(err, ErrNoToken) && !errors.Is(err, ErrBadToken) {
				t.Fatalf("%q: unexpected error %v", header, err)
			}
			return
		}
		if tok.KeyName == "" || tok.Resource == "" || tok.Raw != header {
			t.Fatalf("%q parsed into %+v", header, tok)
		}
		// Validation never panics either.
		_, _ = RulesValidator{Rules: rules{sas.DevRuleset()}}.Validate(tok, time.Now())
		_ = tok.Covers("h", "/p")
	})
}
