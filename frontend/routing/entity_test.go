package routing

import (
	"context"
	"errors"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quorumbus/quorumbus/frontend"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// fakeCatalog answers GetEntity with a fixed error, or the entity.
type fakeCatalog struct {
	placementpb.UnimplementedPlacementServiceServer
	err error
}

func (f *fakeCatalog) GetEntity(_ context.Context, req *placementpb.GetEntityRequest) (*placementpb.Entity, error) {
	if f.err != nil {
		return nil, f.err
	}
	return &placementpb.Entity{Id: 3, Name: req.Name}, nil
}

func serveCatalog(t *testing.T, f *fakeCatalog) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	placementpb.RegisterPlacementServiceServer(g, f)
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	return lis.Addr().String()
}

// TestEntityNotFoundOnlyWhenPlacementSaysSo: an entity missing from the
// routing table is not-found only when placement answers NOT_FOUND; a
// member catching up after a restart, no meta leader, or no member at all
// make a retriable error. Clients take not-found as final.
func TestEntityNotFoundOnlyWhenPlacementSaysSo(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error // placement's answer
		want error
	}{
		{"found", nil, nil},
		{"not found", status.Error(codes.NotFound, "catalog: entity not found"), frontend.ErrEntityNotFound},
		{"catching up", status.Error(codes.Unavailable, "placement: catching up with the meta log"), frontend.ErrCatalogUnavailable},
		{"no leader", status.Error(codes.FailedPrecondition, "placement: not the meta leader"), frontend.ErrCatalogUnavailable},
		{"internal", status.Error(codes.Internal, "boom"), frontend.ErrCatalogUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := serveCatalog(t, &fakeCatalog{err: tc.err})
			r, err := New(Config{Placement: []string{addr}})
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			e, err := r.Entity("orders")
			if tc.want == nil {
				if err != nil || e.GetId() != 3 {
					t.Fatalf("Entity = %v, %v; want entity 3", e, err)
				}
				return
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("Entity: %v, want %v", err, tc.want)
			}
			if tc.want != frontend.ErrEntityNotFound && errors.Is(err, frontend.ErrEntityNotFound) {
				t.Fatalf("Entity: %v is not-found", err)
			}
		})
	}
	t.Run("no member reachable", func(t *testing.T) {
		r, err := New(Config{Placement: []string{"127.0.0.1:1"}})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		if _, err := r.Entity("orders"); !errors.Is(err, frontend.ErrCatalogUnavailable) {
			t.Fatalf("Entity: %v, want %v", err, frontend.ErrCatalogUnavailable)
		}
	})
}
