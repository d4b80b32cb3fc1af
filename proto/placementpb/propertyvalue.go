package placementpb

import (
	"math"
	"time"
)

// PropertyRuleValue maps a message's application property value (an AMQP
// simple value as Go decodes it) onto the rule value a filter compares,
// nil when no rule value holds it (binary, uuid, described values: a
// filter sees those as absent). Unsigned integers above MaxInt64 become
// doubles, as .NET compares them.
//
// The front-end maps a topic send's properties with it and the gateway a
// re-driven message's, so that both evaluate rules on the same values.
func PropertyRuleValue(x any) *RuleValue {
	long := func(n int64) *RuleValue { return &RuleValue{Value: &RuleValue_LongValue{LongValue: n}} }
	double := func(f float64) *RuleValue { return &RuleValue{Value: &RuleValue_DoubleValue{DoubleValue: f}} }
	switch x := x.(type) {
	case string:
		return &RuleValue{Value: &RuleValue_StringValue{StringValue: x}}
	case bool:
		return &RuleValue{Value: &RuleValue_BoolValue{BoolValue: x}}
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
		return &RuleValue{Value: &RuleValue_TimestampMs{TimestampMs: x.UnixMilli()}}
	}
	return nil
}
