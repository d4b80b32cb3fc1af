package frontend

import (
	"strings"
	"testing"

	"github.com/quorumbus/quorumbus/frontend/amqp"
	"github.com/quorumbus/quorumbus/proto/placementpb"
	"google.golang.org/protobuf/proto"
)

// The add-rule bodies the SDKs send: JavaScript's (string keys, undefined
// correlation fields as null), .NET's (a compatibility level, parameters).
var addRuleBodies = []amqp.Map{
	{{Key: "rule-name", Value: "red"}, {Key: "rule-description", Value: amqp.Map{
		{Key: "sql-filter", Value: amqp.Map{{Key: "expression", Value: "color = @c"}, {Key: "parameters", Value: amqp.Map{{Key: "@c", Value: "red"}}}}},
		{Key: "sql-rule-action", Value: amqp.Map{{Key: "expression", Value: "SET n = 1"}, {Key: "compatibility-level", Value: int32(20)}}},
	}}},
	{{Key: "rule-name", Value: "corr"}, {Key: "rule-description", Value: amqp.Map{
		{Key: "correlation-filter", Value: amqp.Map{
			{Key: "correlation-id", Value: "c1"}, {Key: "message-id", Value: nil}, {Key: "label", Value: "l"},
			{Key: "properties", Value: amqp.Map{{Key: "kind", Value: "x"}, {Key: "n", Value: int32(3)}, {Key: "u", Value: nil}}},
		}},
	}}},
	{{Key: amqp.Symbol("rule-name"), Value: amqp.Symbol("t")}, {Key: "rule-description", Value: amqp.Map{}}},
}

func TestDecodeAddRule(t *testing.T) {
	want := []*placementpb.Rule{
		{Name: "red", Filter: &placementpb.Rule_SqlFilter{SqlFilter: &placementpb.SqlFilter{Expression: "color = @c",
			Parameters: map[string]*placementpb.RuleValue{"@c": {Value: &placementpb.RuleValue_StringValue{StringValue: "red"}}}}},
			Action: &placementpb.SqlRuleAction{Expression: "SET n = 1"}},
		{Name: "corr", Filter: &placementpb.Rule_CorrelationFilter{CorrelationFilter: &placementpb.CorrelationFilter{
			CorrelationId: "c1", Subject: "l", Properties: map[string]*placementpb.RuleValue{
				"kind": {Value: &placementpb.RuleValue_StringValue{StringValue: "x"}},
				"n":    {Value: &placementpb.RuleValue_LongValue{LongValue: 3}},
			}}}},
		{Name: "t", Filter: &placementpb.Rule_TrueFilter{TrueFilter: true}},
	}
	for i, body := range addRuleBodies {
		got, err := decodeAddRule(body)
		if err != nil {
			t.Fatalf("body %d: %v", i, err)
		}
		if !proto.Equal(got, want[i]) {
			t.Errorf("body %d: got %v, want %v", i, got, want[i])
		}
	}
	for _, tc := range []struct {
		body amqp.Map
		want string
	}{
		{amqp.Map{{Key: "rule-description", Value: amqp.Map{}}}, "rule-name is required"},
		{amqp.Map{{Key: "rule-name", Value: int32(1)}}, "rule-name must be a string"},
		{amqp.Map{{Key: "rule-name", Value: "x"}}, "rule-description must be a map"},
		{amqp.Map{{Key: "rule-name", Value: "x"}, {Key: "rule-description", Value: amqp.Map{
			{Key: "sql-filter", Value: amqp.Map{{Key: "expression", Value: "1=1"}}},
			{Key: "correlation-filter", Value: amqp.Map{}},
		}}}, "both"},
		{amqp.Map{{Key: "rule-name", Value: "x"}, {Key: "rule-description", Value: amqp.Map{
			{Key: "correlation-filter", Value: amqp.Map{{Key: "properties", Value: amqp.Map{{Key: "k", Value: []byte{1}}}}}},
		}}}, "cannot be rule values"},
		{amqp.Map{{Key: "rule-name", Value: "x"}, {Key: "rule-description", Value: amqp.Map{
			{Key: "sql-rule-action", Value: "SET a = 1"},
		}}}, "sql-rule-action must be a map"},
	} {
		_, err := decodeAddRule(tc.body)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want an error with %q", tc.body, err, tc.want)
		}
	}
}

// FuzzAddRule decodes arbitrary add-rule requests: a body is refused with
// an error or becomes a rule that enumerate-rules can encode.
func FuzzAddRule(f *testing.F) {
	for _, body := range addRuleBodies {
		enc, err := (&amqp.Message{Value: body, HasValue: true}).Append(nil)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(enc)
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		var m amqp.Message
		if m.Decode(payload) != nil {
			return
		}
		body, ok := m.Value.(amqp.Map)
		if !ok {
			return
		}
		r, err := decodeAddRule(body)
		if err != nil {
			return
		}
		if r.GetName() == "" || r.GetFilter() == nil {
			t.Fatalf("accepted a rule without a name or filter: %v", r)
		}
		out := amqp.Message{Value: amqp.Map{{Key: "rules", Value: []any{amqp.Map{{Key: "rule-description", Value: encodeRule(r)}}}}}, HasValue: true}
		if _, err := out.Append(nil); err != nil {
			t.Fatalf("rule %v decoded from % x cannot be encoded: %v", r, payload, err)
		}
	})
}
