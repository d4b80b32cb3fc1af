package gateway

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/quorumbus/quorumbus/placement/sas"
)

// Errors of authorization; each is answered 401.
var (
	ErrNoToken      = errors.New("gateway: no SharedAccessSignature in the Authorization header")
	ErrBadToken     = errors.New("gateway: malformed SharedAccessSignature")
	ErrTokenExpired = errors.New("gateway: SharedAccessSignature expired")
	ErrBadSignature = errors.New("gateway: SharedAccessSignature does not match a key")
	ErrAudience     = errors.New("gateway: SharedAccessSignature is for another resource")
	ErrNoManage     = errors.New("gateway: the Manage right is required for this operation")
	// ErrForwardAuth: a description that forwards (ForwardTo,
	// ForwardDeadLetteredMessagesTo) without a supplementary
	// authorization header that grants Send on its target.
	ErrForwardAuth = errors.New("gateway: forwarding needs a SharedAccessSignature with the Send right on its target")
)

// Rights are the claims a SAS rule grants (Service Bus's AccessRights).
type Rights uint8

const (
	RightListen Rights = 1 << iota
	RightSend
	RightManage
)

// A Token is a parsed SharedAccessSignature: sr, sig, se, skn.
type Token struct {
	// Resource is the audience (sr), unescaped: the URL the token is for.
	Resource string
	KeyName  string
	Expiry   time.Time
	// Signature is sig, decoded: HMAC-SHA256, under the rule's key, of
	// sr as sent, a newline and se as sent (the SDKs sign the escaped
	// audience). The Validator checks it.
	Signature []byte
	// Raw is the header as sent.
	Raw string
}

// maxTokenLen bounds a header the parser looks at; real tokens are a few
// hundred bytes.
const maxTokenLen = 4096

// ParseToken parses the value of an Authorization header:
// "SharedAccessSignature sr=...&sig=...&se=...&skn=..." with the four
// fields in any order, each exactly once, values query-escaped.
func ParseToken(header string) (Token, error) {
	const scheme = "SharedAccessSignature "
	if header == "" {
		return Token{}, ErrNoToken
	}
	if len(header) > maxTokenLen {
		return Token{}, fmt.Errorf("%w: %d bytes", ErrBadToken, len(header))
	}
	if len(header) < len(scheme) || !strings.EqualFold(header[:len(scheme)], scheme) {
		return Token{}, ErrNoToken
	}
	raw := map[string]string{}
	for part := range strings.SplitSeq(strings.TrimSpace(header[len(scheme):]), "&") {
		k, v, ok := strings.Cut(part, "=")
		if !ok || v == "" {
			return Token{}, fmt.Errorf("%w: field %q has no value", ErrBadToken, k)
		}
		switch k {
		case "sr", "sig", "se", "skn":
		default:
			return Token{}, fmt.Errorf("%w: unknown field %q", ErrBadToken, k)
		}
		if _, dup := raw[k]; dup {
			return Token{}, fmt.Errorf("%w: field %q given twice", ErrBadToken, k)
		}
		raw[k] = v
	}
	for _, k := range []string{"sr", "sig", "se", "skn"} {
		if raw[k] == "" {
			return Token{}, fmt.Errorf("%w: no %s", ErrBadToken, k)
		}
	}
	var t Token
	var err error
	if t.Resource, err = url.QueryUnescape(raw["sr"]); err != nil {
		return Token{}, fmt.Errorf("%w: sr: %v", ErrBadToken, err)
	}
	if t.KeyName, err = url.QueryUnescape(raw["skn"]); err != nil {
		return Token{}, fmt.Errorf("%w: skn: %v", ErrBadToken, err)
	}
	sig, err := url.QueryUnescape(raw["sig"])
	if err != nil {
		return Token{}, fmt.Errorf("%w: sig: %v", ErrBadToken, err)
	}
	if t.Signature, err = base64.StdEncoding.DecodeString(sig); err != nil {
		return Token{}, fmt.Errorf("%w: sig is not base64: %v", ErrBadToken, err)
	}
	se, err := strconv.ParseInt(raw["se"], 10, 64)
	if err != nil || se < 0 {
		return Token{}, fmt.Errorf("%w: se %q is not a time", ErrBadToken, raw["se"])
	}
	t.Expiry = time.Unix(se, 0)
	t.Raw = header
	return t, nil
}

