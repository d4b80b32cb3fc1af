package placementpb

import (
	"errors"
	"fmt"

	"github.com/quorumbus/quorumbus/partition/filter"
)

// Compile compiles r's filter and action with partition/filter; the action
// is nil when the rule has none. The catalog compiles a rule to refuse one
// that does not compile (with the position, from the filter's
// *SyntaxError); a partition compiles the rules of its subscriptions when
// their config is applied, so both read a rule through this one mapping.
// The name is not checked here (the catalog does).
func (r *Rule) Compile() (filter.Filter, *filter.Action, error) {
	invalid := func(what string, err error) error {
		return fmt.Errorf("rule %q: %s: %w", r.GetName(), what, err)
	}
	var f filter.Filter
	switch x := r.GetFilter().(type) {
	case *Rule_SqlFilter:
		params, err := RuleValuesAny(x.SqlFilter.GetParameters())
		if err != nil {
			return nil, nil, invalid("filter parameters", err)
		}
		sql, err := filter.CompileSQL(x.SqlFilter.GetExpression(), params)
		if err != nil {
			return nil, nil, invalid("SQL filter", err)
		}
		f = sql
	case *Rule_CorrelationFilter:
		c := x.CorrelationFilter
		props, err := RuleValuesAny(c.GetProperties())
		if err != nil {
			return nil, nil, invalid("correlation properties", err)
		}
		cf, err := filter.Correlation{
			CorrelationID: c.CorrelationId, MessageID: c.MessageId, To: c.To, ReplyTo: c.ReplyTo,
			Subject: c.Subject, SessionID: c.SessionId, ReplyToSessionID: c.ReplyToSessionId,
			ContentType: c.ContentType, Properties: props,
		}.Compile()
		if err != nil {
			return nil, nil, invalid("correlation filter", err)
		}
		f = cf
	case *Rule_TrueFilter:
		if !x.TrueFilter {
			return nil, nil, fmt.Errorf("rule %q: true_filter must be true when set", r.GetName())
		}
		f = filter.True
	case *Rule_FalseFilter:
		if !x.FalseFilter {
			return nil, nil, fmt.Errorf("rule %q: false_filter must be true when set", r.GetName())
		}
		f = filter.False
	default:
		return nil, nil, fmt.Errorf("rule %q has no filter", r.GetName())
	}
	if r.GetAction() == nil {
		return f, nil, nil
	}
	params, err := RuleValuesAny(r.Action.GetParameters())
	if err != nil {
		return nil, nil, invalid("action parameters", err)
	}
	a, err := filter.CompileAction(r.Action.GetExpression(), params)
	if err != nil {
		return nil, nil, invalid("SQL action", err)
	}
	return f, a, nil
}

// RuleValuesAny maps rule values onto the Go values partition/filter
// reads (filter parameters, correlation properties, a message's
// application properties).
func RuleValuesAny(m map[string]*RuleValue) (map[string]any, error) {
	if len(m) == 0 {
		return nil, nil
	}
	out := make(map[string]any, len(m))
	for k, v := range m {
		x, err := v.Any()
		if err != nil {
			return nil, fmt.Errorf("%q %w", k, err)
		}
		out[k] = x
	}
	return out, nil
}

var errNoValue = errors.New("has no value")

// Any is v as partition/filter reads it.
func (v *RuleValue) Any() (any, error) {
	switch x := v.GetValue().(type) {
	case *RuleValue_StringValue:
		return x.StringValue, nil
	case *RuleValue_LongValue:
		return x.LongValue, nil
	case *RuleValue_DoubleValue:
		return x.DoubleValue, nil
	case *RuleValue_BoolValue:
		return x.BoolValue, nil
	case *RuleValue_TimestampMs:
		return filter.Timestamp(x.TimestampMs), nil
	case *RuleValue_DurationMs:
		return filter.Duration(x.DurationMs), nil
	}
	return nil, errNoValue
}
