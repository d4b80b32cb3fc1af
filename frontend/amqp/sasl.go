package amqp

import (
	"bytes"
	"errors"
)

// Authenticator decides the SASL layer of a connection (spec 5.3).
type Authenticator interface {
	// Mechanisms lists the mechanisms offered, in order of preference.
	Mechanisms() []Symbol
	// Authenticate checks a sasl-init. It returns the authenticated
	// identity, or an error to fail the connection with SASL code auth.
	Authenticate(mechanism Symbol, initialResponse []byte, hostname string) (identity string, err error)
}

// PrincipalAuthenticator is an Authenticator that also returns a
// principal: what the credentials grant, which the connection's handler
// reads back with Conn.Principal instead of checking them a second time.
// The engine prefers it to Authenticate when an Authenticator has it.
type PrincipalAuthenticator interface {
	Authenticator
	AuthenticatePrincipal(mechanism Symbol, initialResponse []byte, hostname string) (identity string, principal any, err error)
}

// ParsePlain splits a SASL PLAIN initial response, [authzid] NUL authcid
// NUL passwd (RFC 4616); ok is false when it has not that form or the
// authcid is empty.
func ParsePlain(resp []byte) (authzid, username, password string, ok bool) {
	parts := bytes.SplitN(resp, []byte{0}, 3)
	if len(parts) != 3 || len(parts[1]) == 0 {
		return "", "", "", false
	}
	return string(parts[0]), string(parts[1]), string(parts[2]), true
}

// SASL is the stock Authenticator: ANONYMOUS and PLAIN.
type SASL struct {
	// Anonymous accepts the ANONYMOUS mechanism; the identity is
	// "anonymous" (or the trace information the client sent, if any).
	Anonymous bool
	// Plain, when set, accepts PLAIN and checks the credentials.
	Plain func(authzid, username, password string) error
	// Extra mechanisms are offered but not accepted: Service Bus offers
	// MSSBCBS, and clients pick the first one they know.
	Extra []Symbol
}

// ErrAuthFailed is returned by authenticators for wrong credentials.
var ErrAuthFailed = errors.New("amqp: authentication failed")

func (s SASL) Mechanisms() []Symbol {
	var m []Symbol
	if s.Plain != nil {
		m = append(m, "PLAIN")
	}
	if s.Anonymous {
		m = append(m, "ANONYMOUS")
	}
	return append(m, s.Extra...)
}

func (s SASL) Authenticate(mech Symbol, resp []byte, _ string) (string, error) {
	switch {
	case mech == "ANONYMOUS" && s.Anonymous:
		return "anonymous", nil
	case mech == "PLAIN" && s.Plain != nil:
		authzid, user, pass, ok := ParsePlain(resp)
		if !ok {
			return "", ErrAuthFailed
		}
		if err := s.Plain(authzid, user, pass); err != nil {
			return "", err
		}
		return user, nil
	}
	return "", ErrAuthFailed
}
