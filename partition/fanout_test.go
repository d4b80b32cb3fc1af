package partition_test

import (
	"strings"
	"testing"

	pt "github.com/quorumbus/quorumbus/partition/partitiontest"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// A topic (entity 10) with three subscriptions on its partition 0:
// all (true filter), red (SQL on a user property, and a correlation rule
// on the subject: a message that matches both gets two copies) and none
// (false filter).
func topicConfigs() []*partitionpb.EntityConfig {
	sub := func(id uint64, name string, rules ...*placementpb.Rule) *partitionpb.EntityConfig {
		return &partitionpb.EntityConfig{EntityId: id, Name: "t/Subscriptions/" + name, Kind: placementpb.EntityKind_ENTITY_KIND_SUBSCRIPTION,
			TopicId: 10, Rules: rules, DeadLetteringOnFilterEvaluationExceptions: true}
	}
	return []*partitionpb.EntityConfig{
		{EntityId: 10, Name: "t", Kind: placementpb.EntityKind_ENTITY_KIND_TOPIC},
		sub(11, "all", &placementpb.Rule{Name: "$Default", Filter: &placementpb.Rule_TrueFilter{TrueFilter: true}}),
		sub(12, "red",
			&placementpb.Rule{Name: "color", Filter: &placementpb.Rule_SqlFilter{SqlFilter: &placementpb.SqlFilter{Expression: "color = 'red' AND n > 2"}}},
			&placementpb.Rule{Name: "subject", Filter: &placementpb.Rule_CorrelationFilter{CorrelationFilter: &placementpb.CorrelationFilter{Subject: "hot"}}}),
		sub(13, "none", &placementpb.Rule{Name: "$Default", Filter: &placementpb.Rule_FalseFilter{FalseFilter: true}}),
		sub(14, "broken", &placementpb.Rule{Name: "div", Filter: &placementpb.Rule_SqlFilter{SqlFilter: &placementpb.SqlFilter{Expression: "n / 0 = 1"}}}),
	}
}

func topicMsg(body, color string, n int64, subject string) *partitionpb.NewMessage {
	m := pt.Msg(body)
	m.FilterView = &partitionpb.FilterView{Subject: subject, Properties: map[string]*placementpb.RuleValue{
		"color": {Value: &placementpb.RuleValue_StringValue{StringValue: color}},
		"n":     {Value: &placementpb.RuleValue_LongValue{LongValue: n}},
	}}
	return m
}

func bodiesOf(t *testing.T, d *pt.Driver, id uint64, sub partitionpb.SubQueue) string {
	t.Helper()
	r := d.OK(pt.ReceiveAndDelete(id, 0, sub, 100))
	var out []string
	for _, m := range r.Messages {
		out = append(out, string(m.Bare))
	}
	return strings.Join(out, " ")
}

func TestTopicFanOut(t *testing.T) {
	d := pt.NewDriver(t, 1000)
	for _, c := range topicConfigs() {
		d.OK(pt.Upsert(c))
	}
	r := d.OK(pt.Enqueue(10, 0,
		topicMsg("a", "red", 3, ""),
		topicMsg("b", "blue", 3, "hot"),
		topicMsg("c", "red", 5, "hot"),
		topicMsg("d", "red", 1, "")))
	if len(r.SequenceNumbers) != 4 {
		t.Fatalf("sequence numbers %v, want one per message", r.SequenceNumbers)
	}
	if s := d.Stats(10, 0); s.ActiveMessages != 0 {
		t.Fatalf("the topic keeps %d messages, want none", s.ActiveMessages)
	}
	main, dlq := partitionpb.SubQueue_SUB_QUEUE_MAIN, partitionpb.SubQueue_SUB_QUEUE_DEAD_LETTER
	for _, c := range []struct {
		id   uint64
		sub  partitionpb.SubQueue
		want string
	}{
		{11, main, "a b c d"},
		{12, main, "a b c c"}, // c matches both rules: two copies
		{13, main, ""},
		{13, dlq, ""},
		{14, main, ""},
		{14, dlq, "a b c d"}, // evaluation error, dead-lettered as the subscription says
	} {
		if got := bodiesOf(t, d, c.id, c.sub); got != c.want {
			t.Errorf("entity %d %v: %q, want %q", c.id, c.sub, got, c.want)
		}
	}

	// Nothing matches: accepted, dropped.
	d.OK(pt.Delete(11, 0))
	d.OK(pt.Delete(14, 0))
	if r := d.OK(pt.Enqueue(10, 0, topicMsg("e", "blue", 0, ""))); len(r.SequenceNumbers) != 1 {
		t.Fatalf("send matching nothing: %v", r)
	}
	if got := bodiesOf(t, d, 12, main); got != "" {
		t.Fatalf("red got %q", got)
	}

	// A rule's action changes its copy only: what it changed goes with the
	// copy, for the front-end to write over the bare message.
	cfg := topicConfigs()[2]
	cfg.Rules[0].Action = &placementpb.SqlRuleAction{Expression: "SET n = n * 10; SET sys.To = 'x'; REMOVE color; SET id = newid()"}
	d.OK(pt.Upsert(cfg))
	d.OK(pt.Enqueue(10, 0, topicMsg("f", "blue", 0, "hot"), topicMsg("g", "red", 9, "")))
	r = d.OK(pt.ReceiveAndDelete(12, 0, main, 10))
	if len(r.Messages) != 2 || r.Messages[0].ActionSet != nil || r.Messages[0].ActionRemoved != nil {
		t.Fatalf("copies %v: want f untouched (its rule has no action), then g", r.Messages)
	}
	g := r.Messages[1]
	if string(g.Bare) != "g" || g.ActionSet.GetTo() != "x" || g.ActionSet.Properties["n"].GetLongValue() != 90 ||
		len(g.ActionSet.Properties["id"].GetStringValue()) != 36 || strings.Join(g.ActionRemoved, ",") != "color" {
		t.Fatalf("g changed by the action: %v", g)
	}
	// Cancelling a message scheduled on a topic is refused, not ignored.
	if r := d.Do(pt.CancelScheduled(10, 0, 1)); r.Code != partitionpb.ResultCode_RESULT_INVALID ||
		!strings.Contains(r.Description, "not implemented") {
		t.Fatalf("cancel scheduled on a topic: %v %s", r.Code, r.Description)
	}

	// A rule that does not compile is refused with the config.
	bad := topicConfigs()[1]
	bad.Rules[0] = &placementpb.Rule{Name: "x", Filter: &placementpb.Rule_SqlFilter{SqlFilter: &placementpb.SqlFilter{Expression: "a = "}}}
	if r := d.Do(pt.Upsert(bad)); r.Code != partitionpb.ResultCode_RESULT_INVALID {
		t.Fatalf("upsert of a rule that does not compile: %v", r.Code)
	}
}
