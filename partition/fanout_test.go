package partition_test

import (
	"strings"
	"testing"

	"github.com/quorumbus/quorumbus/partition"
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

	// A rule that does not compile is refused with the config.
	bad := topicConfigs()[1]
	bad.Rules[0] = &placementpb.Rule{Name: "x", Filter: &placementpb.Rule_SqlFilter{SqlFilter: &placementpb.SqlFilter{Expression: "a = "}}}
	if r := d.Do(pt.Upsert(bad)); r.Code != partitionpb.ResultCode_RESULT_INVALID {
		t.Fatalf("upsert of a rule that does not compile: %v", r.Code)
	}
}

// TestTopicCancelScheduled: a message scheduled on a topic is cancelled by
// the topic sequence number its send answered: its copies still scheduled
// leave every subscription; other scheduled messages stay; records whose
// time has come are pruned by later sends.
func TestTopicCancelScheduled(t *testing.T) {
	d := pt.NewDriver(t, 1000)
	for _, c := range topicConfigs() {
		d.OK(pt.Upsert(c))
	}
	d.OK(pt.Delete(14, 0))
	sched := func(body, color string, n int64, subject string, at int64) *partitionpb.NewMessage {
		m := topicMsg(body, color, n, subject)
		m.ScheduledEnqueueTimeMs = at
		return m
	}
	// a: all and red (two copies); b: all; c: all and red, later.
	r := d.OK(pt.Enqueue(10, 0, sched("a", "red", 5, "hot", 5000), sched("b", "blue", 0, "", 5000), sched("c", "red", 5, "", 9000)))
	if n, err := partition.TopicScheduledEntries(d.M, 10, 0); err != nil || n != 3 {
		t.Fatalf("%d records, %v; want 3", n, err)
	}
	// A number of another partition, and one that names nothing, are
	// ignored.
	d.OK(pt.CancelScheduled(10, 0, r.SequenceNumbers[0], r.SequenceNumbers[1], 1<<48|1, 999))
	if s := d.Stats(11, 0); s.ScheduledMessages != 1 {
		t.Fatalf("all holds %d scheduled, want 1 (c)", s.ScheduledMessages)
	}
	if s := d.Stats(12, 0); s.ScheduledMessages != 1 {
		t.Fatalf("red holds %d scheduled, want 1 (c)", s.ScheduledMessages)
	}
	if n, err := partition.TopicScheduledEntries(d.M, 10, 0); err != nil || n != 1 {
		t.Fatalf("%d records after the cancel, %v; want 1", n, err)
	}
	// c comes due and is activated; cancelling it then removes nothing,
	// and the next send prunes its record.
	d.Now = 10_000
	d.OK(pt.ActivateScheduled())
	d.OK(pt.CancelScheduled(10, 0, r.SequenceNumbers[2]))
	if got := bodiesOf(t, d, 11, partitionpb.SubQueue_SUB_QUEUE_MAIN); got != "c" {
		t.Fatalf("all holds %q, want c", got)
	}
	d.OK(pt.Enqueue(10, 0, sched("d", "blue", 0, "", 20_000)))
	d.Now = 30_000
	d.OK(pt.Enqueue(10, 0, topicMsg("e", "blue", 0, "")))
	if n, err := partition.TopicScheduledEntries(d.M, 10, 0); err != nil || n != 0 {
		t.Fatalf("%d records after their time, %v; want 0", n, err)
	}
}

// TestTopicFormat: a send to a topic (a message with a filter view) that
// is forwarded, staged or scheduled is written in format 7, so that a
// replica of a version that refused or did not index it stops; a plain
// one keeps its old format.
func TestTopicFormat(t *testing.T) {
	for _, c := range []struct {
		name string
		m    func(*partitionpb.NewMessage)
		want byte
	}{
		{"plain", func(*partitionpb.NewMessage) {}, partition.FormatV1},
		{"forwarded", func(m *partitionpb.NewMessage) { m.Forwarded = &partitionpb.ForwardOrigin{Hops: 1} }, partition.FormatV7},
		{"staged", func(m *partitionpb.NewMessage) { m.StagedLength = 1 }, partition.FormatV7},
		{"scheduled", func(m *partitionpb.NewMessage) { m.ScheduledEnqueueTimeMs = 5 }, partition.FormatV7},
		{"scheduled to a queue", func(m *partitionpb.NewMessage) { m.FilterView = nil; m.ScheduledEnqueueTimeMs = 5 }, partition.FormatV1},
	} {
		m := topicMsg("a", "red", 1, "")
		c.m(m)
		data, err := partition.EncodeBatch(&partitionpb.Batch{Commands: []*partitionpb.Command{pt.Enqueue(10, 0, m)}})
		if err != nil || data[0] != c.want {
			t.Errorf("%s: format %d, %v; want %d", c.name, data[0], err, c.want)
		}
	}
}
