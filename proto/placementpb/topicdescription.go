package placementpb

import (
	"cmp"
	"encoding/json"
	"fmt"
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
	UserMetadata                        string
}

// Properties returns the catalog's properties of a topic so described.
// A default message TTL from NeverExpires on is stored as none, as a
// queue's is.
func (d TopicDescription) Properties() *QueueProperties {
	return &QueueProperties{
		DefaultMessageTtlMs:        storedTTL(d.DefaultMessageTimeToLive),
		RequiresDuplicateDetection: d.RequiresDuplicateDetection,
		DuplicateDetectionWindowMs: d.DuplicateDetectionHistoryTimeWindow.Milliseconds(),
		MaxSizeInMegabytes:         d.MaxSizeInMegabytes,
		MaxMessageSizeInKilobytes:  d.MaxMessageSizeInKilobytes,
		PartitionCount:             d.PartitionCount,
		EnablePartitioning:         d.EnablePartitioning,
		UserMetadata:               d.UserMetadata,
	}
}

// storedTTL is a default message TTL as the catalog keeps it: in
// milliseconds, with 0 (none) for anything from NeverExpires on (Service
// Bus's "forever" among them).
func storedTTL(ttl time.Duration) int64 {
	if ttl >= NeverExpires {
		return 0
	}
	return ttl.Milliseconds()
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
	UserMetadata                              string
	SessionAcceptWait                         time.Duration // as QueueDescription's
}

// Properties returns the catalog's properties of a subscription so
// described; its TTL is stored as a topic's.
func (d SubscriptionDescription) Properties() *QueueProperties {
	return &QueueProperties{
		LockDurationMs:                            d.LockDuration.Milliseconds(),
		MaxDeliveryCount:                          d.MaxDeliveryCount,
		DefaultMessageTtlMs:                       storedTTL(d.DefaultMessageTimeToLive),
		DeadLetteringOnMessageExpiration:          d.DeadLetteringOnMessageExpiration,
		DeadLetteringOnFilterEvaluationExceptions: d.DeadLetteringOnFilterEvaluationExceptions,
		RequiresSession:                           d.RequiresSession,
		ForwardTo:                                 d.ForwardTo,
		ForwardDeadLetteredMessagesTo:             d.ForwardDeadLetteredMessagesTo,
		UserMetadata:                              d.UserMetadata,
		SessionAcceptWaitMs:                       acceptWaitMs(d.SessionAcceptWait),
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

// NewRuleValue wraps a Go value as a RuleValue. A json.Number (decode
// with UseNumber) is a long when it is an integer, else a double, as
// Config.json's numbers mean.
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
		return &RuleValue{Value: &RuleValue_DoubleValue{DoubleValue: x}}, nil
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return &RuleValue{Value: &RuleValue_LongValue{LongValue: i}}, nil
		}
		f, err := x.Float64()
		if err != nil {
			return nil, fmt.Errorf("number %s: %w", x, err)
		}
		return &RuleValue{Value: &RuleValue_DoubleValue{DoubleValue: f}}, nil
	case time.Time:
		return &RuleValue{Value: &RuleValue_TimestampMs{TimestampMs: x.UnixMilli()}}, nil
	case time.Duration:
		return &RuleValue{Value: &RuleValue_DurationMs{DurationMs: x.Milliseconds()}}, nil
	}
	return nil, fmt.Errorf("a value of type %T cannot be a rule value (string, bool, number, time or duration)", v)
}

// TopicDescriptionOf is the inverse of TopicDescription.Properties.
func TopicDescriptionOf(p *QueueProperties) TopicDescription {
	return TopicDescription{
		DefaultMessageTimeToLive:            time.Duration(p.GetDefaultMessageTtlMs()) * time.Millisecond,
		RequiresDuplicateDetection:          p.GetRequiresDuplicateDetection(),
		DuplicateDetectionHistoryTimeWindow: time.Duration(p.GetDuplicateDetectionWindowMs()) * time.Millisecond,
		MaxSizeInMegabytes:                  p.GetMaxSizeInMegabytes(),
		MaxMessageSizeInKilobytes:           p.GetMaxMessageSizeInKilobytes(),
		PartitionCount:                      p.GetPartitionCount(),
		EnablePartitioning:                  p.GetEnablePartitioning(),
		UserMetadata:                        p.GetUserMetadata(),
	}
}

