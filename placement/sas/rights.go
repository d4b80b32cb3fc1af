// Package sas implements Azure Service Bus Shared Access Signatures: the
// authorization rules (a name, rights and two keys, on the namespace or one
// entity), the token format the SDKs send on $cbs, signing and validation
// exactly as Service Bus does them. It uses the standard library only, so
// that the front-end, the gateway and the CLI can share it without
// reaching into the catalog.
package sas

import (
	"fmt"
	"strings"
)

// Rights is a set of Service Bus access rights.
type Rights uint8

const (
	Listen Rights = 1 << iota // receive, peek, settle, renew, sessions
	Send                      // send, schedule, cancel scheduled
	Manage                    // rule operations and entity management; implies Listen and Send
)

// Effective returns r with what Manage implies, as on Azure.
func (r Rights) Effective() Rights {
	if r&Manage != 0 {
		return r | Listen | Send
	}
	return r
}

// Has reports whether r (with what Manage implies) includes every right of want.
func (r Rights) Has(want Rights) bool { return r.Effective()&want == want }

// String names the rights as the Service Bus admin API does: "Listen",
// "Send", "Manage", comma-separated.
func (r Rights) String() string {
	var names []string
	for _, x := range []struct {
		r    Rights
		name string
	}{{Listen, "Listen"}, {Send, "Send"}, {Manage, "Manage"}} {
		if r&x.r != 0 {
			names = append(names, x.name)
		}
	}
	return strings.Join(names, ",")
}

// ParseRights reads a list of right names separated by commas, spaces or
// '|' ("Listen,Send", "Manage"), case-insensitively.
func ParseRights(s string) (Rights, error) {
	var r Rights
	for _, f := range strings.FieldsFunc(s, func(c rune) bool { return c == ',' || c == '|' || c == ' ' }) {
		switch strings.ToLower(f) {
		case "listen":
			r |= Listen
		case "send":
			r |= Send
		case "manage":
			r |= Manage
		default:
			return 0, fmt.Errorf("sas: unknown right %q (want Listen, Send or Manage)", f)
		}
	}
	if r == 0 {
		return 0, fmt.Errorf("sas: no rights in %q", s)
	}
	return r, nil
}
