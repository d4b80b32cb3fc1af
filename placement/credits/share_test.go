package credits

import (
	"fmt"
	"testing"
)

// TestSpendersShares: whatever live front-ends and gateways there are,
// the credits a second of them all add up to the budget (less what
// rounding down leaves), never more; gateways together get GatewaysPart
// while both kinds are live, and a kind alone gets all of it.
func TestSpendersShares(t *testing.T) {
	const budget = 1000
	perSecond := func(share float64) int64 {
		return New(Config{Budget: budget, Share: func() float64 { return share }}).PerSecond()
	}
	for _, tc := range []struct {
		frontends, gateways int
		frontend, gateway   int64 // credits a second of each one
	}{
		{1, 0, 1000, 0},
		{3, 0, 333, 0},
		{1, 1, 900, 100},
		{2, 1, 450, 100},
		{2, 2, 450, 50},
		{3, 2, 300, 50},
		{10, 3, 90, 33},
		{0, 1, 0, 1000},
		{0, 4, 0, 250},
	} {
		t.Run(fmt.Sprintf("%d frontends %d gateways", tc.frontends, tc.gateways), func(t *testing.T) {
			s := Spenders{Frontends: tc.frontends, Gateways: tc.gateways}
			var fe, gw int64
			if tc.frontends > 0 {
				fe = perSecond(s.FrontendShare())
			}
			if tc.gateways > 0 {
				gw = perSecond(s.GatewayShare())
			}
			if fe != tc.frontend || gw != tc.gateway {
				t.Fatalf("a front-end spends %d a second, a gateway %d; want %d and %d", fe, gw, tc.frontend, tc.gateway)
			}
			total := int64(tc.frontends)*fe + int64(tc.gateways)*gw
			if total > budget || total < budget-int64(tc.frontends+tc.gateways) {
				t.Fatalf("together they spend %d a second of a budget of %d", total, budget)
			}
		})
	}
}

// TestSpendersCountSelf: a process that sees no member of its own kind
// (gossip not yet converged, a static count of 0) counts itself: it takes
// its kind's part, not the whole budget that the other kind alone would
// get.
func TestSpendersCountSelf(t *testing.T) {
	if got := (Spenders{Frontends: 0, Gateways: 2}).FrontendShare(); got != (1 - GatewaysPart) {
		t.Errorf("a front-end that counts none but two gateways: share %v, want %v", got, 1-GatewaysPart)
	}
	if got := (Spenders{Frontends: 3, Gateways: 0}).GatewayShare(); got != GatewaysPart {
		t.Errorf("a gateway that counts no gateway beside three front-ends: share %v, want %v", got, GatewaysPart)
	}
}
