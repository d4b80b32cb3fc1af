package node_test

import (
	"testing"

	"github.com/quorumbus/quorumbus/node"
	"github.com/quorumbus/quorumbus/node/nodetest"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// TestLeaderPlansTopicSends: the leader's proposer evaluates the rules of
// a send to a topic as it builds the batch, and the entry carries the
// outcome for the replicas (partition/plan.go), which copy as it says.
func TestLeaderPlansTopicSends(t *testing.T) {
	c := nodetest.StartCluster(t, 3, group)
	cl := c.Client(group)
	const topic, all, red = 50, 51, 52
	for _, cfg := range []*partitionpb.EntityConfig{
		{EntityId: topic, Name: "t", Kind: placementpb.EntityKind_ENTITY_KIND_TOPIC},
		{EntityId: all, Name: "t/Subscriptions/all", Kind: placementpb.EntityKind_ENTITY_KIND_SUBSCRIPTION, TopicId: topic,
			Rules: []*placementpb.Rule{{Name: "$Default", Filter: &placementpb.Rule_TrueFilter{TrueFilter: true}}}},
		{EntityId: red, Name: "t/Subscriptions/red", Kind: placementpb.EntityKind_ENTITY_KIND_SUBSCRIPTION, TopicId: topic,
			Rules: []*placementpb.Rule{{Name: "red", Filter: &placementpb.Rule_SqlFilter{SqlFilter: &placementpb.SqlFilter{Expression: "color = 'red'"}}}}},
	} {
		if _, err := cl.UpsertEntity(ctxFor(t), &partitionpb.UpsertEntityRequest{Config: cfg}); err != nil {
			t.Fatalf("UpsertEntity %s: %v", cfg.Name, err)
		}
	}
	msg := func(id, color string) *partitionpb.NewMessage {
		return &partitionpb.NewMessage{MessageId: id, Bare: []byte(id), FilterView: &partitionpb.FilterView{
			Properties: map[string]*placementpb.RuleValue{"color": {Value: &placementpb.RuleValue_StringValue{StringValue: color}}}}}
	}
	resp, err := cl.Send(ctxFor(t), &partitionpb.SendRequest{EntityId: topic, Messages: []*partitionpb.NewMessage{msg("r", "red"), msg("b", "blue")}})
	if err != nil || resp.Result.Code != partitionpb.ResultCode_RESULT_OK {
		t.Fatalf("Send: %v %v", resp, err)
	}
	for id, want := range map[uint64]int{all: 2, red: 1} {
		r, err := cl.Receive(ctxFor(t), &partitionpb.ReceiveRequest{EntityId: id, MaxCount: 10, ReceiveAndDelete: true})
		if err != nil || len(r.Result.Messages) != want {
			t.Fatalf("entity %d: received %v, %v; want %d messages", id, r, err, want)
		}
	}

	batches, err := node.LogBatches(c.Node(c.Leader(group)), group)
	if err != nil {
		t.Fatal(err)
	}
	var plans []*partitionpb.TopicPlan
	for _, b := range batches {
		for _, p := range b.TopicPlans {
			if b.Commands[p.Command].GetEnqueue().GetEntityId() != topic || p.NowMs != b.NowMs {
				t.Fatalf("plan %v in a batch at %d of %v", p, b.NowMs, b.Commands)
			}
			plans = append(plans, p)
		}
	}
	// The rules in copy order: all's $Default (bit 0), red's (bit 1).
	if len(plans) != 1 || len(plans[0].Matched) != 2 || plans[0].Matched[0][0] != 0b11 || plans[0].Matched[1][0] != 0b01 {
		t.Fatalf("plans in the log: %v; want one, red matching both rules, blue the first", plans)
	}
}
