package placement_test

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quorumbus/quorumbus/placement/placementtest"
	"github.com/quorumbus/quorumbus/placement/sas"
	pb "github.com/quorumbus/quorumbus/proto/placementpb"
)

// TestAuthorizationRulesThroughService: rules put through any member
// reach the catalog, its listing and the routing table front-ends watch;
// the catalog's rejections come back as gRPC codes.
func TestAuthorizationRulesThroughService(t *testing.T) {
	c := placementtest.Start(t, placementtest.Options{})
	leader := c.Leader(t)
	waitGroups(t, leader, 3)
	var follower *placementtest.Member
	for _, m := range c.Up() {
		if m != leader {
			follower = m
		}
	}
	createRetrying(t, follower, &pb.CreateEntityRequest{Name: "q"})
	w := watch(t, leader)
	put := func(m *placementtest.Member, r *pb.AuthorizationRule, createOnly bool) error {
		_, err := retry(t, func(ctx context.Context) error {
			_, err := m.Client.PutAuthorizationRule(ctx, &pb.PutAuthorizationRuleRequest{Rule: r, CreateOnly: createOnly})
			return err
		})
		return err
	}
	ns := &pb.AuthorizationRule{Name: "ops", Rights: uint32(sas.Listen | sas.Send | sas.Manage), PrimaryKey: "p1", SecondaryKey: "s1"}
	if err := put(follower, ns, true); err != nil {
		t.Fatal(err)
	}
	if err := put(leader, &pb.AuthorizationRule{Name: "reader", Entity: "Q", Rights: uint32(sas.Listen), PrimaryKey: "p2"}, true); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		err  error
		code codes.Code
	}{
		{"exists", put(follower, ns, true), codes.AlreadyExists},
		{"missing entity", put(follower, &pb.AuthorizationRule{Name: "x", Entity: "nope", Rights: 1, PrimaryKey: "k"}, false), codes.NotFound},
		{"no key", put(follower, &pb.AuthorizationRule{Name: "x", Rights: 1}, false), codes.InvalidArgument},
	} {
		if status.Code(tc.err) != tc.code {
			t.Errorf("%s: %v, want %v", tc.name, tc.err, tc.code)
		}
		if tc.err != nil && (strings.Contains(tc.err.Error(), "p1") || strings.Contains(tc.err.Error(), "s1")) {
			t.Errorf("%s: error %q carries a key", tc.name, tc.err)
		}
	}
	var list *pb.ListAuthorizationRulesResponse
	if _, err := retry(t, func(ctx context.Context) (err error) {
		list, err = follower.Client.ListAuthorizationRules(ctx, &pb.ListAuthorizationRulesRequest{Entity: "q"})
		return err
	}); err != nil || len(list.Rules) != 1 || list.Rules[0].Name != "reader" || list.Rules[0].Entity != "q" {
		t.Fatalf("rules of q: %v, %v", list, err)
	}
	placementtest.Eventually(t, wait, "both rules in the routing table", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.latest != nil && len(w.latest.AuthorizationRules) == 2
	})
	if _, err := retry(t, func(ctx context.Context) error {
		_, err := follower.Client.DeleteAuthorizationRule(ctx, &pb.DeleteAuthorizationRuleRequest{Name: "OPS"})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	placementtest.Eventually(t, wait, "the deleted rule gone from the routing table", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return len(w.latest.AuthorizationRules) == 1
	})
}
