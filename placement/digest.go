package placement

import (
	"context"
	"crypto/sha256"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quorumbus/quorumbus/placement/catalog"
	pb "github.com/quorumbus/quorumbus/proto/placementpb"
)

// CatalogDigest answers with this member's own catalog at its applied
// index: the SHA-256 of its snapshot encoding (catalog.EncodeSnapshot,
// deterministic, every list in id order), so members that applied the
// same entries give the same digest. It is never forwarded: the chaos
// suite asks every member and compares. A node that holds no current
// replica of the catalog, not a member of the meta group or orphaned
// (orphan.go), answers NOT_FOUND, as a node without a partition group
// answers PartitionService.Digest.
func (s *Service) CatalogDigest(ctx context.Context, _ *pb.CatalogDigestRequest) (*pb.CatalogDigestResponse, error) {
	if s.raft.Load() == nil {
		return nil, toStatus(ErrNotRunning)
	}
	if !s.Member() || s.Orphaned() {
		return nil, status.Error(codes.NotFound, "placement: this node holds no current replica of the catalog")
	}
	if err := s.waitCaughtUp(ctx); err != nil {
		return nil, toStatus(err)
	}
	var data []byte
	var applied uint64
	var err error
	s.fsm.Read(func(st *catalog.State) {
		applied = st.Applied()
		data, err = catalog.EncodeSnapshot(st.Snapshot())
	})
	if err != nil {
		return nil, toStatus(fmt.Errorf("placement: encoding the catalog: %w", err))
	}
	sum := sha256.Sum256(data)
	return &pb.CatalogDigestResponse{AppliedIndex: applied, Sha256: sum[:]}, nil
}
