package cluster

import (
	"context"
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/placement/credits"
	"github.com/quorumbus/quorumbus/placement/membership"
)

// TestLiveShares: front-ends and gateways that join the storage nodes'
// gossip count each other (not the nodes) as members come and go, and
// each enforces its part of the one budget: the front-ends split what the
// gateways' part (while any is live) leaves, the gateways split theirs.
func TestLiveShares(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := func(id string, role membership.Role, seeds ...string) *membership.Memberlist {
		t.Helper()
		ml, err := membership.New(membership.Config{NodeID: id, Role: role, BindAddr: "127.0.0.1:0", Seeds: seeds, Network: "local", Logger: testLogger()})
		if err != nil {
			t.Fatal(err)
		}
		if err := ml.Start(ctx); err != nil {
			t.Fatal(err)
		}
		return ml
	}
	waitShare := func(who string, share func() float64, want float64) {
		t.Helper()
		for share() != want {
			if ctx.Err() != nil {
				t.Fatalf("%s's share %v, want %v", who, share(), want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	const gwPart = credits.GatewaysPart
	node := start("n1", membership.RoleStorage)
	defer node.Close()
	a := start("frontend-a", membership.RoleFrontend, node.Addr())
	defer a.Close()
	share := FrontendShare(a)
	waitShare("a", share, 1)
	b := start("frontend-b", membership.RoleFrontend, node.Addr())
	waitShare("a", share, 0.5)
	waitShare("b", FrontendShare(b), 0.5)
	// A gateway takes the gateways' part from the front-ends.
	gw := start("gateway", membership.RoleGateway, node.Addr())
	defer gw.Close()
	gws := GatewayShare(gw)
	waitShare("a", share, (1-gwPart)/2)
	waitShare("gateway", gws, gwPart)
	b.Close()
	waitShare("a", share, 1-gwPart)
	// A second gateway splits the gateways' part, and leaves the
	// front-ends theirs.
	gw2 := start("gateway-2", membership.RoleGateway, node.Addr())
	defer gw2.Close()
	waitShare("gateway", gws, gwPart/2)
	waitShare("gateway-2", GatewayShare(gw2), gwPart/2)
	waitShare("a", share, 1-gwPart)
	// Without front-ends the gateways spend the whole budget.
	a.Close()
	waitShare("gateway", gws, 0.5)
}
