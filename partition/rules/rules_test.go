package rules

import (
	"errors"
	"strings"
	"testing"

	"github.com/quorumbus/quorumbus/partition/filter"
	pb "github.com/quorumbus/quorumbus/proto/placementpb"
)

func TestCompile(t *testing.T) {
	str := func(s string) *pb.RuleValue { return &pb.RuleValue{Value: &pb.RuleValue_StringValue{StringValue: s}} }
	msg := &filter.Message{CorrelationID: "c", Properties: map[string]any{"a": "x", "n": int64(3)}}
	for _, c := range []struct {
		rule  *pb.Rule
		match bool
	}{
		{&pb.Rule{Name: "t", Filter: &pb.Rule_TrueFilter{TrueFilter: true}}, true},
		{&pb.Rule{Name: "f", Filter: &pb.Rule_FalseFilter{FalseFilter: true}}, false},
		{&pb.Rule{Name: "s", Filter: &pb.Rule_SqlFilter{SqlFilter: &pb.SqlFilter{Expression: "a = @p AND n > 2", Parameters: map[string]*pb.RuleValue{"@p": str("x")}}}}, true},
		{&pb.Rule{Name: "c", Filter: &pb.Rule_CorrelationFilter{CorrelationFilter: &pb.CorrelationFilter{CorrelationId: "c", Properties: map[string]*pb.RuleValue{"a": str("y")}}}}, false},
	} {
		f, a, err := Compile(c.rule)
		if err != nil || a != nil {
			t.Fatalf("%s: %v %v", c.rule.Name, a, err)
		}
		if got, err := f.Match(msg); err != nil || got != c.match {
			t.Errorf("%s: match %v %v, want %v", c.rule.Name, got, err, c.match)
		}
	}
	_, a, err := Compile(&pb.Rule{Name: "a", Filter: &pb.Rule_TrueFilter{TrueFilter: true}, Action: &pb.SqlRuleAction{Expression: "SET n = n + 1"}})
	if err != nil || a == nil {
		t.Fatalf("action: %v %v", a, err)
	}
	for _, bad := range []*pb.Rule{
		{Name: "x"},
		{Name: "x", Filter: &pb.Rule_TrueFilter{}},
		{Name: "x", Filter: &pb.Rule_SqlFilter{SqlFilter: &pb.SqlFilter{Expression: "a = "}}},
		{Name: "x", Filter: &pb.Rule_TrueFilter{TrueFilter: true}, Action: &pb.SqlRuleAction{Expression: "SET"}},
		{Name: "x", Filter: &pb.Rule_SqlFilter{SqlFilter: &pb.SqlFilter{Expression: "a = @p", Parameters: map[string]*pb.RuleValue{"@p": {}}}}},
	} {
		if _, _, err := Compile(bad); err == nil || !strings.Contains(err.Error(), `rule "x"`) {
			t.Errorf("%v: %v, want an error naming the rule", bad, err)
		}
	}
	_, _, err = Compile(&pb.Rule{Name: "x", Filter: &pb.Rule_SqlFilter{SqlFilter: &pb.SqlFilter{Expression: "a = "}}})
	var se *filter.SyntaxError
	if !errors.As(err, &se) {
		t.Errorf("syntax error %v does not wrap *filter.SyntaxError", err)
	}
}

func TestValueAny(t *testing.T) {
	for _, c := range []struct {
		v    *pb.RuleValue
		want any
	}{
		{&pb.RuleValue{Value: &pb.RuleValue_StringValue{StringValue: "s"}}, "s"},
		{&pb.RuleValue{Value: &pb.RuleValue_LongValue{LongValue: -4}}, int64(-4)},
		{&pb.RuleValue{Value: &pb.RuleValue_DoubleValue{DoubleValue: 1.5}}, 1.5},
		{&pb.RuleValue{Value: &pb.RuleValue_BoolValue{BoolValue: true}}, true},
		{&pb.RuleValue{Value: &pb.RuleValue_TimestampMs{TimestampMs: 7}}, filter.Timestamp(7)},
		{&pb.RuleValue{Value: &pb.RuleValue_DurationMs{DurationMs: 8}}, filter.Duration(8)},
	} {
		if got, err := ValueAny(c.v); err != nil || got != c.want {
			t.Errorf("%v: %v %v, want %v", c.v, got, err, c.want)
		}
	}
	if _, err := ValueAny(&pb.RuleValue{}); err == nil {
		t.Error("a value without a value is accepted")
	}
}
