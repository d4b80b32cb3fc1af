package planner

import (
	"cmp"
	"fmt"
	"slices"
)

// Led is a partition group as the leader balancer sees it.
type Led struct {
	ID     uint64
	Leader string   // "" when unknown
	Voters []string // the replicas that may lead
}

// Transfer hands a group's leadership from one replica to another.
type Transfer struct {
	Group    uint64
	From, To string
}

func (t Transfer) String() string {
	return fmt.Sprintf("group %d: leader %s -> %s", t.Group, t.From, t.To)
}

// PlanLeaders chooses at most max leadership transfers, one per group,
// that bring the number of groups each usable node leads within one of
// every other's: a leader does a group's proposing, fsyncs first and
// answers its clients, so leaders piled on one node make it the cluster's
// bottleneck. Each step takes a group led by the node leading most (the
// lowest group id first) to the voter of that group leading fewest (then
// the lowest id), if that leads fewer by two or more. Groups with an
// unknown leader are counted nowhere and left alone. Pure, like
// PlanMoves.
func PlanLeaders(members []Member, groups []Led, max int) []Transfer {
	usable := map[string]bool{}
	var ids []string
	for _, m := range members {
		if m.usable() {
			usable[m.ID] = true
			ids = append(ids, m.ID)
		}
	}
	slices.Sort(ids)
	gs := slices.Clone(groups)
	slices.SortFunc(gs, func(a, b Led) int { return cmp.Compare(a.ID, b.ID) })
	leads := map[string]int{}
	for _, g := range gs {
		if g.Leader != "" {
			leads[g.Leader]++
		}
	}
	moved := map[uint64]bool{}
	var plan []Transfer
	for len(plan) < max {
		// The node leading most (lowest id among equals), usable or not:
		// a draining node should lead nothing either.
		from := ""
		for _, g := range gs {
			if g.Leader != "" && (from == "" || cmp.Or(cmp.Compare(leads[from], leads[g.Leader]), cmp.Compare(g.Leader, from)) < 0) {
				from = g.Leader
			}
		}
		if from == "" {
			break
		}
		best := Transfer{}
		for _, g := range gs {
			if g.Leader != from || moved[g.ID] {
				continue
			}
			for _, v := range g.Voters {
				if v == from || !usable[v] {
					continue
				}
				gap := leads[from] - leads[v]
				if usable[from] && gap < 2 {
					continue
				}
				if best.To == "" || cmp.Or(cmp.Compare(leads[v], leads[best.To]), cmp.Compare(v, best.To)) < 0 {
					best = Transfer{Group: g.ID, From: from, To: v}
				}
			}
			if best.To != "" {
				break
			}
		}
		if best.To == "" {
			break
		}
		plan = append(plan, best)
		moved[best.Group] = true
		leads[best.From]--
		leads[best.To]++
		for i := range gs {
			if gs[i].ID == best.Group {
				gs[i].Leader = best.To
			}
		}
	}
	return plan
}
