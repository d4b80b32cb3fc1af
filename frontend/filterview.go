package frontend

import (
	"math"
	"time"

	"github.com/quorumbus/quorumbus/frontend/amqp"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// filterView is what the subscription rules of a topic read of a message
// (besides its id, session id and partition key, which every NewMessage
// carries): the properties, and the application properties whose values
// a rule value can hold. The partition evaluates rules on it and never
// decodes AMQP, so that every replica reads the same values from the
// entry.
//
// Values of other types (binary, uuid, symbol keys, described values)
// are left out: a filter sees them as absent. Service Bus would compare
// some of them (a uuid with a uuid).
func filterView(p *amqp.Properties, app amqp.Map) *partitionpb.FilterView {
	v := &partitionpb.FilterView{
		CorrelationId:    messageIDString(p.CorrelationID),
		To:               p.To,
		ReplyTo:          p.ReplyTo,
		Subject:          p.Subject,
		ContentType:      string(p.ContentType),
		ReplyToSessionId: p.ReplyToGroupID,
	}
	for _, pair := range app {
		k, ok := pair.Key.(string)
		if !ok {
			continue
		}
		if rv := ruleValue(pair.Value); rv != nil {
			if v.Properties == nil {
				v.Properties = make(map[string]*placementpb.RuleValue, len(app))
			}
			v.Properties[k] = rv
		}
	}
	return v
}

// ruleValue maps an AMQP simple value onto a rule value, nil when none
// holds it. Unsigned integers above MaxInt64 become doubles, as .NET
// compares them.
func ruleValue(x any) *placementpb.RuleValue {
	long := func(n int64) *placementpb.RuleValue {
		return &placementpb.RuleValue{Value: &placementpb.RuleValue_LongValue{LongValue: n}}
	}
	double := func(f float64) *placementpb.RuleValue {
		return &placementpb.RuleValue{Value: &placementpb.RuleValue_DoubleValue{DoubleValue: f}}
	}
	switch x := x.(type) {
	case string:
		return &placementpb.RuleValue{Value: &placementpb.RuleValue_StringValue{StringValue: x}}
	case bool:
		return &placementpb.RuleValue{Value: &placementpb.RuleValue_BoolValue{BoolValue: x}}
	case int8:
		return long(int64(x))
	case int16:
		return long(int64(x))
	case int32:
		return long(int64(x))
	case int64:
		return long(x)
	case uint8:
		return long(int64(x))
	case uint16:
		return long(int64(x))
	case uint32:
		return long(int64(x))
	case uint64:
		if x > math.MaxInt64 {
			return double(float64(x))
		}
		return long(int64(x))
	case float32:
		return double(float64(x))
	case float64:
		return double(x)
	case time.Time:
		return &placementpb.RuleValue{Value: &placementpb.RuleValue_TimestampMs{TimestampMs: x.UnixMilli()}}
	}
	return nil
}
