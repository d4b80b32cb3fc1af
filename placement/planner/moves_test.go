package planner

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// members parses "id/zone" with optional flags after a second slash:
// "n4/a/drain", "n2/b/dead", "n3/c/gone".
func members(spec ...string) []Member {
	var ms []Member
	for _, s := range spec {
		parts := strings.Split(s, "/")
		m := Member{ID: parts[0], Zone: parts[1], Alive: true}
		if len(parts) > 2 {
			switch parts[2] {
			case "drain":
				m.Draining = true
			case "dead":
				m.Alive = false
			case "gone":
				m.Alive, m.Gone = false, true
			default:
				panic(s)
			}
		}
		ms = append(ms, m)
	}
	return ms
}

// placed parses "1:n1,n2,n3" and "1*:..." (a group already moving).
func placed(spec ...string) []Placed {
	var gs []Placed
	for _, s := range spec {
		id, reps, _ := strings.Cut(s, ":")
		var g Placed
		if strings.HasSuffix(id, "*") {
			g.Moving, id = true, strings.TrimSuffix(id, "*")
		}
		fmt.Sscan(id, &g.ID)
		g.Replicas = strings.Split(reps, ",")
		gs = append(gs, g)
	}
	return gs
}

func TestPlanMoves(t *testing.T) {
	tests := []struct {
		name    string
		members []Member
		groups  []Placed
		max     int
		want    []string // Move.String() of each, in order; nil: no moves
	}{
		{
			name:    "balanced: nothing to do",
			members: members("n1/-", "n2/-", "n3/-"),
			groups:  placed("1:n1,n2,n3", "2:n1,n2,n3", "3:n1,n2,n3"),
			max:     10,
		},
		{
			// Fullest first, lowest id among equals; the plan stops when
			// every group has its move (n3 4, n5 2 wait for the next round).
			name:    "two nodes join three: replicas move from the fullest to the emptiest",
			members: members("n1/-", "n2/-", "n3/-", "n4/-", "n5/-"),
			groups:  placed("1:n1,n2,n3", "2:n1,n2,n3", "3:n1,n2,n3", "4:n1,n2,n3", "5:n1,n2,n3"),
			max:     10,
			want: []string{
				"group 1: n1 -> n4 (balance)", "group 2: n2 -> n5 (balance)", "group 3: n3 -> n4 (balance)",
				"group 4: n1 -> n5 (balance)", "group 5: n2 -> n4 (balance)",
			},
		},
		{
			// TestGrowAndDrainUnderLoad's flake: its n4 exited at start
			// (a port taken), and the others are balanced among
			// themselves; alive, n4 takes a replica of the fullest.
			name:    "a dead node that holds nothing gets nothing",
			members: members("n1/-", "n2/-", "n3/-", "n4/-/dead", "n5/-"),
			groups:  placed("1:n3,n2,n5", "2:n1,n3,n5", "3:n1,n2,n3"),
			max:     2,
		},
		{
			name:    "the same node alive takes a replica of the fullest",
			members: members("n1/-", "n2/-", "n3/-", "n4/-", "n5/-"),
			groups:  placed("1:n3,n2,n5", "2:n1,n3,n5", "3:n1,n2,n3"),
			max:     2,
			want:    []string{"group 1: n3 -> n4 (balance)"},
		},
		{
			name:    "one move per group, and max bounds the plan",
			members: members("n1/-", "n2/-", "n3/-", "n4/-"),
			groups:  placed("1:n1,n2,n3", "2:n1,n2,n3"),
			max:     1,
			want:    []string{"group 1: n1 -> n4 (balance)"},
		},
		{
			name:    "a group already moving waits",
			members: members("n1/-", "n2/-", "n3/-", "n4/-"),
			groups:  placed("1*:n1,n2,n3", "2:n1,n2,n3"),
			max:     10,
			want:    []string{"group 2: n1 -> n4 (balance)"},
		},
		{
			name:    "drain: every replica of the node leaves it, before any balancing",
			members: members("n1/-", "n2/-", "n3/-", "n4/-/drain", "n5/-"),
			groups:  placed("1:n1,n2,n4", "2:n2,n3,n4", "3:n1,n3,n5"),
			max:     10,
			want:    []string{"group 1: n4 -> n5 (drain)", "group 2: n4 -> n1 (drain)"},
		},
		{
			name:    "a dead node keeps its replicas until it is gone",
			members: members("n1/-", "n2/-", "n3/-/dead", "n4/-"),
			groups:  placed("1:n1,n2,n3", "2:n1,n2,n4"),
			max:     10,
		},
		{
			name:    "a gone node's replicas are re-created on the survivors",
			members: members("n1/-", "n2/-", "n3/-/gone", "n4/-"),
			groups:  placed("1:n1,n2,n3", "2:n1,n3,n4"),
			max:     10,
			want:    []string{"group 1: n3 -> n4 (gone)", "group 2: n3 -> n2 (gone)"},
		},
		{
			name:    "no node can take the replica: the move is left out",
			members: members("n1/-", "n2/-", "n3/-/drain"),
			groups:  placed("1:n1,n2,n3"),
			max:     10,
		},
		{
			name:    "a drain keeps the group's zones: the replacement comes from the zone that leaves",
			members: members("a1/a", "a2/a", "b1/b", "c1/c", "c2/c/drain"),
			groups:  placed("1:a1,b1,c2"),
			max:     10,
			want:    []string{"group 1: c2 -> c1 (drain)"},
		},
		{
			name:    "balance never narrows a group's zones",
			members: members("a1/a", "b1/b", "c1/c", "a2/a"),
			groups:  placed("1:a1,b1,c1", "2:a1,b1,c1", "3:a1,b1,c1"),
			max:     10,
			want:    []string{"group 1: a1 -> a2 (balance)"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plan, err := PlanMoves(tt.members, tt.groups, tt.max, true)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, m := range plan {
				got = append(got, m.String())
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("plan\n got %q\nwant %q", got, tt.want)
			}
			checkPlan(t, tt.members, tt.groups, plan)
		})
	}
}

