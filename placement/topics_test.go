package placement_test

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/quorumbus/quorumbus/placement/placementtest"
	pb "github.com/quorumbus/quorumbus/proto/placementpb"
)

// TestTopicsSubscriptionsRules drives topics, subscriptions and rules
// through PlacementService on a three-member meta group, through a
// follower (forwarded to the leader) as a CLI would.
func TestTopicsSubscriptionsRules(t *testing.T) {
	c := placementtest.Start(t, placementtest.Options{})
	leader := c.Leader(t)
	waitGroups(t, leader, 3)
	var m *placementtest.Member
	for _, x := range c.Up() {
		if x != leader {
			m = x
		}
	}
	topic := createRetrying(t, m, &pb.CreateEntityRequest{Name: "orders", Kind: pb.EntityKind_ENTITY_KIND_TOPIC,
		Properties: &pb.QueueProperties{PartitionCount: 4}})
	sub := createRetrying(t, m, &pb.CreateEntityRequest{Name: "orders/Subscriptions/all", Kind: pb.EntityKind_ENTITY_KIND_SUBSCRIPTION,
		Properties: &pb.QueueProperties{LockDurationMs: 30_000, DeadLetteringOnFilterEvaluationExceptions: proto.Bool(false)}})
	if len(sub.PartitionGroups) != 4 || !equal(sub.PartitionGroups, topic.PartitionGroups) {
		t.Fatalf("subscription on groups %v, topic on %v", sub.PartitionGroups, topic.PartitionGroups)
	}
	if sub.Properties.DeadLetteringOnFilterEvaluationExceptions == nil || *sub.Properties.DeadLetteringOnFilterEvaluationExceptions {
		t.Errorf("DeadLetteringOnFilterEvaluationExceptions: %v, want false as created", sub.Properties.DeadLetteringOnFilterEvaluationExceptions)
	}
	if len(sub.Rules) != 1 || sub.Rules[0].Name != "$Default" || !sub.Rules[0].GetTrueFilter() {
		t.Fatalf("rules %v, want $Default", sub.Rules)
	}
	red := createRetrying(t, m, &pb.CreateEntityRequest{Name: "orders/Subscriptions/red", Kind: pb.EntityKind_ENTITY_KIND_SUBSCRIPTION,
		Rules: []*pb.Rule{{Name: "red", Filter: &pb.Rule_SqlFilter{SqlFilter: &pb.SqlFilter{Expression: "color = 'red'"}}}}})
	if !red.Properties.GetDeadLetteringOnFilterEvaluationExceptions() {
		t.Errorf("DeadLetteringOnFilterEvaluationExceptions unset: %v, want Azure's default, true", red.Properties)
	}
	if len(red.Rules) != 1 || red.Rules[0].Name != "red" {
		t.Fatalf("rules %v, want only red", red.Rules)
	}

	var rule *pb.Rule
	if _, err := retry(t, func(ctx context.Context) (err error) {
		rule, err = m.Client.AddRule(ctx, &pb.AddRuleRequest{Subscription: "ORDERS/subscriptions/ALL", Rule: &pb.Rule{
			Name: "big", Filter: &pb.Rule_SqlFilter{SqlFilter: &pb.SqlFilter{Expression: "quantity > 100"}},
			Action: &pb.SqlRuleAction{Expression: "SET sys.Label = 'big'"},
		}})
		return err
	}); err != nil || rule.Name != "big" || rule.CreatedAtMs == 0 {
		t.Fatalf("AddRule: %v, %v", rule, err)
	}

	for _, tt := range []struct {
		name string
		call func(context.Context, pb.PlacementServiceClient) error
		code codes.Code
		msg  string
	}{
		{"filter that does not parse", func(ctx context.Context, c pb.PlacementServiceClient) error {
			_, err := c.AddRule(ctx, &pb.AddRuleRequest{Subscription: "orders/Subscriptions/all", Rule: &pb.Rule{
				Name: "bad", Filter: &pb.Rule_SqlFilter{SqlFilter: &pb.SqlFilter{Expression: "color = = 'red'"}}}})
			return err
		}, codes.InvalidArgument, "position 9"},
		{"duplicate rule name", func(ctx context.Context, c pb.PlacementServiceClient) error {
			_, err := c.AddRule(ctx, &pb.AddRuleRequest{Subscription: "orders/Subscriptions/all", Rule: &pb.Rule{
				Name: "BIG", Filter: &pb.Rule_TrueFilter{TrueFilter: true}}})
			return err
		}, codes.AlreadyExists, "rule name taken"},
		{"rule on a missing subscription", func(ctx context.Context, c pb.PlacementServiceClient) error {
			_, err := c.AddRule(ctx, &pb.AddRuleRequest{Subscription: "orders/Subscriptions/nope", Rule: &pb.Rule{
				Name: "x", Filter: &pb.Rule_TrueFilter{TrueFilter: true}}})
			return err
		}, codes.NotFound, "not found"},
		{"remove a missing rule", func(ctx context.Context, c pb.PlacementServiceClient) error {
			_, err := c.RemoveRule(ctx, &pb.RemoveRuleRequest{Subscription: "orders/Subscriptions/all", RuleName: "nope"})
			return err
		}, codes.NotFound, "rule not found"},
		{"subscription of a missing topic", func(ctx context.Context, c pb.PlacementServiceClient) error {
			_, err := c.CreateEntity(ctx, &pb.CreateEntityRequest{Name: "nope/Subscriptions/s", Kind: pb.EntityKind_ENTITY_KIND_SUBSCRIPTION})
			return err
		}, codes.NotFound, "topic"},
		{"subscription asking for partitions", func(ctx context.Context, c pb.PlacementServiceClient) error {
			_, err := c.CreateEntity(ctx, &pb.CreateEntityRequest{Name: "orders/Subscriptions/p", Kind: pb.EntityKind_ENTITY_KIND_SUBSCRIPTION,
				Properties: &pb.QueueProperties{PartitionCount: 2}})
			return err
		}, codes.InvalidArgument, "partitioning of its topic"},
		{"list a missing topic's subscriptions", func(ctx context.Context, c pb.PlacementServiceClient) error {
			_, err := c.ListEntities(ctx, &pb.ListEntitiesRequest{Kind: pb.EntityKind_ENTITY_KIND_SUBSCRIPTION, Topic: "nope"})
			return err
		}, codes.NotFound, "topic \"nope\""},
		{"list queues of a topic", func(ctx context.Context, c pb.PlacementServiceClient) error {
			_, err := c.ListEntities(ctx, &pb.ListEntitiesRequest{Kind: pb.EntityKind_ENTITY_KIND_QUEUE, Topic: "orders"})
			return err
		}, codes.InvalidArgument, "a topic names subscriptions"},
		{"topic with a lock duration", func(ctx context.Context, c pb.PlacementServiceClient) error {
			_, err := c.CreateEntity(ctx, &pb.CreateEntityRequest{Name: "t2", Kind: pb.EntityKind_ENTITY_KIND_TOPIC,
				Properties: &pb.QueueProperties{LockDurationMs: 5000}})
			return err
		}, codes.InvalidArgument, "LockDuration"},
	} {
		_, err := retry(t, func(ctx context.Context) error { return tt.call(ctx, m.Client) })
		if status.Code(err) != tt.code || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("%s: %v, want %v with %q", tt.name, err, tt.code, tt.msg)
		}
	}

	if _, err := retry(t, func(ctx context.Context) error {
		_, err := m.Client.RemoveRule(ctx, &pb.RemoveRuleRequest{Subscription: "orders/Subscriptions/all", RuleName: "$default"})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	var got *pb.Entity
	if _, err := retry(t, func(ctx context.Context) (err error) {
		got, err = m.Client.GetEntity(ctx, &pb.GetEntityRequest{Name: "orders/Subscriptions/all"})
		return err
	}); err != nil || len(got.Rules) != 1 || got.Rules[0].Name != "big" || got.Rules[0].Action.GetExpression() != "SET sys.Label = 'big'" {
		t.Fatalf("after removing $Default: %v, %v", got, err)
	}

	// A topic's subscriptions list by name, in pages, through a follower.
	for _, tc := range []struct {
		skip, top uint32
		want      []string
	}{
		{0, 0, []string{"orders/Subscriptions/all", "orders/Subscriptions/red"}},
		{1, 1, []string{"orders/Subscriptions/red"}},
		{0, 1, []string{"orders/Subscriptions/all"}},
		{2, 1, nil},
	} {
		var list *pb.ListEntitiesResponse
		if _, err := retry(t, func(ctx context.Context) (err error) {
			list, err = m.Client.ListEntities(ctx, &pb.ListEntitiesRequest{Kind: pb.EntityKind_ENTITY_KIND_SUBSCRIPTION, Topic: "ORDERS", Skip: tc.skip, Top: tc.top})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range list.Entities {
			got = append(got, e.Name)
		}
		if strings.Join(got, " ") != strings.Join(tc.want, " ") {
			t.Errorf("subscriptions of orders, skip %d top %d: %v, want %v", tc.skip, tc.top, got, tc.want)
		}
	}

	// The subscriptions of several topics at once (a page of topics), in
	// the order of the topics named; a name that is no topic gives none.
	var several *pb.ListEntitiesResponse
	if _, err := retry(t, func(ctx context.Context) (err error) {
		several, err = m.Client.ListEntities(ctx, &pb.ListEntitiesRequest{Kind: pb.EntityKind_ENTITY_KIND_SUBSCRIPTION, Topics: []string{"nope", "Orders"}})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range several.Entities {
		names = append(names, e.Name)
	}
	if strings.Join(names, " ") != "orders/Subscriptions/all orders/Subscriptions/red" {
		t.Errorf("subscriptions of nope and Orders: %v", names)
	}
	for _, bad := range []*pb.ListEntitiesRequest{
		{Kind: pb.EntityKind_ENTITY_KIND_QUEUE, Topics: []string{"orders"}},
		{Kind: pb.EntityKind_ENTITY_KIND_SUBSCRIPTION, Topics: []string{"orders"}, Top: 1},
		{Kind: pb.EntityKind_ENTITY_KIND_SUBSCRIPTION, Topics: []string{"orders"}, Topic: "orders"},
	} {
		_, err := retry(t, func(ctx context.Context) error {
			_, err := m.Client.ListEntities(ctx, bad)
			return err
		})
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("ListEntities %v: %v, want InvalidArgument", bad, err)
		}
	}

	// Deleting the topic deletes its subscriptions.
	if _, err := retry(t, func(ctx context.Context) error {
		_, err := m.Client.DeleteEntity(ctx, &pb.DeleteEntityRequest{Name: "orders"})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	var list *pb.ListEntitiesResponse
	if _, err := retry(t, func(ctx context.Context) (err error) {
		list, err = m.Client.ListEntities(ctx, &pb.ListEntitiesRequest{Kind: pb.EntityKind_ENTITY_KIND_SUBSCRIPTION})
		return err
	}); err != nil || len(list.Entities) != 0 {
		t.Fatalf("subscriptions after deleting the topic: %v, %v", list, err)
	}
}

func equal(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
