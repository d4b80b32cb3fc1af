// Package planner decides where things go: how many partition groups the
// cluster wants and their replicas on storage nodes, the partitions of a
// new entity on groups, the replica moves that drain, replace and
// rebalance (moves.go), and the leadership transfers that spread leaders
// (leaders.go).
// Its functions are pure and deterministic (ties break by id), so the same
// input always gives the same plan; the meta leader runs them and puts the
// result in the command it proposes.
package planner

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
)

var (
	ErrNotEnoughNodes = errors.New("planner: not enough nodes")
	ErrNoGroups       = errors.New("planner: no groups")
	ErrInvalid        = errors.New("planner: invalid request")
)

// Node is a storage node that can take replicas.
type Node struct {
	ID       string
	Zone     string
	Replicas int // replicas it holds already
}

// WantGroups is how many partition groups a cluster aims for: floor, or
// as many as its largest entity has partitions when that is more, but no
// more than its usable nodes hold at perNodeCap replicas each (usable ×
// perNodeCap / r groups of r replicas). The floor stands whatever the cap
// says; perNodeCap 0 means the floor alone. While fewer than r nodes are
// usable no group can be placed, and the answer is 0.
func WantGroups(usable, r, perNodeCap, floor, partitions int) int {
	if r < 1 || usable < r {
		return 0
	}
	if perNodeCap <= 0 {
		return floor
	}
	return max(floor, min(partitions, usable*perNodeCap/r))
}

// PlaceGroups chooses the replicas of count new groups, r per group, and
// returns the node ids of each group's replicas.
//
// A group's replicas are on distinct nodes. Each replica goes, in order of
// preference, to a zone the group does not use yet (or uses least), to the
// node holding the fewest replicas, to the zone holding the fewest replicas,
// and to the lowest id. Zone spread thus wins over balance: with zones of
// unequal size, the nodes of the small zones carry more replicas.
func PlaceGroups(nodes []Node, r, count int) ([][]string, error) {
	return place(nodes, r, count, 0)
}

// PlaceGroupsWithin places up to count new groups as PlaceGroups does,
// but within a bound: no node takes a replica once it holds perNodeCap,
// and no group is spread over fewer zones than the nodes offer (r, or the
// zones there are if fewer). It stops at the first group it cannot place
// so and returns those placed before it, which may be none.
func PlaceGroupsWithin(nodes []Node, r, count, perNodeCap int) ([][]string, error) {
	if perNodeCap < 1 {
		return nil, fmt.Errorf("%w: %d replicas per node", ErrInvalid, perNodeCap)
	}
	return place(nodes, r, count, perNodeCap)
}

// place is PlaceGroups, and with perNodeCap > 0 PlaceGroupsWithin.
func place(nodes []Node, r, count, perNodeCap int) ([][]string, error) {
	if r < 1 || count < 0 {
		return nil, fmt.Errorf("%w: replication factor %d, %d groups", ErrInvalid, r, count)
	}
	if len(nodes) < r {
		return nil, fmt.Errorf("%w: %d nodes for replication factor %d", ErrNotEnoughNodes, len(nodes), r)
	}
	ns := slices.Clone(nodes)
	slices.SortFunc(ns, func(a, b Node) int { return cmp.Compare(a.ID, b.ID) })
	for i := 1; i < len(ns); i++ {
		if ns[i].ID == ns[i-1].ID {
			return nil, fmt.Errorf("%w: node %q twice", ErrInvalid, ns[i].ID)
		}
	}
	zoneLoad := map[string]int{}
	for _, n := range ns {
		zoneLoad[n.Zone] += n.Replicas
	}
	spread := min(r, len(zoneLoad)) // the zones a group can use

	plan := make([][]string, 0, count)
	for range count {
		inGroup := map[string]int{} // zone -> replicas of this group
		taken := make([]bool, len(ns))
		group := make([]string, 0, r)
		for range r {
			best := -1
			for i, n := range ns {
				if taken[i] || perNodeCap > 0 && n.Replicas >= perNodeCap {
					continue
				}
				if best < 0 || cmp.Or(
					cmp.Compare(inGroup[n.Zone], inGroup[ns[best].Zone]),
					cmp.Compare(n.Replicas, ns[best].Replicas),
					cmp.Compare(zoneLoad[n.Zone], zoneLoad[ns[best].Zone]),
				) < 0 {
					best = i // ids ascend, so the first of equals has the lowest id
				}
			}
			if best < 0 {
				return plan, nil // every node left is full: only with a cap
			}
			n := &ns[best]
			taken[best] = true
			inGroup[n.Zone]++
			zoneLoad[n.Zone]++
			n.Replicas++
			group = append(group, n.ID)
		}
		if perNodeCap > 0 && len(inGroup) < spread {
			// The nodes with room are in fewer zones than a group
			// can use: this group, and every later one, would be
			// narrower than the others.
			return plan, nil
		}
		plan = append(plan, group)
	}
	return plan, nil
}

// Group is a partition group that can take entity partitions.
type Group struct {
	ID         uint64
	Partitions int // entity partitions it holds already
}

// AssignPartitions chooses the group of each of an entity's partitions.
// The entity spreads over as many groups as it has partitions: a group gets
// a second partition of it only once every group has one. Among the groups
// the entity uses least, the one holding the fewest partitions overall
// wins, then the lowest id.
func AssignPartitions(groups []Group, partitions int) ([]uint64, error) {
	if partitions < 1 {
		return nil, fmt.Errorf("%w: %d partitions", ErrInvalid, partitions)
	}
	if len(groups) == 0 {
		return nil, ErrNoGroups
	}
	gs := slices.Clone(groups)
	slices.SortFunc(gs, func(a, b Group) int { return cmp.Compare(a.ID, b.ID) })
	mine := make([]int, len(gs))
	out := make([]uint64, 0, partitions)
	for range partitions {
		best := 0
		for i := 1; i < len(gs); i++ {
			if cmp.Or(cmp.Compare(mine[i], mine[best]), cmp.Compare(gs[i].Partitions, gs[best].Partitions)) < 0 {
				best = i
			}
		}
		mine[best]++
		gs[best].Partitions++
		out = append(out, gs[best].ID)
	}
	return out, nil
}
