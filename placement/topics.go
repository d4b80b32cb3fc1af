package placement

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/quorumbus/quorumbus/placement/catalog"
	pb "github.com/quorumbus/quorumbus/proto/placementpb"
)

// createSubscription places a subscription on its topic's partition
// groups, partition for partition: a send to a topic partition then
// reaches every subscription in one Raft group, so its fan-out is one
// entry. The catalog checks the placement again when it applies, so a
// topic deleted or recreated meanwhile is caught there.
func (s *Service) createSubscription(ctx context.Context, req *pb.CreateEntityRequest) (*pb.Entity, error) {
	if req.Properties.GetPartitionCount() != 0 || req.Properties.GetEnablePartitioning() {
		return nil, fmt.Errorf("%w: a subscription has the partitioning of its topic", catalog.ErrInvalidProperties)
	}
	topicName, _, ok := catalog.SplitSubscriptionName(req.Name)
	if !ok {
		return nil, fmt.Errorf("%w: %q: a subscription is named <topic>/Subscriptions/<name>", catalog.ErrInvalidName, req.Name)
	}
	var topic *pb.Entity
	s.fsm.Read(func(st *catalog.State) { topic = st.Entity(topicName) })
	if topic == nil || topic.Kind != pb.EntityKind_ENTITY_KIND_TOPIC {
		return nil, fmt.Errorf("%w: topic %q of subscription %q", catalog.ErrNotFound, topicName, req.Name)
	}
	props := &pb.QueueProperties{}
	if req.Properties != nil {
		props = proto.Clone(req.Properties).(*pb.QueueProperties)
	}
	props.PartitionCount = topic.Properties.GetPartitionCount()
	props, err := catalog.Normalize(props)
	if err != nil {
		return nil, err
	}
	res, err := s.propose(ctx, &pb.CatalogCommand{Op: &pb.CatalogCommand_CreateEntity{CreateEntity: &pb.CreateEntityCommand{
		Name: req.Name, Kind: req.Kind, Properties: props, Status: req.Status,
		PartitionGroups: topic.PartitionGroups, Rules: req.Rules,
	}}})
	if err != nil {
		return nil, err
	}
	return res.Entity, nil
}

// AddRule adds a rule to a subscription. The filter and action are
// checked when the rule applies; one that does not compile is refused
// with INVALID_ARGUMENT and the position of the error.
func (s *Service) AddRule(ctx context.Context, req *pb.AddRuleRequest) (*pb.Rule, error) {
	if resp, handled, err := forward(ctx, s, req, pb.PlacementServiceClient.AddRule); handled {
		return resp, err
	}
	return s.proposeRule(ctx, req, "added", &pb.CatalogCommand{Op: &pb.CatalogCommand_AddRule{AddRule: &pb.AddRuleCommand{
		Subscription: req.Subscription, Rule: req.Rule,
	}}})
}

// proposeRule proposes a command that puts req's rule on its subscription
// and returns the rule as the catalog then holds it.
func (s *Service) proposeRule(ctx context.Context, req *pb.AddRuleRequest, done string, cmd *pb.CatalogCommand) (*pb.Rule, error) {
	res, err := s.propose(ctx, cmd)
	if err != nil {
		return nil, s.status(err)
	}
	for _, r := range res.Entity.GetRules() {
		if catalog.Key(r.Name) == catalog.Key(req.Rule.GetName()) {
			return r, nil
		}
	}
	return nil, s.status(fmt.Errorf("%w: rule %q missing after it was %s", catalog.ErrInvalidCommand, req.Rule.GetName(), done))
}

// ReplaceRule replaces a subscription's rule of the same name in one
// catalog command (the admin API's rule update).
func (s *Service) ReplaceRule(ctx context.Context, req *pb.AddRuleRequest) (*pb.Rule, error) {
	if resp, handled, err := forward(ctx, s, req, pb.PlacementServiceClient.ReplaceRule); handled {
		return resp, err
	}
	return s.proposeRule(ctx, req, "replaced", &pb.CatalogCommand{Op: &pb.CatalogCommand_ReplaceRule{ReplaceRule: &pb.ReplaceRuleCommand{
		Subscription: req.Subscription, Rule: req.Rule,
	}}})
}

// RemoveRule removes a rule from a subscription.
func (s *Service) RemoveRule(ctx context.Context, req *pb.RemoveRuleRequest) (*pb.RemoveRuleResponse, error) {
	if resp, handled, err := forward(ctx, s, req, pb.PlacementServiceClient.RemoveRule); handled {
		return resp, err
	}
	_, err := s.propose(ctx, &pb.CatalogCommand{Op: &pb.CatalogCommand_RemoveRule{RemoveRule: &pb.RemoveRuleCommand{
		Subscription: req.Subscription, RuleName: req.RuleName,
	}}})
	if err != nil {
		return nil, s.status(err)
	}
	return &pb.RemoveRuleResponse{}, nil
}
