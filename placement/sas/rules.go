package sas

import (
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// The emulator's well-known rule: `quorumbus dev` serves it so that the
// official emulator's connection strings work unchanged, and test clients
// that need credentials use it (SASL PLAIN with DevKeyName and DevKey).
const (
	DevKeyName = "RootManageSharedAccessKey"
	DevKey     = "SAS_KEY_VALUE"
)

// DevRule is the emulator's rule: Manage (with Listen and Send) on the
// whole namespace, key DevKey. Only `quorumbus dev` and tests serve it.
func DevRule() Rule {
	return Rule{Name: DevKeyName, Rights: Listen | Send | Manage, PrimaryKey: DevKey}
}

// DevRuleset holds DevRule alone: what a test front-end serves so that
// SDK clients with the emulator's connection string and raw clients with
// SASL PLAIN (DevKeyName, DevKey) get in.
func DevRuleset() *Ruleset {
	rs, err := NewRuleset(DevRule())
	if err != nil {
		panic(err) // DevRule is valid; TestDevRuleset holds it
	}
	return rs
}

// MaxNameLength bounds rule names (the admin API's limit) and MaxKeyLength
// their keys (Azure's are 44 characters of base64; room for longer ones).
const (
	MaxNameLength = 256
	MaxKeyLength  = 256
)

// Rule is an authorization rule: who knows one of its keys has its rights,
// on the whole namespace (Entity empty) or on one entity and what lies
// below it (a topic's subscriptions, a queue's dead-letter queue).
type Rule struct {
	Name         string
	Entity       string // "" for the namespace
	Rights       Rights
	PrimaryKey   string
	SecondaryKey string // optional
}

// Check reports what makes a rule unusable.
func (r Rule) Check() error {
	switch {
	case r.Name == "" || len(r.Name) > MaxNameLength || !utf8.ValidString(r.Name):
		return fmt.Errorf("sas: rule name must be 1 to %d characters of UTF-8", MaxNameLength)
	case r.Rights == 0 || r.Rights&^(Listen|Send|Manage) != 0:
		return fmt.Errorf("sas: rule %s: rights must be Listen, Send and/or Manage", r.Name)
	case r.PrimaryKey == "" || len(r.PrimaryKey) > MaxKeyLength || len(r.SecondaryKey) > MaxKeyLength:
		return fmt.Errorf("sas: rule %s: needs a primary key of 1 to %d bytes (secondary optional, as long at most)", r.Name, MaxKeyLength)
	case r.Rights&Manage != 0 && r.Rights&(Listen|Send) != Listen|Send:
		// Azure refuses Manage without Listen and Send; so do we, so that
		// a rule reads the same here and there.
		return fmt.Errorf("sas: rule %s: Manage requires Listen and Send as well", r.Name)
	}
	return nil
}

// String names the rule without its keys, for logs.
func (r Rule) String() string {
	if r.Entity == "" {
		return fmt.Sprintf("%s (namespace: %s)", r.Name, r.Rights)
	}
	return fmt.Sprintf("%s (%s: %s)", r.Name, r.Entity, r.Rights)
}

// scope is the entity path the rule covers, normalized; "" is the namespace.
func (r Rule) scope() string { return normalizePath(r.Entity) }

// Claim is what a valid token or SASL PLAIN login grants a connection.
type Claim struct {
	Rule   string // the rule whose key signed it
	Rights Rights // the rule's rights, with what Manage implies
	// Scope is the entity path the claim covers (lowercase, no leading or
	// trailing '/'); "" is the whole namespace.
	Scope string
	// Expires is the token's expiry; zero for a SASL PLAIN login, which
	// lasts as long as the connection.
	Expires time.Time
}

// Covers reports whether the claim reaches the entity path (an entity,
// "<entity>/$management", "<queue>/$DeadLetterQueue",
// "<topic>/Subscriptions/<name>", ...): its scope is the path itself or
// a whole-segment prefix of it.
func (c Claim) Covers(path string) bool {
	return within(normalizePath(path), c.Scope)
}

// Allows reports whether the claim grants want on path at time now.
func (c Claim) Allows(path string, want Rights, now time.Time) bool {
	return c.Rights.Has(want) && c.Covers(path) && !c.Expired(now)
}

// Expired reports whether the claim's token has expired at now.
func (c Claim) Expired(now time.Time) bool {
	return !c.Expires.IsZero() && !now.Before(c.Expires)
}

// within reports whether path equals scope or lies below it.
func within(path, scope string) bool {
	return scope == "" || path == scope || (strings.HasPrefix(path, scope) && path[len(scope)] == '/')
}

func normalizePath(p string) string { return strings.ToLower(strings.Trim(p, "/")) }

// Ruleset is an immutable set of rules to validate against. Several rules
// may share a name when they live on different entities (as on Azure, where
// every queue may have its own "listen" rule).
type Ruleset struct {
	byName map[string][]Rule // by lowercase name
	n      int
}

// NewRuleset checks every rule and indexes them. Two rules with the same
// name on the same scope are an error.
func NewRuleset(rules ...Rule) (*Ruleset, error) {
	rs := &Ruleset{byName: make(map[string][]Rule, len(rules))}
	for _, r := range rules {
		if err := r.Check(); err != nil {
			return nil, err
		}
		k := strings.ToLower(r.Name)
		for _, o := range rs.byName[k] {
			if o.scope() == r.scope() {
				return nil, fmt.Errorf("sas: rule %s is given twice on %q", r.Name, r.Entity)
			}
		}
		rs.byName[k] = append(rs.byName[k], r)
		rs.n++
	}
	return rs, nil
}

// Len is the number of rules.
func (rs *Ruleset) Len() int {
	if rs == nil {
		return 0
	}
	return rs.n
}

// Rules returns every rule, in no particular order.
func (rs *Ruleset) Rules() []Rule {
	if rs == nil {
		return nil
	}
	var out []Rule
	for _, rules := range rs.byName {
		out = append(out, rules...)
	}
	return out
}

// Validate checks a token as Service Bus does and returns its claim: the
// token parses; its audience has a scheme the SDKs use (amqp, amqps, sb,
// http, https), names the namespace host (when namespace is not empty;
// ports are ignored) and lies within the scope of a rule named skn; the
// signature matches that rule's primary or secondary key; it has not
// expired at now. Errors wrap ErrMalformed, ErrUnknownRule, ErrNamespace,
// ErrAudience, ErrSignature or ErrExpired and never carry key material.
func (rs *Ruleset) Validate(token, namespace string, now time.Time) (Claim, error) {
	t, err := Parse(token)
	if err != nil {
		return Claim{}, err
	}
	host, path, err := splitAudience(t.Resource)
	if err != nil {
		return Claim{}, err
	}
	if namespace != "" && !strings.EqualFold(stripPort(host), stripPort(namespace)) {
		return Claim{}, fmt.Errorf("%w: the audience names host %q", ErrNamespace, truncate(host))
	}
	return rs.claim(t, path, now)
}

// claim finds the rule named by the token's skn whose scope covers path
// (the entity path the audience names) and whose key signed the token.
func (rs *Ruleset) claim(t *Token, path string, now time.Time) (Claim, error) {
	var candidates []Rule
	if rs != nil {
		candidates = rs.byName[strings.ToLower(t.KeyName)]
	}
	if len(candidates) == 0 {
		return Claim{}, fmt.Errorf("%w: %q", ErrUnknownRule, truncate(t.KeyName))
	}
	covered := false
	for _, r := range candidates {
		if !within(path, r.scope()) {
			continue
		}
		covered = true
		if !r.matches(t) {
			continue
		}
		if !now.Before(t.Expiry) {
			return Claim{}, fmt.Errorf("%w at %s", ErrExpired, t.Expiry.UTC().Format(time.RFC3339))
		}
		return Claim{Rule: r.Name, Rights: r.Rights.Effective(), Scope: path, Expires: t.Expiry}, nil
	}
	if !covered {
		return Claim{}, fmt.Errorf("%w: rule %q does not cover %q", ErrAudience, truncate(t.KeyName), truncate(path))
	}
	return Claim{}, ErrSignature
}

// matches compares the token's signature with both keys' in constant time.
func (r Rule) matches(t *Token) bool {
	ok := hmac.Equal(t.Signature, mac(r.PrimaryKey, t.RawResource, t.RawExpiry))
	if r.SecondaryKey != "" {
		ok = hmac.Equal(t.Signature, mac(r.SecondaryKey, t.RawResource, t.RawExpiry)) || ok
	}
	return ok
}

// Authenticate checks a rule name and key (SASL PLAIN) and returns a claim
// with that rule's rights and scope, without expiry. The key is compared
// in constant time with the primary and secondary keys of every rule of
// that name.
func (rs *Ruleset) Authenticate(name, key string) (Claim, error) {
	return rs.AuthenticateDigest(name, KeyDigest(key))
}

// KeyDigest is what AuthenticateDigest compares: the SHA-256 of a key. A
// connection that logged in with SASL PLAIN keeps it instead of the key,
// to check its login again when the rules change.
func KeyDigest(key string) [sha256.Size]byte { return sha256.Sum256([]byte(key)) }

// AuthenticateDigest is Authenticate given the key's KeyDigest.
func (rs *Ruleset) AuthenticateDigest(name string, given [sha256.Size]byte) (Claim, error) {
	var candidates []Rule
	if rs != nil {
		candidates = rs.byName[strings.ToLower(name)]
	}
	if len(candidates) == 0 {
		return Claim{}, fmt.Errorf("%w: %q", ErrUnknownRule, truncate(name))
	}
	for _, r := range candidates {
		p := sha256.Sum256([]byte(r.PrimaryKey))
		ok := hmac.Equal(given[:], p[:])
		if r.SecondaryKey != "" {
			s := sha256.Sum256([]byte(r.SecondaryKey))
			ok = hmac.Equal(given[:], s[:]) || ok
		}
		if ok {
			return Claim{Rule: r.Name, Rights: r.Rights.Effective(), Scope: r.scope()}, nil
		}
	}
	return Claim{}, ErrSignature
}

// AudiencePath returns the normalized entity path of an audience URI such
// as "amqps://host/queue/$management" (lowercase, no leading or trailing
// '/'; "" for the namespace).
func AudiencePath(aud string) (string, error) {
	_, path, err := splitAudience(aud)
	return path, err
}

// splitAudience splits "scheme://host[:port]/path" into the host and the
// normalized path.
func splitAudience(aud string) (host, path string, err error) {
	scheme, rest, ok := strings.Cut(aud, "://")
	if !ok {
		return "", "", fmt.Errorf("%w: audience %q is not a URI", ErrMalformed, truncate(aud))
	}
	switch strings.ToLower(scheme) {
	case "amqp", "amqps", "sb", "http", "https":
	default:
		return "", "", fmt.Errorf("%w: audience scheme %q", ErrMalformed, truncate(scheme))
	}
	if i := strings.IndexAny(rest, "?#"); i >= 0 {
		rest = rest[:i]
	}
	host, path, _ = strings.Cut(rest, "/")
	if host == "" {
		return "", "", errors.Join(ErrMalformed, errors.New("audience has no host"))
	}
	return host, normalizePath(path), nil
}

// stripPort drops a ":port" suffix (IPv6 literals keep their brackets).
func stripPort(h string) string {
	if i := strings.LastIndexByte(h, ':'); i >= 0 && !strings.Contains(h[i:], "]") {
		return h[:i]
	}
	return h
}
