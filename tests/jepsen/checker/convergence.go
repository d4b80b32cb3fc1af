package checker

import (
	"bytes"
	"fmt"
	"sort"
)

// MetaGroup is the Group of a meta-group member's catalog digest
// (PlacementService.CatalogDigest); partition groups are numbered from 1.
const MetaGroup uint64 = 0

// groupName names a group in a violation.
func groupName(g uint64) string {
	if g == MetaGroup {
		return "the meta group"
	}
	return fmt.Sprintf("group %d", g)
}

// DigestSample is one replica's answer to PartitionService.Digest (or a
// meta-group member's to PlacementService.CatalogDigest).
type DigestSample struct {
	Node    string `json:"node"`
	Group   uint64 `json:"group"`
	Applied uint64 `json:"applied_index"`
	Sum     []byte `json:"sha256"`
	Err     string `json:"err,omitempty"`
}

// Converged (P16): after healing, every replica of every group reached
// one applied index, and at it their digests are equal. samples is the
// last round of digests the harness took, one per replica and group.
func Converged(samples []DigestSample) []Violation {
	by := map[uint64][]DigestSample{}
	for _, s := range samples {
		by[s.Group] = append(by[s.Group], s)
	}
	groups := make([]uint64, 0, len(by))
	for g := range by {
		groups = append(groups, g)
	}
	sort.Slice(groups, func(i, j int) bool { return groups[i] < groups[j] })
	var out []Violation
	for _, g := range groups {
		ss := by[g]
		first := ss[0]
		for _, s := range ss {
			switch {
			case s.Err != "":
				out = append(out, Violation{Msg: fmt.Sprintf("%s: %s gave no digest: %s", groupName(g), s.Node, s.Err)})
			case s.Applied != first.Applied:
				out = append(out, Violation{Msg: fmt.Sprintf("%s: %s at applied index %d, %s at %d: the replicas did not converge", groupName(g), s.Node, s.Applied, first.Node, first.Applied)})
			case !bytes.Equal(s.Sum, first.Sum):
				out = append(out, Violation{Msg: fmt.Sprintf("%s: at applied index %d %s has digest %x, %s %x: the replicas diverged", groupName(g), s.Applied, s.Node, s.Sum, first.Node, first.Sum)})
			}
		}
	}
	return out
}
