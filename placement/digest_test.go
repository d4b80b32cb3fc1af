package placement_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quorumbus/quorumbus/placement/placementtest"
	pb "github.com/quorumbus/quorumbus/proto/placementpb"
)

// Every member's catalog digest agrees once they applied the same
// entries; a node outside the meta group has none to give.
func TestCatalogDigestSameOnEveryMember(t *testing.T) {
	c := placementtest.Start(t, placementtest.Options{})
	leader := c.Leader(t)
	waitGroups(t, leader, 3)
	for _, name := range []string{"a", "b", "c"} {
		createRetrying(t, leader, &pb.CreateEntityRequest{Name: name})
	}
	outsider := c.AddNode(t)

	digest := func(m *placementtest.Member) (*pb.CatalogDigestResponse, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return m.Client.CatalogDigest(ctx, &pb.CatalogDigestRequest{})
	}
	var first *pb.CatalogDigestResponse
	placementtest.Eventually(t, wait, "every member's digest at one applied index", func() bool {
		first = nil
		for _, m := range c.Up() {
			if m == outsider {
				continue
			}
			d, err := digest(m)
			if err != nil {
				t.Logf("%s: %v", m.ID, err)
				return false
			}
			if first == nil {
				first = d
				continue
			}
			if d.AppliedIndex != first.AppliedIndex {
				return false
			}
			if !bytes.Equal(d.Sha256, first.Sha256) {
				t.Fatalf("%s: digest %x at applied index %d, another member %x", m.ID, d.Sha256, d.AppliedIndex, first.Sha256)
			}
		}
		return first != nil && len(first.Sha256) == 32
	})
	if _, err := digest(outsider); status.Code(err) != codes.NotFound {
		t.Fatalf("the digest of a node outside the meta group: %v, want NotFound", err)
	}

	// A change moves the digest.
	createRetrying(t, c.Leader(t), &pb.CreateEntityRequest{Name: "d"})
	placementtest.Eventually(t, wait, "the leader's digest to change", func() bool {
		d, err := digest(c.Leader(t))
		return err == nil && d.AppliedIndex > first.AppliedIndex && !bytes.Equal(d.Sha256, first.Sha256)
	})
}
