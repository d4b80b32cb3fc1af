package catalog

import (
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"

	pb "github.com/quorumbus/quorumbus/proto/placementpb"
)

// topicState is a catalog with three groups, a topic of two partitions
// and the given subscription command applied at index 4.
func topicState(t *testing.T, sub *pb.CreateEntityCommand) (*State, Result) {
	t.Helper()
	s := New()
	for i, op := range []proto.Message{
		&pb.RegisterNodes{Nodes: []*pb.Node{{Id: "n1"}, {Id: "n2"}, {Id: "n3"}}},
		&pb.CreateGroups{Groups: []*pb.NewGroup{{Replicas: []*pb.Replica{{NodeId: "n1"}}}, {Replicas: []*pb.Replica{{NodeId: "n2"}}}}},
		&pb.CreateEntityCommand{Name: "t", Kind: pb.EntityKind_ENTITY_KIND_TOPIC, Properties: &pb.QueueProperties{PartitionCount: 2}, PartitionGroups: []uint64{1, 2}},
	} {
		res, err := s.Apply(uint64(i+1), wrap(op))
		if err != nil || res.Err != nil {
			t.Fatalf("setup %d: %v %v", i, err, res.Err)
		}
	}
	res, err := s.Apply(4, wrap(sub))
	if err != nil {
		t.Fatal(err)
	}
	return s, res
}

func subscriptionCommand(rules ...*pb.Rule) *pb.CreateEntityCommand {
	return &pb.CreateEntityCommand{
		Name: SubscriptionName("t", "s"), Kind: pb.EntityKind_ENTITY_KIND_SUBSCRIPTION,
		Properties: &pb.QueueProperties{PartitionCount: 2}, PartitionGroups: []uint64{1, 2}, Rules: rules,
	}
}

func TestSubscriptionCreatedWithItsOwnRules(t *testing.T) {
	own := []*pb.Rule{
		{Name: "b", Filter: &pb.Rule_SqlFilter{SqlFilter: &pb.SqlFilter{
			Expression: "color = @c", Parameters: map[string]*pb.RuleValue{"@c": {Value: &pb.RuleValue_StringValue{StringValue: "red"}}},
		}}, Action: &pb.SqlRuleAction{Expression: "SET x = 1"}},
		{Name: "a", Filter: &pb.Rule_CorrelationFilter{CorrelationFilter: &pb.CorrelationFilter{Subject: "s"}}},
	}
	s, res := topicState(t, subscriptionCommand(own...))
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	rules := res.Entity.Rules
	if len(rules) != 2 || rules[0].Name != "a" || rules[1].Name != "b" {
		t.Fatalf("rules %v, want a and b (sorted) without $Default", rules)
	}
	// A snapshot keeps the rules, and the partitioned count leaves the
	// subscription out.
	restored, err := FromSnapshot(s.Snapshot())
	if err != nil {
		t.Fatal(err)
	}
	if got := restored.Entity("t/subscriptions/S"); !proto.Equal(got, res.Entity) {
		t.Fatalf("restored %v, want %v", got, res.Entity)
	}
	if restored.partitioned != 1 || s.partitioned != 1 {
		t.Fatalf("partitioned %d restored, %d live; want 1", restored.partitioned, s.partitioned)
	}
}

func TestSubscriptionRuleErrors(t *testing.T) {
	sqlRule := func(name, expr string) *pb.Rule {
		return &pb.Rule{Name: name, Filter: &pb.Rule_SqlFilter{SqlFilter: &pb.SqlFilter{Expression: expr}}}
	}
	for _, tc := range []struct {
		rules []*pb.Rule
		want  error
	}{
		{[]*pb.Rule{sqlRule("a", "x ="), sqlRule("b", "1=1")}, ErrInvalidRule},
		{[]*pb.Rule{sqlRule("a", "1=1"), sqlRule("A", "1=1")}, ErrRuleNameTaken},
		{[]*pb.Rule{sqlRule("a", "x = @missing")}, ErrInvalidRule},
		{[]*pb.Rule{{Name: "a", Filter: &pb.Rule_SqlFilter{SqlFilter: &pb.SqlFilter{Expression: "x = @p", Parameters: map[string]*pb.RuleValue{"p": {}}}}}}, ErrInvalidRule},
		{[]*pb.Rule{{Name: "a", Filter: &pb.Rule_TrueFilter{}}}, ErrInvalidRule},
	} {
		s, res := topicState(t, subscriptionCommand(tc.rules...))
		if !errors.Is(res.Err, tc.want) {
			t.Errorf("%v: %v, want %v", tc.rules, res.Err, tc.want)
		}
		if s.Entity(SubscriptionName("t", "s")) != nil {
			t.Errorf("%v: the subscription was created", tc.rules)
		}
	}
}

func TestSplitSubscriptionName(t *testing.T) {
	for _, tc := range []struct {
		name, topic, sub string
		ok               bool
	}{
		{"t/Subscriptions/s", "t", "s", true},
		{"a/b/subscriptions/s", "a/b", "s", true},
		{"t/Subscriptions/", "", "", false},
		{"/Subscriptions/s", "", "", false},
		{"Subscriptions/s", "", "", false},
		{"t/Subs/s", "", "", false},
		{"t", "", "", false},
	} {
		topic, sub, ok := SplitSubscriptionName(tc.name)
		if topic != tc.topic || sub != tc.sub || ok != tc.ok {
			t.Errorf("%q: %q %q %v", tc.name, topic, sub, ok)
		}
	}
}

// TestSubscriptionPartitionConfig: a subscription's partition config
// carries its kind, rules, filter-exception dead-lettering and (from the
// state) its topic's id, which the partition's fan-out needs; a topic's
// carries its kind and no topic id.
func TestSubscriptionPartitionConfig(t *testing.T) {
	rule := &pb.Rule{Name: "a", Filter: &pb.Rule_CorrelationFilter{CorrelationFilter: &pb.CorrelationFilter{Subject: "s"}}}
	s, res := topicState(t, subscriptionCommand(rule))
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	sub := res.Entity
	cfg := PartitionConfig(sub, 1)
	if cfg.Kind != pb.EntityKind_ENTITY_KIND_SUBSCRIPTION || len(cfg.Rules) != 1 || cfg.Rules[0].Name != "a" ||
		!cfg.DeadLetteringOnFilterEvaluationExceptions || cfg.TopicId != 0 {
		t.Fatalf("subscription config %v", cfg)
	}
	topic := s.Entity("t")
	if id := s.TopicID(sub); id != topic.Id || id == 0 {
		t.Fatalf("TopicID %d, want the topic's %d", id, topic.Id)
	}
	if id := s.TopicID(topic); id != 0 {
		t.Fatalf("TopicID of a topic: %d", id)
	}
	if cfg := PartitionConfig(topic, 0); cfg.Kind != pb.EntityKind_ENTITY_KIND_TOPIC || cfg.TopicId != 0 || len(cfg.Rules) != 0 {
		t.Fatalf("topic config %v", cfg)
	}
}
