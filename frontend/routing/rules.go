package routing

import (
	"context"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quorumbus/quorumbus/frontend"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

var _ frontend.RuleBackend = (*Router)(nil)

// AddRule implements frontend.RuleBackend through PlacementService, as the
// admin API adds rules.
func (r *Router) AddRule(ctx context.Context, subscription string, rule *placementpb.Rule) error {
	return r.catalogCall(ctx, subscription, frontend.ErrEntityNotFound, func(c placementpb.PlacementServiceClient) error {
		_, err := c.AddRule(ctx, &placementpb.AddRuleRequest{Subscription: subscription, Rule: rule})
		return err
	})
}

// RemoveRule implements frontend.RuleBackend. The subscription was found
// before the call, so NOT_FOUND names the rule.
func (r *Router) RemoveRule(ctx context.Context, subscription, name string) error {
	return r.catalogCall(ctx, subscription, frontend.ErrRuleNotFound, func(c placementpb.PlacementServiceClient) error {
		_, err := c.RemoveRule(ctx, &placementpb.RemoveRuleRequest{Subscription: subscription, RuleName: name})
		return err
	})
}

// Rules implements frontend.RuleBackend: the committed catalog's rules,
// not the routing table's, which may lag a change made a moment ago.
func (r *Router) Rules(ctx context.Context, subscription string) ([]*placementpb.Rule, error) {
	var rules []*placementpb.Rule
	err := r.catalogCall(ctx, subscription, frontend.ErrEntityNotFound, func(c placementpb.PlacementServiceClient) error {
		e, err := c.GetEntity(ctx, &placementpb.GetEntityRequest{Name: subscription})
		rules = e.GetRules()
		return err
	})
	return rules, err
}

// catalogCall runs call against the placement members in turn until one
// answers (any member forwards to the meta leader). The catalog's refusals
// become the front-end's errors; a member that cannot answer now is
// skipped, and when none can the catalog is unavailable (retriable).
func (r *Router) catalogCall(ctx context.Context, subscription string, notFound error, call func(placementpb.PlacementServiceClient) error) error {
	var lastErr error
	for _, addr := range r.cfg.Placement {
		cc, err := r.conn(addr)
		if err != nil {
			lastErr = err
			continue
		}
		err = call(placementpb.NewPlacementServiceClient(cc))
		switch status.Code(err) {
		case codes.OK:
			return nil
		case codes.NotFound:
			return fmt.Errorf("%w: %s", notFound, status.Convert(err).Message())
		case codes.AlreadyExists:
			return fmt.Errorf("%w: %s", frontend.ErrRuleExists, status.Convert(err).Message())
		case codes.InvalidArgument, codes.ResourceExhausted, codes.OutOfRange:
			return fmt.Errorf("%w: %s", frontend.ErrInvalid, status.Convert(err).Message())
		}
		lastErr = err
		if ctx.Err() != nil {
			break
		}
	}
	return fmt.Errorf("%w: rules of %s: %v", frontend.ErrCatalogUnavailable, subscription, lastErr)
}