// checkPlan holds every plan to the rules: at most one move per group and
// none for a moving one; from is a replica, to is usable and not one; after
// the moves no group has a replica twice.
func checkPlan(t *testing.T, ms []Member, gs []Placed, plan []Move) {
	t.Helper()
	byID := map[string]Member{}
	for _, m := range ms {
		byID[m.ID] = m
	}
	groups := map[uint64]*Placed{}
	for i := range gs {
		g := gs[i]
		g.Replicas = slices.Clone(g.Replicas)
		groups[g.ID] = &g
	}
	moved := map[uint64]bool{}
	for _, m := range plan {
		g := groups[m.Group]
		switch {
		case g == nil:
			t.Errorf("%v: no such group", m)
		case g.Moving || moved[m.Group]:
			t.Errorf("%v: a second move of the group", m)
		case !slices.Contains(g.Replicas, m.From):
			t.Errorf("%v: %s holds no replica of it", m, m.From)
		case slices.Contains(g.Replicas, m.To):
			t.Errorf("%v: %s holds one already", m, m.To)
		case !byID[m.To].usable():
			t.Errorf("%v: %s cannot take replicas", m, m.To)
		default:
			g.Replicas[slices.Index(g.Replicas, m.From)] = m.To
		}
		moved[m.Group] = true
	}
}

