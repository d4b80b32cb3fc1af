package cluster

import "github.com/quorumbus/quorumbus/placement/membership"

// MemberLister is what FrontendShare counts: a gossip member list.
type MemberLister interface {
	Members() []membership.Member
}

// FrontendShare is frontend.Config.ThrottleShare for a front-end that
// joined the gossip: the live front-ends as its member list sees them
// (itself included, so at least 1). Each front-end counts on its own, so
// while one joins or fails (memberlist notices a failure within a few
// seconds) their counts may differ by it, and the namespace's budget is
// over- or under-spent by that one front-end's share until they agree.
func FrontendShare(ml MemberLister) func() int { return roleShare(ml, membership.RoleFrontend) }

// GatewayShare is FrontendShare for a gateway: the live gateways, which
// share the admin API's credits (gateway.Config.Credits) as front-ends
// share theirs, with the same delay while one joins or fails.
func GatewayShare(ml MemberLister) func() int { return roleShare(ml, membership.RoleGateway) }

func roleShare(ml MemberLister, role membership.Role) func() int {
	return func() int {
		n := 0
		for _, m := range ml.Members() {
			if m.Role == role {
				n++
			}
		}
		return max(n, 1)
	}
}