// SubscriptionDescriptionOf is the inverse of
// SubscriptionDescription.Properties.
func SubscriptionDescriptionOf(p *QueueProperties) SubscriptionDescription {
	d := SubscriptionDescription{
		LockDuration:                     time.Duration(p.GetLockDurationMs()) * time.Millisecond,
		MaxDeliveryCount:                 p.GetMaxDeliveryCount(),
		DefaultMessageTimeToLive:         time.Duration(p.GetDefaultMessageTtlMs()) * time.Millisecond,
		DeadLetteringOnMessageExpiration: p.GetDeadLetteringOnMessageExpiration(),
		RequiresSession:                  p.GetRequiresSession(),
		ForwardTo:                        p.GetForwardTo(),
		ForwardDeadLetteredMessagesTo:    p.GetForwardDeadLetteredMessagesTo(),
		UserMetadata:                     p.GetUserMetadata(),
		SessionAcceptWait:                time.Duration(p.GetSessionAcceptWaitMs()) * time.Millisecond,
	}
	if p.DeadLetteringOnFilterEvaluationExceptions != nil {
		v := *p.DeadLetteringOnFilterEvaluationExceptions
		d.DeadLetteringOnFilterEvaluationExceptions = &v
	}
	return d
}

// RuleDescriptionOf is the inverse of RuleDescription.Rule: what the admin
// API and Config.json show of a stored rule. Values come back as string,
// int64, float64, bool, time.Time (UTC) and time.Duration.
func RuleDescriptionOf(r *Rule) RuleDescription {
	d := RuleDescription{Name: r.GetName()}
	switch f := r.GetFilter().(type) {
	case *Rule_SqlFilter:
		d.FilterType = "Sql"
		d.SqlExpression = f.SqlFilter.GetExpression()
		d.SqlParameters = RuleValuesOf(f.SqlFilter.GetParameters())
	case *Rule_CorrelationFilter:
		c := f.CorrelationFilter
		d.FilterType = "Correlation"
		d.Correlation = CorrelationDescription{
			CorrelationID: c.CorrelationId, MessageID: c.MessageId, To: c.To, ReplyTo: c.ReplyTo,
			Subject: c.Subject, SessionID: c.SessionId, ReplyToSessionID: c.ReplyToSessionId,
			ContentType: c.ContentType, Properties: RuleValuesOf(c.Properties),
		}
	case *Rule_TrueFilter:
		d.FilterType = "True"
	case *Rule_FalseFilter:
		d.FilterType = "False"
	}
	if a := r.GetAction(); a != nil {
		d.ActionExpression = a.GetExpression()
		d.ActionParameters = RuleValuesOf(a.GetParameters())
	}
	return d
}

// RuleValuesOf turns stored rule values back into Go values.
func RuleValuesOf(m map[string]*RuleValue) map[string]any {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]any, len(m))
	for k, v := range m {
		switch x := v.GetValue().(type) {
		case *RuleValue_StringValue:
			out[k] = x.StringValue
		case *RuleValue_LongValue:
			out[k] = x.LongValue
		case *RuleValue_DoubleValue:
			out[k] = x.DoubleValue
		case *RuleValue_BoolValue:
			out[k] = x.BoolValue
		case *RuleValue_TimestampMs:
			out[k] = time.UnixMilli(x.TimestampMs).UTC()
		case *RuleValue_DurationMs:
			out[k] = time.Duration(x.DurationMs) * time.Millisecond
		default:
			out[k] = nil
		}
	}
	return out
}