// Run to a fixed point, as the control loop does (each round's moves done
// before the next plan): a join ends balanced, a drain ends with the node
// empty, and no replica is ever on a node twice.
func TestPlanMovesConverges(t *testing.T) {
	for _, tc := range []struct {
		name    string
		members []Member
		groups  []Placed
	}{
		{"3 to 7 nodes, 12 groups", members("n1/-", "n2/-", "n3/-", "n4/-", "n5/-", "n6/-", "n7/-"), nil},
		{"drain one of 5 in zones", members("a1/a", "a2/a", "b1/b", "b2/b", "c1/c/drain"), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var usable []Node
			for _, m := range tc.members[:3] {
				usable = append(usable, Node{ID: m.ID, Zone: m.Zone})
			}
			reps, err := PlaceGroups(usable, 3, 12)
			if err != nil {
				t.Fatal(err)
			}
			gs := make([]Placed, len(reps))
			for i, r := range reps {
				gs[i] = Placed{ID: uint64(i + 1), Replicas: r}
			}
			for round := 0; ; round++ {
				if round > 100 {
					t.Fatal("no fixed point after 100 rounds")
				}
				plan, err := PlanMoves(tc.members, gs, 3, true)
				if err != nil {
					t.Fatal(err)
				}
				checkPlan(t, tc.members, gs, plan)
				if len(plan) == 0 {
					break
				}
				for _, m := range plan {
					g := &gs[m.Group-1]
					g.Replicas[slices.Index(g.Replicas, m.From)] = m.To
				}
			}
			load := map[string]int{}
			for _, g := range gs {
				for _, r := range g.Replicas {
					load[r]++
				}
			}
			lo, hi := 1<<30, 0
			for _, m := range tc.members {
				if m.usable() {
					lo, hi = min(lo, load[m.ID]), max(hi, load[m.ID])
				} else if load[m.ID] > 0 {
					t.Errorf("%s still holds %d replicas", m.ID, load[m.ID])
				}
			}
			if hi-lo > 1 {
				t.Errorf("unbalanced: %v", load)
			}
		})
	}
}

func TestPlanMovesInvalid(t *testing.T) {
	if _, err := PlanMoves(members("n1/-", "n1/-"), nil, 1, true); !errors.Is(err, ErrInvalid) {
		t.Errorf("duplicate node: %v", err)
	}
	if _, err := PlanMoves(nil, nil, -1, true); !errors.Is(err, ErrInvalid) {
		t.Errorf("negative max: %v", err)
	}
}

// Random clusters: every plan keeps the rules, repeated planning reaches a
// fixed point, and then no replica is left on a draining or gone node while
// enough usable nodes exist.
func TestPlanMovesRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for c := range 300 {
		var ms []Member
		n := 3 + rng.IntN(6)
		for i := range n {
			m := Member{ID: fmt.Sprintf("n%d", i), Zone: fmt.Sprintf("z%d", rng.IntN(3)), Alive: true}
			switch rng.IntN(8) {
			case 0:
				m.Draining = true
			case 1:
				m.Alive = false
			case 2:
				m.Alive, m.Gone = false, true
			}
			ms = append(ms, m)
		}
		var gs []Placed
		for g := range 1 + rng.IntN(10) {
			perm := rng.Perm(n)[:3]
			var reps []string
			for _, i := range perm {
				reps = append(reps, ms[i].ID)
			}
			gs = append(gs, Placed{ID: uint64(g + 1), Replicas: reps})
		}
		usable := 0
		for _, m := range ms {
			if m.usable() {
				usable++
			}
		}
		for round := 0; ; round++ {
			if round > 200 {
				t.Fatalf("case %d: no fixed point", c)
			}
			plan, err := PlanMoves(ms, gs, 1+rng.IntN(4), rng.IntN(2) == 0)
			if err != nil {
				t.Fatal(err)
			}
			checkPlan(t, ms, gs, plan)
			if len(plan) == 0 {
				break
			}
			for _, m := range plan {
				g := &gs[m.Group-1]
				g.Replicas[slices.Index(g.Replicas, m.From)] = m.To
			}
		}
		if usable < 3 {
			continue
		}
		for _, g := range gs {
			for _, r := range g.Replicas {
				if m := ms[slices.IndexFunc(ms, func(m Member) bool { return m.ID == r })]; m.Draining || m.Gone {
					t.Errorf("case %d: group %d keeps a replica on %+v", c, g.ID, m)
				}
			}
		}
	}
}
