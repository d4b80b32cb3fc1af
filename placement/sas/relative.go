package sas

import (
	"fmt"
	"strings"
	"time"
)

// ValidateRelative is Validate for a token whose audience need not be a
// URI: the admin clients sign the supplementary authorization of a
// forwarding target (Service Bus's ServiceBusSupplementaryAuthorization
// header) that way. The Go client (azservicebus/admin v1.11.0) signs the
// ForwardTo it was given, an entity name ("orders") or a URL; the
// JavaScript one its namespace's host ("ns.servicebus.windows.net",
// "localhost:5300"). An audience with a scheme is read as Validate reads
// it and must name host; one without is read against host: when its
// first segment is host (ports ignored) it names that host and the path
// after it, otherwise it is an entity path in the namespace. The claim's
// Scope is the path so named.
func (rs *Ruleset) ValidateRelative(token, host string, now time.Time) (Claim, error) {
	t, err := Parse(token)
	if err != nil {
		return Claim{}, err
	}
	if strings.Contains(t.Resource, "://") {
		return rs.Validate(token, host, now)
	}
	first, rest, _ := strings.Cut(strings.TrimPrefix(t.Resource, "/"), "/")
	path := t.Resource
	if host != "" && strings.EqualFold(stripPort(first), stripPort(host)) {
		path = rest
	}
	if strings.ContainsAny(path, "?#") {
		return Claim{}, fmt.Errorf("%w: audience %q", ErrMalformed, truncate(t.Resource))
	}
	return rs.claim(t, normalizePath(path), now)
}
