package sas

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// MaxTokenLength bounds the tokens Parse reads. A token holds an audience
// (an entity path of at most 260 characters, URL-escaped), a 44-character
// signature, an expiry and a rule name of at most 256 characters: 4 KiB
// leaves room for all of them escaped twice over.
const MaxTokenLength = 4096

const tokenPrefix = "SharedAccessSignature "

// Errors of parsing and validation; Validate wraps them with detail.
var (
	ErrMalformed   = errors.New("sas: malformed token")
	ErrExpired     = errors.New("sas: token expired")
	ErrUnknownRule = errors.New("sas: no such authorization rule")
	ErrSignature   = errors.New("sas: signature does not match")
	ErrAudience    = errors.New("sas: audience not covered by the rule")
	ErrNamespace   = errors.New("sas: token for another namespace")
)

// Token is a parsed Shared Access Signature.
type Token struct {
	// RawResource is sr exactly as received: the signature covers these
	// bytes, not a re-encoding of them (the Go SDK lowercases the whole
	// escaped string, the JS SDK keeps upper-case escapes).
	RawResource string
	// Resource is sr unescaped: the audience, such as
	// "amqps://host/queue" or "sb://host/".
	Resource string
	// Signature is the HMAC-SHA256, base64-decoded.
	Signature []byte
	// RawExpiry is se exactly as received (it is signed as such).
	RawExpiry string
	Expiry    time.Time
	KeyName   string
}

// Parse reads "SharedAccessSignature sr=...&sig=...&se=...&skn=..." with
// its fields in any order, each exactly once. It checks the form only;
// Ruleset.Validate checks the signature, expiry and audience.
func Parse(s string) (*Token, error) {
	if len(s) > MaxTokenLength {
		return nil, fmt.Errorf("%w: longer than %d bytes", ErrMalformed, MaxTokenLength)
	}
	rest, ok := strings.CutPrefix(s, tokenPrefix)
	if !ok {
		return nil, fmt.Errorf("%w: does not start with %q", ErrMalformed, strings.TrimSpace(tokenPrefix))
	}
	var t Token
	var sig string
	for _, pair := range strings.Split(rest, "&") {
		k, v, ok := strings.Cut(pair, "=")
		if !ok || v == "" {
			return nil, fmt.Errorf("%w: field %q has no value", ErrMalformed, truncate(k))
		}
		var dst *string
		switch k {
		case "sr":
			dst = &t.RawResource
		case "sig":
			dst = &sig
		case "se":
			dst = &t.RawExpiry
		case "skn":
			dst = &t.KeyName
		default:
			return nil, fmt.Errorf("%w: unknown field %q", ErrMalformed, truncate(k))
		}
		if *dst != "" {
			return nil, fmt.Errorf("%w: field %s given twice", ErrMalformed, k)
		}
		*dst = v
	}
	if t.RawResource == "" || sig == "" || t.RawExpiry == "" || t.KeyName == "" {
		return nil, fmt.Errorf("%w: needs sr, sig, se and skn", ErrMalformed)
	}
	var err error
	if t.Resource, err = url.QueryUnescape(t.RawResource); err != nil {
		return nil, fmt.Errorf("%w: sr: %v", ErrMalformed, err)
	}
	if t.KeyName, err = url.QueryUnescape(t.KeyName); err != nil {
		return nil, fmt.Errorf("%w: skn: %v", ErrMalformed, err)
	}
	if sig, err = url.QueryUnescape(sig); err != nil {
		return nil, fmt.Errorf("%w: sig: %v", ErrMalformed, err)
	}
	if t.Signature, err = base64.StdEncoding.DecodeString(sig); err != nil || len(t.Signature) != sha256.Size {
		return nil, fmt.Errorf("%w: sig is not a base64 HMAC-SHA256", ErrMalformed)
	}
	se, err := strconv.ParseInt(t.RawExpiry, 10, 64)
	if err != nil || se < 0 || strconv.FormatInt(se, 10) != t.RawExpiry {
		return nil, fmt.Errorf("%w: se is not Unix seconds", ErrMalformed)
	}
	t.Expiry = time.Unix(se, 0)
	return &t, nil
}

func truncate(s string) string {
	if len(s) > 32 {
		return s[:32] + "..."
	}
	return s
}

// Sign makes a token for audience, valid until expiry, signed with key
// under the rule name keyName, as the Go SDK does (the escaped audience
// lowercased). For tests, the CLI and clients that need a pre-built token.
func Sign(keyName, key, audience string, expiry time.Time) string {
	sr := strings.ToLower(url.QueryEscape(audience))
	se := strconv.FormatInt(expiry.Unix(), 10)
	sig := base64.StdEncoding.EncodeToString(mac(key, sr, se))
	return tokenPrefix + "sr=" + sr + "&sig=" + url.QueryEscape(sig) + "&se=" + se + "&skn=" + url.QueryEscape(keyName)
}

// mac is HMAC-SHA256 keyed with the key's UTF-8 bytes (not base64-decoded,
// as the SDKs use it) over the raw sr, a line feed and the raw se.
func mac(key, rawResource, rawExpiry string) []byte {
	h := hmac.New(sha256.New, []byte(key))
	h.Write([]byte(rawResource))
	h.Write([]byte{'\n'})
	h.Write([]byte(rawExpiry))
	return h.Sum(nil)
}
