package placementpb

import (
	"cmp"
	"fmt"
	"math"
	"strings"
	"time"
)

// TopicDescription is a topic's properties under the names Service Bus
// gives them (TopicDescription, the emulator's Config.json). Like
// QueueDescription, it is where those names meet the catalog's; a zero
// field means the default.
type TopicDescription struct {
	DefaultMessageTimeToLive            time.Duration
	RequiresDuplicateDetection          bool
	DuplicateDetectionHistoryTimeWindow time.Duration
	MaxSizeInMegabytes                  int64
	MaxMessageSizeInKilobytes           int64
	PartitionCount                      uint32
	EnablePartitioning                  bool
}

// Properties returns the catalog's properties of a topic so described.
func (d TopicDescription) Properties() *QueueProperties {
	return &QueueProperties{
		DefaultMessageTtlMs:        d.DefaultMessageTimeToLive.Milliseconds(),
		RequiresDuplicateDetection: d.RequiresDuplicateDetection,
		DuplicateDetectionWindowMs: d.DuplicateDetectionHistoryTimeWindow.Milliseconds(),
		MaxSizeInMegabytes:         d.MaxSizeInMegabytes,
		MaxMessageSizeInKilobytes:  d.MaxMessageSizeInKilobytes,
		PartitionCount:             d.PartitionCount,
		EnablePartitioning:         d.EnablePartitioning,
	}
}

// SubscriptionDescription is a subscription's properties under Service
// Bus's names (SubscriptionDescription, Config.json). Its partitioning is
// its topic's.
type SubscriptionDescription struct {
	LockDuration                              time.Duration
	MaxDeliveryCount                          uint32
	DefaultMessageTimeToLive                  time.Duration
	DeadLetteringOnMessageExpiration          bool
	DeadLetteringOnFilterEvaluationExceptions *bool // nil: Azure's default, true
	RequiresSession                           bool
	ForwardTo                                 string
	ForwardDeadLetteredMessagesTo             string
}

// Properties returns the catalog's properties of a subscription so
// described.
func (d SubscriptionDescription) Properties() *QueueProperties {
	return &QueueProperties{
		LockDurationMs:                            d.LockDuration.Milliseconds(),
		MaxDeliveryCount:                          d.MaxDeliveryCount,
		DefaultMessageTtlMs:                       d.DefaultMessageTimeToLive.Milliseconds(),
		DeadLetteringOnMessageExpiration:          d.DeadLetteringOnMessageExpiration,
		DeadLetteringOnFilterEvaluationExceptions: d.DeadLetteringOnFilterEvaluationExceptions,
		RequiresSession:                           d.RequiresSession,
		ForwardTo:                                 d.ForwardTo,
		ForwardDeadLetteredMessagesTo:             d.ForwardDeadLetteredMessagesTo,
	}
}

// RuleDescription is a rule as Service Bus describes one (RuleDescription,
// Config.json's Rules): FilterType "Sql", "Correlation", "True" or
// "False" (case-insensitive), the filter of that type, and an optional
// SQL action. Parameter and correlation property values are Go values:
// string, bool, integers, floats, time.Time and time.Duration.
type RuleDescription struct {
	Name             string
	FilterType       string
	SqlExpression    string
	SqlParameters    map[string]any
	Correlation      CorrelationDescription
	ActionExpression string // empty: no action
	ActionParameters map[string]any
}

// CorrelationDescription is a correlation filter under Service Bus's
// names; Label is the older name of Subject and either may be given.
type CorrelationDescription struct {
	CorrelationID    string
	MessageID        string
	To               string
	ReplyTo          string
	Label            string
	Subject          string
	SessionID        string
	ReplyToSessionID string
	ContentType      string
	Properties       map[string]any
}

