package placement

import (
	"context"

	"github.com/quorumbus/quorumbus/placement/catalog"
	pb "github.com/quorumbus/quorumbus/proto/placementpb"
)

// PutAuthorizationRule creates or replaces a SAS rule of the namespace or
// of an entity. The keys come from the caller (the CLI generates them);
// the catalog never logs them.
func (s *Service) PutAuthorizationRule(ctx context.Context, req *pb.PutAuthorizationRuleRequest) (*pb.AuthorizationRule, error) {
	if resp, handled, err := forward(ctx, s, req, pb.PlacementServiceClient.PutAuthorizationRule); handled {
		return resp, err
	}
	res, err := s.propose(ctx, &pb.CatalogCommand{Op: &pb.CatalogCommand_PutAuthorizationRule{
		PutAuthorizationRule: &pb.PutAuthorizationRuleCommand{Rule: req.Rule, CreateOnly: req.CreateOnly},
	}})
	if err != nil {
		return nil, s.status(err)
	}
	return res.Rule, nil
}

// DeleteAuthorizationRule removes a rule. Claims granted by its keys last
// until their tokens expire, as on Azure.
func (s *Service) DeleteAuthorizationRule(ctx context.Context, req *pb.DeleteAuthorizationRuleRequest) (*pb.DeleteAuthorizationRuleResponse, error) {
	if resp, handled, err := forward(ctx, s, req, pb.PlacementServiceClient.DeleteAuthorizationRule); handled {
		return resp, err
	}
	if _, err := s.propose(ctx, &pb.CatalogCommand{Op: &pb.CatalogCommand_DeleteAuthorizationRule{DeleteAuthorizationRule: req}}); err != nil {
		return nil, s.status(err)
	}
	return &pb.DeleteAuthorizationRuleResponse{}, nil
}

// ListAuthorizationRules reads the rules on the leader, like GetEntity.
func (s *Service) ListAuthorizationRules(ctx context.Context, req *pb.ListAuthorizationRulesRequest) (*pb.ListAuthorizationRulesResponse, error) {
	if resp, handled, err := forward(ctx, s, req, pb.PlacementServiceClient.ListAuthorizationRules); handled {
		return resp, err
	}
	if err := s.verifyLeader(ctx); err != nil {
		return nil, s.status(err)
	}
	if err := s.leaderReady(ctx); err != nil {
		return nil, s.status(err)
	}
	resp := &pb.ListAuthorizationRulesResponse{}
	s.fsm.Read(func(st *catalog.State) { resp.Rules = st.AuthorizationRules(req.Entity, req.AllScopes) })
	return resp, nil
}