// Covers reports whether the token's audience covers a request for
// host+path (sr names a URL; its scheme and query do not matter, and a
// token for a path covers everything below it, as Service Bus has it).
func (t Token) Covers(host, path string) bool {
	res := strings.ToLower(t.Resource)
	if _, after, ok := strings.Cut(res, "://"); ok {
		res = after
	}
	if i := strings.IndexByte(res, '?'); i >= 0 {
		res = res[:i]
	}
	res = strings.TrimSuffix(res, "/")
	target := strings.ToLower(host + "/" + strings.TrimPrefix(path, "/"))
	return target == res || strings.HasPrefix(target, res+"/") || res+"/" == target
}

// A Validator checks a token's signature and expiry against the
// namespace's SAS rules and says what rights the signing rule has
// (RulesValidator).
type Validator interface {
	Validate(t Token, now time.Time) (Rights, error)
}

// A ValidatorFunc is a function used as a Validator.
type ValidatorFunc func(t Token, now time.Time) (Rights, error)

// Validate calls f.
func (f ValidatorFunc) Validate(t Token, now time.Time) (Rights, error) { return f(t, now) }

// A TargetValidator is a Validator that also checks the token of a
// supplementary authorization header, whose audience need not be a URL
// (the admin clients sign an entity name or the namespace's host):
// the rights it grants on the entity path target in the namespace
// served at host, or an error wrapping ErrAudience when it does not
// reach target. Without one, such a token must name a URL that covers
// target, as an Authorization header's must.
type TargetValidator interface {
	ValidateTarget(t Token, host, target string, now time.Time) (Rights, error)
}

// RuleSource gives the namespace's SAS rules as they stand
// (frontend/routing.Router keeps them from the catalog, with the seed
// rules the process was given).
type RuleSource interface {
	Ruleset() *sas.Ruleset
}

// RulesValidator checks tokens against the namespace's rules as the
// front-end's $cbs does (placement/sas): the rule named skn, its primary
// or secondary key, its scope, its rights.
type RulesValidator struct {
	Rules RuleSource
}

var _ Validator = RulesValidator{}

// Validate implements Validator.
func (v RulesValidator) Validate(t Token, now time.Time) (Rights, error) {
	claim, err := v.Rules.Ruleset().Validate(t.Raw, "", now)
	if err != nil {
		return 0, fmt.Errorf("gateway: token refused: %w", err)
	}
	return rights(claim), nil
}

var _ TargetValidator = RulesValidator{}

// ValidateTarget implements TargetValidator with
// placement/sas.Ruleset.ValidateRelative.
func (v RulesValidator) ValidateTarget(t Token, host, target string, now time.Time) (Rights, error) {
	claim, err := v.Rules.Ruleset().ValidateRelative(t.Raw, host, now)
	if err != nil {
		return 0, fmt.Errorf("gateway: token refused: %w", err)
	}
	if !claim.Covers(target) {
		return 0, fmt.Errorf("%w: token for %q, target %q", ErrAudience, t.Resource, target)
	}
	return rights(claim), nil
}

// rights are a claim's rights in the gateway's terms.
func rights(claim sas.Claim) Rights {
	var r Rights
	for _, m := range []struct {
		sas  sas.Rights
		ours Rights
	}{{sas.Listen, RightListen}, {sas.Send, RightSend}, {sas.Manage, RightManage}} {
		if claim.Rights.Has(m.sas) {
			r |= m.ours
		}
	}
	return r
}