// Rule returns the catalog's rule so described. It checks only the shape;
// the catalog compiles the filter and action when the rule is created.
func (d RuleDescription) Rule() (*Rule, error) {
	r := &Rule{Name: d.Name}
	switch strings.ToLower(d.FilterType) {
	case "sql", "sqlfilter":
		params, err := ruleValues(d.SqlParameters)
		if err != nil {
			return nil, fmt.Errorf("rule %s: SQL filter parameters: %w", d.Name, err)
		}
		r.Filter = &Rule_SqlFilter{SqlFilter: &SqlFilter{Expression: d.SqlExpression, Parameters: params}}
	case "correlation", "correlationfilter":
		c := d.Correlation
		if c.Label != "" && c.Subject != "" && c.Label != c.Subject {
			return nil, fmt.Errorf("rule %s: the correlation filter gives Label %q and Subject %q", d.Name, c.Label, c.Subject)
		}
		props, err := ruleValues(c.Properties)
		if err != nil {
			return nil, fmt.Errorf("rule %s: correlation properties: %w", d.Name, err)
		}
		r.Filter = &Rule_CorrelationFilter{CorrelationFilter: &CorrelationFilter{
			CorrelationId: c.CorrelationID, MessageId: c.MessageID, To: c.To, ReplyTo: c.ReplyTo,
			Subject: cmp.Or(c.Subject, c.Label), SessionId: c.SessionID, ReplyToSessionId: c.ReplyToSessionID,
			ContentType: c.ContentType, Properties: props,
		}}
	case "true", "truefilter":
		r.Filter = &Rule_TrueFilter{TrueFilter: true}
	case "false", "falsefilter":
		r.Filter = &Rule_FalseFilter{FalseFilter: true}
	default:
		return nil, fmt.Errorf("rule %s: unknown FilterType %q (Sql, Correlation, True or False)", d.Name, d.FilterType)
	}
	if d.ActionExpression != "" {
		params, err := ruleValues(d.ActionParameters)
		if err != nil {
			return nil, fmt.Errorf("rule %s: action parameters: %w", d.Name, err)
		}
		r.Action = &SqlRuleAction{Expression: d.ActionExpression, Parameters: params}
	}
	return r, nil
}

func ruleValues(m map[string]any) (map[string]*RuleValue, error) {
	if len(m) == 0 {
		return nil, nil
	}
	out := make(map[string]*RuleValue, len(m))
	for k, v := range m {
		rv, err := NewRuleValue(v)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
		out[k] = rv
	}
	return out, nil
}

// NewRuleValue wraps a Go value as a RuleValue. A float64 with no
// fraction (as JSON decodes every number) becomes a long.
func NewRuleValue(v any) (*RuleValue, error) {
	switch x := v.(type) {
	case string:
		return &RuleValue{Value: &RuleValue_StringValue{StringValue: x}}, nil
	case bool:
		return &RuleValue{Value: &RuleValue_BoolValue{BoolValue: x}}, nil
	case int:
		return &RuleValue{Value: &RuleValue_LongValue{LongValue: int64(x)}}, nil
	case int32:
		return &RuleValue{Value: &RuleValue_LongValue{LongValue: int64(x)}}, nil
	case int64:
		return &RuleValue{Value: &RuleValue_LongValue{LongValue: x}}, nil
	case float32:
		return &RuleValue{Value: &RuleValue_DoubleValue{DoubleValue: float64(x)}}, nil
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1<<53 {
			return &RuleValue{Value: &RuleValue_LongValue{LongValue: int64(x)}}, nil
		}
		return &RuleValue{Value: &RuleValue_DoubleValue{DoubleValue: x}}, nil
	case time.Time:
		return &RuleValue{Value: &RuleValue_TimestampMs{TimestampMs: x.UnixMilli()}}, nil
	case time.Duration:
		return &RuleValue{Value: &RuleValue_DurationMs{DurationMs: x.Milliseconds()}}, nil
	}
	return nil, fmt.Errorf("a value of type %T cannot be a rule value (string, bool, number, time or duration)", v)
}
