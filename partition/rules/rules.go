// Package rules compiles the catalog's subscription rules
// (placementpb.Rule) with partition/filter. The catalog compiles a rule to
// refuse one that does not compile; a partition compiles its
// subscriptions' rules when their config applies: both read a rule
// through this one mapping. Front-ends and gateways do not need it, which
// is why it is not in proto/placementpb.
package rules

import (
	"errors"
	"fmt"

	"github.com/quorumbus/quorumbus/partition/filter"
	pb "github.com/quorumbus/quorumbus/proto/placementpb"
)

// Compile compiles r's filter and action; the action is nil when the rule
// has none. A text that does not compile gives the filter's *SyntaxError
// with the position, wrapped. The name is not checked here (the catalog
// does).
func Compile(r *pb.Rule) (filter.Filter, *filter.Action, error) {
	invalid := func(what string, err error) error {
		return fmt.Errorf("rule %q: %s: %w", r.GetName(), what, err)
	}
	var f filter.Filter
	switch x := r.GetFilter().(type) {
	case *pb.Rule_SqlFilter:
		params, err := ValuesAny(x.SqlFilter.GetParameters())
		if err != nil {
			return nil, nil, invalid("filter parameters", err)
		}
		sql, err := filter.CompileSQL(x.SqlFilter.GetExpression(), params)
		if err != nil {
			return nil, nil, invalid("SQL filter", err)
		}
		f = sql
	case *pb.Rule_CorrelationFilter:
		c := x.CorrelationFilter
		props, err := ValuesAny(c.GetProperties())
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
	case *pb.Rule_TrueFilter:
		if !x.TrueFilter {
			return nil, nil, fmt.Errorf("rule %q: true_filter must be true when set", r.GetName())
		}
		f = filter.True
	case *pb.Rule_FalseFilter:
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
	params, err := ValuesAny(r.Action.GetParameters())
	if err != nil {
		return nil, nil, invalid("action parameters", err)
	}
	a, err := filter.CompileAction(r.Action.GetExpression(), params)
	if err != nil {
		return nil, nil, invalid("SQL action", err)
	}
	return f, a, nil
}

// ValuesAny maps rule values onto the Go values partition/filter
// reads (filter parameters, correlation properties, a message's
// application properties).
func ValuesAny(m map[string]*pb.RuleValue) (map[string]any, error) {
	if len(m) == 0 {
		return nil, nil
	}
	out := make(map[string]any, len(m))
	for k, v := range m {
		x, err := ValueAny(v)
		if err != nil {
			return nil, fmt.Errorf("%q %w", k, err)
		}
		out[k] = x
	}
	return out, nil
}

var errNoValue = errors.New("has no value")

// ValueAny is v as partition/filter reads it.
func ValueAny(v *pb.RuleValue) (any, error) {
	switch x := v.GetValue().(type) {
	case *pb.RuleValue_StringValue:
		return x.StringValue, nil
	case *pb.RuleValue_LongValue:
		return x.LongValue, nil
	case *pb.RuleValue_DoubleValue:
		return x.DoubleValue, nil
	case *pb.RuleValue_BoolValue:
		return x.BoolValue, nil
	case *pb.RuleValue_TimestampMs:
		return filter.Timestamp(x.TimestampMs), nil
	case *pb.RuleValue_DurationMs:
		return filter.Duration(x.DurationMs), nil
	}
	return nil, errNoValue
}
