package filter

import (
	"errors"
	"fmt"
	"sort"
	"strings"
)

// Correlation is a correlation filter as a rule declares it: every field
// that is set must equal the message's, exactly (strings case-sensitively,
// numbers across integer and float types); unset fields are ignored.
type Correlation struct {
	CorrelationID    string
	MessageID        string
	To               string
	ReplyTo          string
	Subject          string // Label
	SessionID        string
	ReplyToSessionID string
	ContentType      string
	Properties       map[string]any
}

// ErrEmptyCorrelation is returned for a correlation filter with no field
// set, which Azure refuses.
var ErrEmptyCorrelation = fmt.Errorf("%w: a correlation filter needs at least one property", ErrSyntax)

// CorrelationFilter is a compiled Correlation.
type CorrelationFilter struct {
	sys   []sysCond
	props []propCond
}

type sysCond struct {
	p    sysProp
	want string
	get  func(*Message) string
}

type propCond struct {
	name string
	want value
}

// Compile checks c and prepares it for matching.
func (c Correlation) Compile() (*CorrelationFilter, error) {
	f := &CorrelationFilter{}
	for _, s := range []sysCond{
		{sysCorrelationID, c.CorrelationID, func(m *Message) string { return m.CorrelationID }},
		{sysMessageID, c.MessageID, func(m *Message) string { return m.MessageID }},
		{sysTo, c.To, func(m *Message) string { return m.To }},
		{sysReplyTo, c.ReplyTo, func(m *Message) string { return m.ReplyTo }},
		{sysLabel, c.Subject, func(m *Message) string { return m.Subject }},
		{sysSessionID, c.SessionID, func(m *Message) string { return m.SessionID }},
		{sysReplyToSessionID, c.ReplyToSessionID, func(m *Message) string { return m.ReplyToSessionID }},
		{sysContentType, c.ContentType, func(m *Message) string { return m.ContentType }},
	} {
		if s.want != "" {
			f.sys = append(f.sys, s)
		}
	}
	names := make([]string, 0, len(c.Properties))
	for name := range c.Properties {
		names = append(names, name)
	}
	sort.Strings(names) // a deterministic order for String
	var errs []error
	for _, name := range names {
		v := fromAny(c.Properties[name])
		switch v.kind {
		case kindOther:
			errs = append(errs, fmt.Errorf("%w: the correlation property %q has a value of a type filters cannot use", ErrSyntax, name))
			continue
		case kindNull:
			errs = append(errs, fmt.Errorf("%w: the correlation property %q has no value", ErrSyntax, name))
			continue
		}
		f.props = append(f.props, propCond{name: name, want: v})
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if len(f.sys) == 0 && len(f.props) == 0 {
		return nil, ErrEmptyCorrelation
	}
	return f, nil
}

// Match reports whether every condition holds. It never fails.
func (f *CorrelationFilter) Match(m *Message) (bool, error) {
	for _, s := range f.sys {
		// want is never empty, so an unset ("") property never matches.
		if s.get(m) != s.want {
			return false, nil
		}
	}
	for _, pc := range f.props {
		x, ok := m.Properties[pc.name]
		if !ok {
			return false, nil
		}
		if str, isStr := x.(string); isStr && pc.want.kind == kindString {
			if str != pc.want.s {
				return false, nil
			}
			continue
		}
		if !equal(fromAny(x), pc.want).isTrue() {
			return false, nil
		}
	}
	return true, nil
}

// String describes the filter as the SQL filter that matches the same
// messages.
func (f *CorrelationFilter) String() string {
	var parts []string
	for _, s := range f.sys {
		parts = append(parts, "sys."+bracket(sysProps[s.p].name)+" = "+quoteString(s.want))
	}
	for _, pc := range f.props {
		parts = append(parts, "user."+bracket(pc.name)+" = "+pc.want.literal())
	}
	return strings.Join(parts, " AND ")
}
