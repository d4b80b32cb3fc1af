package workload

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quorumbus/quorumbus/proto/placementpb"
	"github.com/quorumbus/quorumbus/tests/jepsen/history"
)

// The topic metadata workload: topics, their subscriptions and a rule on
// each, created, deleted and read through PlacementService, so that the
// catalog's dependent changes (a subscription needs its topic; deleting
// a topic deletes its subscriptions and their rules) are checked for
// linearizability too (checker.TopicCatalogLinearizable).

// Attrs of a topic metadata operation: the family (a topic and its
// subscriptions, checked on its own), which subscription, and what an ok
// answered.
const (
	AttrFamily = "family"
	AttrSub    = "sub"
	AttrResult = "result"
)

// TopicMetadataRule is the one rule the workload adds and removes.
const TopicMetadataRule = "r"

// topicMetadataOps are drawn from evenly: creates and rule additions
// twice as often as deletes, so that families spend most of their time
// with a topic and subscriptions for the rules to act on.
var topicMetadataOps = []string{history.CreateTopic, history.CreateTopic, history.DeleteTopic, history.GetTopic,
	history.CreateSub, history.CreateSub, history.DeleteSub, history.GetSub, history.AddRule, history.AddRule, history.RemoveRule}

// StartTopicMetadata starts cfg.Clients clients over cfg.Names as topic
// families; Interval, Generation and OpTimeout as for StartMetadata.
func StartTopicMetadata(ctx context.Context, cfg MetadataConfig) *Metadata {
	ctx, cancel := context.WithCancel(ctx)
	md := &Metadata{cancel: cancel, start: time.Now()}
	for i := range cfg.Clients {
		p := 750 + i
		rng := rand.New(rand.NewPCG(cfg.Seed, uint64(p)))
		md.wg.Add(1)
		go func() { defer md.wg.Done(); md.topicClient(ctx, cfg, p, i%len(cfg.Placement.Addrs), rng) }()
	}
	return md
}

// topicClient draws operations on a family's topic, subscriptions and
// rules (topicMetadataOps).
func (md *Metadata) topicClient(ctx context.Context, cfg MetadataConfig, p, node int, rng *rand.Rand) {
	md.run(ctx, cfg, p, node, history.TopicCatalog, func(family string) catalogOp {
		f := topicMetadataOps[rng.IntN(len(topicMetadataOps))]
		sub := rng.IntN(history.TopicFamilySubs)
		return catalogOp{f: f,
			attrs: func() map[string]string {
				return map[string]string{AttrFamily: family, AttrSub: fmt.Sprint(sub)}
			},
			call: func(ctx context.Context, c placementpb.PlacementServiceClient) error {
				return topicMetadataCall(ctx, c, f, family, SubscriptionPath(family, fmt.Sprintf("s%d", sub)))
			},
			outcome: func(err error) (history.Type, string) { return topicMetadataOutcome(f, err) },
		}
	}, rng)
}

func topicMetadataCall(ctx context.Context, c placementpb.PlacementServiceClient, f, topic, sub string) error {
	var err error
	switch f {
	case history.CreateTopic:
		_, err = c.CreateEntity(ctx, &placementpb.CreateEntityRequest{Name: topic, Kind: placementpb.EntityKind_ENTITY_KIND_TOPIC})
	case history.DeleteTopic:
		_, err = c.DeleteEntity(ctx, &placementpb.DeleteEntityRequest{Name: topic})
	case history.GetTopic:
		_, err = c.GetEntity(ctx, &placementpb.GetEntityRequest{Name: topic})
	case history.CreateSub:
		_, err = c.CreateEntity(ctx, &placementpb.CreateEntityRequest{Name: sub, Kind: placementpb.EntityKind_ENTITY_KIND_SUBSCRIPTION})
	case history.DeleteSub:
		_, err = c.DeleteEntity(ctx, &placementpb.DeleteEntityRequest{Name: sub})
	case history.GetSub:
		_, err = c.GetEntity(ctx, &placementpb.GetEntityRequest{Name: sub})
	case history.AddRule:
		_, err = c.AddRule(ctx, &placementpb.AddRuleRequest{Subscription: sub,
			Rule: &placementpb.Rule{Name: TopicMetadataRule, Filter: &placementpb.Rule_SqlFilter{SqlFilter: &placementpb.SqlFilter{Expression: "1=1"}}}})
	case history.RemoveRule:
		_, err = c.RemoveRule(ctx, &placementpb.RemoveRuleRequest{Subscription: sub, RuleName: TopicMetadataRule})
	}
	return err
}

// topicMetadataOutcome maps a call's error to the history. The answers:
// created/exists, deleted/absent, found/absent, and no-topic for a
// subscription created under a topic that is not there. Refusals that
// certainly changed nothing are fail, a read without an answer too; any
// other change without an answer is info.
func topicMetadataOutcome(f string, err error) (history.Type, string) {
	code := status.Code(err)
	read := f == history.GetTopic || f == history.GetSub
	switch {
	case err == nil:
		switch f {
		case history.CreateTopic, history.CreateSub, history.AddRule:
			return history.OK, "created"
		case history.DeleteTopic, history.DeleteSub, history.RemoveRule:
			return history.OK, "deleted"
		}
		return history.OK, "found"
	case code == codes.AlreadyExists && (f == history.CreateTopic || f == history.CreateSub || f == history.AddRule):
		return history.OK, "exists"
	case code == codes.NotFound && f == history.CreateSub:
		return history.OK, "no-topic"
	case code == codes.NotFound && f != history.CreateTopic:
		return history.OK, "absent"
	case read, code == codes.InvalidArgument, code == codes.PermissionDenied, code == codes.Unimplemented:
		return history.Fail, ""
	default:
		return history.Info, ""
	}
}

// TopicMetadataNames are n topic family names.
func TopicMetadataNames(n int) []string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf("jepsen-mt-%d", i))
	}
	return out
}
