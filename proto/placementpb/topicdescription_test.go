package placementpb

import (
	"encoding/json"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
)

func TestTopicAndSubscriptionDescriptionProperties(t *testing.T) {
	topic := TopicDescription{DefaultMessageTimeToLive: time.Hour, RequiresDuplicateDetection: true,
		DuplicateDetectionHistoryTimeWindow: time.Minute, MaxSizeInMegabytes: 2048, MaxMessageSizeInKilobytes: 512,
		EnablePartitioning: true}
	want := &QueueProperties{DefaultMessageTtlMs: 3_600_000, RequiresDuplicateDetection: true, DuplicateDetectionWindowMs: 60_000,
		MaxSizeInMegabytes: 2048, MaxMessageSizeInKilobytes: 512, EnablePartitioning: true}
	if got := topic.Properties(); !proto.Equal(got, want) {
		t.Errorf("topic: %v, want %v", got, want)
	}
	sub := SubscriptionDescription{LockDuration: 30 * time.Second, MaxDeliveryCount: 3, DefaultMessageTimeToLive: time.Minute,
		DeadLetteringOnMessageExpiration: true, DeadLetteringOnFilterEvaluationExceptions: proto.Bool(false), RequiresSession: true,
		ForwardTo: "q", ForwardDeadLetteredMessagesTo: "dlq"}
	want = &QueueProperties{LockDurationMs: 30_000, MaxDeliveryCount: 3, DefaultMessageTtlMs: 60_000,
		DeadLetteringOnMessageExpiration: true, DeadLetteringOnFilterEvaluationExceptions: proto.Bool(false), RequiresSession: true,
		ForwardTo: "q", ForwardDeadLetteredMessagesTo: "dlq"}
	if got := sub.Properties(); !proto.Equal(got, want) {
		t.Errorf("subscription: %v, want %v", got, want)
	}
	if back := TopicDescriptionOf(topic.Properties()); back != topic {
		t.Errorf("topic round trip: %+v, want %+v", back, topic)
	}
	if back := SubscriptionDescriptionOf(sub.Properties()); !proto.Equal(back.Properties(), sub.Properties()) {
		t.Errorf("subscription round trip: %+v, want %+v", back, sub)
	}
}

func TestRuleDescription(t *testing.T) {
	at := time.UnixMilli(1_700_000_000_000)
	for _, tc := range []struct {
		d    RuleDescription
		want *Rule
		bad  bool
	}{
		{d: RuleDescription{Name: "s", FilterType: "Sql", SqlExpression: "a = @p", SqlParameters: map[string]any{"@p": json.Number("3")},
			ActionExpression: "SET b = @q", ActionParameters: map[string]any{"@q": "x"}},
			want: &Rule{Name: "s", Filter: &Rule_SqlFilter{SqlFilter: &SqlFilter{Expression: "a = @p",
				Parameters: map[string]*RuleValue{"@p": {Value: &RuleValue_LongValue{LongValue: 3}}}}},
				Action: &SqlRuleAction{Expression: "SET b = @q", Parameters: map[string]*RuleValue{"@q": {Value: &RuleValue_StringValue{StringValue: "x"}}}}}},
		{d: RuleDescription{Name: "c", FilterType: "correlation", Correlation: CorrelationDescription{
			CorrelationID: "id", Label: "l", Properties: map[string]any{"f": 1.5, "two": 2.0, "big": json.Number("1e3"), "b": true, "t": at, "d": time.Second}}},
			want: &Rule{Name: "c", Filter: &Rule_CorrelationFilter{CorrelationFilter: &CorrelationFilter{CorrelationId: "id", Subject: "l",
				Properties: map[string]*RuleValue{
					"f": {Value: &RuleValue_DoubleValue{DoubleValue: 1.5}}, "b": {Value: &RuleValue_BoolValue{BoolValue: true}},
					"two": {Value: &RuleValue_DoubleValue{DoubleValue: 2}}, "big": {Value: &RuleValue_DoubleValue{DoubleValue: 1000}},
					"t": {Value: &RuleValue_TimestampMs{TimestampMs: 1_700_000_000_000}}, "d": {Value: &RuleValue_DurationMs{DurationMs: 1000}},
				}}}}},
		{d: RuleDescription{Name: "t", FilterType: "TrueFilter"}, want: &Rule{Name: "t", Filter: &Rule_TrueFilter{TrueFilter: true}}},
		{d: RuleDescription{Name: "f", FilterType: "False"}, want: &Rule{Name: "f", Filter: &Rule_FalseFilter{FalseFilter: true}}},
		{d: RuleDescription{Name: "x", FilterType: "Regex"}, bad: true},
		{d: RuleDescription{Name: "x", FilterType: "Correlation", Correlation: CorrelationDescription{Label: "a", Subject: "b"}}, bad: true},
		{d: RuleDescription{Name: "x", FilterType: "Sql", SqlParameters: map[string]any{"p": []int{1}}}, bad: true},
	} {
		got, err := tc.d.Rule()
		if tc.bad {
			if err == nil {
				t.Errorf("%+v: %v, want an error", tc.d, got)
			}
			continue
		}
		if err != nil || !proto.Equal(got, tc.want) {
			t.Errorf("%+v: %v, %v; want %v", tc.d, got, err, tc.want)
			continue
		}
		if again, err := RuleDescriptionOf(got).Rule(); err != nil || !proto.Equal(again, got) {
			t.Errorf("%v described as %+v, which gives %v, %v", got, RuleDescriptionOf(got), again, err)
		}
	}
}
