package planner

import (
	"cmp"
	"fmt"
	"slices"
)

// Member is a storage node as the rebalancer sees it.
type Member struct {
	ID    string
	Zone  string
	Alive bool
	// Draining: an operator asked for the node to be emptied; it takes no
	// replica and gives up those it has.
	Draining bool
	// Gone: the node has been dead longer than the cluster waits for it;
	// its replicas are re-created elsewhere from the survivors.
	Gone bool
}

// usable reports whether m may take a replica.
func (m Member) usable() bool { return m.Alive && !m.Draining && !m.Gone }

// Placed is a partition group and the nodes of its replicas.
type Placed struct {
	ID       uint64
	Replicas []string
	// Moving: a move of this group is under way; it gets no other until
	// that one is done (one membership change at a time per group).
	Moving bool
}

// Move replaces the replica of Group on From by a new one on To: the new
// replica is added and caught up first, the old one removed after.
type Move struct {
	Group    uint64
	From, To string
	Why      string // "drain", "gone" or "balance"
}

func (m Move) String() string {
	return fmt.Sprintf("group %d: %s -> %s (%s)", m.Group, m.From, m.To, m.Why)
}

// PlanMoves chooses at most max moves, at most one per group and none for
// a group already moving, in this order:
//
//  1. every replica on a draining or gone node, to a usable node (drains
//     and losses first: a group short of a replica is one failure from
//     losing its quorum);
//  2. then, with balance, while the usable nodes' replica counts differ
//     by more than one, a replica from the fullest node to the emptiest one that the
//     group does not use yet, if that does not narrow the group's spread
//     over zones.
//
// A target is chosen as PlaceGroups chooses: the zone the group uses least
// (not counting the replica that leaves), then the node with the fewest
// replicas, then the zone with the fewest, then the lowest id. The plan is
// a pure function of its input: every meta leader makes the same one.
// A move whose group has no possible target is left out; the plan then
// makes do with the others.
func PlanMoves(members []Member, groups []Placed, max int, balance bool) ([]Move, error) {
	if max < 0 {
		return nil, fmt.Errorf("%w: max %d", ErrInvalid, max)
	}
	ms := slices.Clone(members)
	slices.SortFunc(ms, func(a, b Member) int { return cmp.Compare(a.ID, b.ID) })
	byID := map[string]*Member{}
	for i := range ms {
		if byID[ms[i].ID] != nil {
			return nil, fmt.Errorf("%w: node %q twice", ErrInvalid, ms[i].ID)
		}
		byID[ms[i].ID] = &ms[i]
	}
	gs := make([]Placed, len(groups))
	for i, g := range groups {
		gs[i] = Placed{ID: g.ID, Replicas: slices.Clone(g.Replicas), Moving: g.Moving}
	}
	slices.SortFunc(gs, func(a, b Placed) int { return cmp.Compare(a.ID, b.ID) })

	load := map[string]int{} // replicas per node, as the plan goes
	zoneLoad := map[string]int{}
	for _, g := range gs {
		for _, r := range g.Replicas {
			load[r]++
			if m := byID[r]; m != nil {
				zoneLoad[m.Zone]++
			}
		}
	}
	zoneOf := func(id string) string {
		if m := byID[id]; m != nil {
			return m.Zone
		}
		return ""
	}
	// target picks the node to take g's replica on from, or "" if none can.
	target := func(g *Placed, from string) string {
		inGroup := map[string]int{}
		for _, r := range g.Replicas {
			if r != from {
				inGroup[zoneOf(r)]++
			}
		}
		best := -1
		for i, m := range ms {
			if !m.usable() || slices.Contains(g.Replicas, m.ID) {
				continue
			}
			if best < 0 || cmp.Or(
				cmp.Compare(inGroup[m.Zone], inGroup[ms[best].Zone]),
				cmp.Compare(load[m.ID], load[ms[best].ID]),
				cmp.Compare(zoneLoad[m.Zone], zoneLoad[ms[best].Zone]),
			) < 0 {
				best = i
			}
		}
		if best < 0 {
			return ""
		}
		return ms[best].ID
	}
	var plan []Move
	apply := func(g *Placed, from, to, why string) {
		plan = append(plan, Move{Group: g.ID, From: from, To: to, Why: why})
		g.Replicas[slices.Index(g.Replicas, from)] = to
		g.Moving = true
		load[from]--
		load[to]++
		zoneLoad[zoneOf(from)]--
		zoneLoad[zoneOf(to)]++
	}

	// 1. Replicas that must leave their node.
	for i := range gs {
		g := &gs[i]
		for _, r := range slices.Clone(g.Replicas) {
			if len(plan) == max || g.Moving {
				break
			}
			m := byID[r]
			why := ""
			switch {
			case m == nil || m.Gone:
				why = "gone"
			case m.Draining:
				why = "drain"
			default:
				continue
			}
			if to := target(g, r); to != "" {
				apply(g, r, to, why)
			}
		}
	}

	// 2. Balance. Each step moves one replica from the fullest usable
	// node that can give one to the emptiest that can take it.
	zones := func(g *Placed) int {
		seen := map[string]bool{}
		for _, r := range g.Replicas {
			seen[zoneOf(r)] = true
		}
		return len(seen)
	}
	for balance && len(plan) < max {
		var usable []string
		for _, m := range ms {
			if m.usable() {
				usable = append(usable, m.ID)
			}
		}
		if len(usable) < 2 {
			break
		}
		// Fullest first; among equals, the lowest id.
		slices.SortStableFunc(usable, func(a, b string) int { return cmp.Compare(load[b], load[a]) })
		moved := false
		for _, from := range usable {
			if load[from]-load[usable[len(usable)-1]] <= 1 {
				break // no node can give to one more than one below it
			}
			for i := range gs {
				g := &gs[i]
				if g.Moving || !slices.Contains(g.Replicas, from) {
					continue
				}
				to := target(g, from)
				if to == "" || load[from]-load[to] <= 1 {
					continue
				}
				before := zones(g)
				g.Replicas[slices.Index(g.Replicas, from)] = to
				after := zones(g)
				g.Replicas[slices.Index(g.Replicas, to)] = from
				if after < before {
					continue
				}
				apply(g, from, to, "balance")
				moved = true
				break
			}
			if moved {
				break
			}
		}
		if !moved {
			break
		}
	}
	return plan, nil
}
