package cluster

import (
	"github.com/quorumbus/quorumbus/placement/credits"
	"github.com/quorumbus/quorumbus/placement/membership"
)

// MemberLister is what LiveSpenders counts: a gossip member list.
type MemberLister interface {
	Members() []membership.Member
}

// LiveSpenders counts the front-ends and gateways in a member list: the
// processes that spend the namespace's credits (storage nodes spend
// none).
func LiveSpenders(ml MemberLister) credits.Spenders {
	var s credits.Spenders
	for _, m := range ml.Members() {
		switch m.Role {
		case membership.RoleFrontend:
			s.Frontends++
		case membership.RoleGateway:
			s.Gateways++
		}
	}
	return s
}

// FrontendShare is frontend.Config.ThrottleShare for a front-end that
// joined the gossip: its part of the namespace's budget among the live
// front-ends and gateways as its member list sees them (credits.Spenders).
// Each process counts on its own, so while one joins or fails (memberlist
// notices a failure within a few seconds) their counts may differ by it,
// and the budget is over- or under-spent by that process's share until
// they agree.
func FrontendShare(ml MemberLister) func() float64 {
	return func() float64 { return LiveSpenders(ml).FrontendShare() }
}

// GatewayShare is FrontendShare for a gateway (credits.Config.Share of its
// bucket).
func GatewayShare(ml MemberLister) func() float64 {
	return func() float64 { return LiveSpenders(ml).GatewayShare() }
}
