package node

import (
	"context"
	"crypto/sha256"
	"fmt"

	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// Digest hashes this replica's copy of a group: the SHA-256 of the state
// machine's snapshot stream, which holds every record of the store and
// the applied index it was taken at. Any replica answers, leader or not:
// the point is to compare them. Replicas that applied the same entries
// produce the same stream (bodies kept in the Raft log are moved into the
// store first, so where a replica keeps them does not show), so two
// digests at one applied index differ only if the replicas diverged.
//
// Taking the snapshot flushes the store; that is why this is a check for
// tests and operators, not something to poll.
func (s *service) Digest(ctx context.Context, req *partitionpb.DigestRequest) (*partitionpb.DigestResponse, error) {
	g, err := s.n.group(req.GroupId)
	if err != nil {
		return nil, toStatus(err)
	}
	snap, err := g.machine.Snapshot()
	if err != nil {
		return nil, toStatus(fmt.Errorf("node: group %d: digest: %w", req.GroupId, err))
	}
	defer snap.Release()
	h := sha256.New()
	n, err := snap.WriteTo(h)
	if err != nil {
		return nil, toStatus(fmt.Errorf("node: group %d: digest: %w", req.GroupId, err))
	}
	return &partitionpb.DigestResponse{AppliedIndex: snap.AppliedIndex(), Sha256: h.Sum(nil), SnapshotBytes: uint64(n)}, nil
}
