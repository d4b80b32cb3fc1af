package cluster

import (
	"context"
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/placement/membership"
)

// TestFrontendShare: front-ends that join the storage nodes' gossip count
// each other (not the nodes) as members come and go, so each enforces
// the budget divided by the live front-ends; gateways likewise count
// gateways.
func TestFrontendShare(t *testing.T) {
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
	waitShare := func(share func() int, want int) {
		t.Helper()
		for share() != want {
			if ctx.Err() != nil {
				t.Fatalf("share %d, want %d", share(), want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	node := start("n1", membership.RoleStorage)
	defer node.Close()
	a := start("frontend-a", membership.RoleFrontend, node.Addr())
	defer a.Close()
	share := FrontendShare(a)
	waitShare(share, 1)
	b := start("frontend-b", membership.RoleFrontend, node.Addr())
	waitShare(share, 2)
	waitShare(FrontendShare(b), 2)
	gw := start("gateway", membership.RoleGateway, node.Addr())
	defer gw.Close()
	b.Close()
	waitShare(share, 1)
	// Gateways count gateways, not front-ends.
	gws := GatewayShare(gw)
	waitShare(gws, 1)
	gw2 := start("gateway-2", membership.RoleGateway, node.Addr())
	defer gw2.Close()
	waitShare(gws, 2)
	waitShare(share, 1)
}
