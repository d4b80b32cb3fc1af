package planner

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

func nodes(spec ...string) []Node { // "id/zone" or "id/zone/replicas"
	var ns []Node
	for _, s := range spec {
		var n Node
		var id, zone string
		var reps int
		if c, _ := fmt.Sscanf(replaceSlash(s), "%s %s %d", &id, &zone, &reps); c < 2 {
			panic(s)
		}
		n.ID, n.Zone, n.Replicas = id, zone, reps
		ns = append(ns, n)
	}
	return ns
}

func replaceSlash(s string) string {
	b := []byte(s)
	for i := range b {
		if b[i] == '/' {
			b[i] = ' '
		}
	}
	return string(b)
}

func TestPlaceGroups(t *testing.T) {
	tests := []struct {
		name      string
		nodes     []Node
		r, count  int
		want      [][]string // nil: only the properties are checked
		balanced  bool       // every node ends with the same count, give or take one
		wantCount map[string]int
		err       error
	}{
		{
			name:  "three nodes, three zones",
			nodes: nodes("n1/a", "n2/b", "n3/c"), r: 3, count: 3,
			want:     [][]string{{"n1", "n2", "n3"}, {"n1", "n2", "n3"}, {"n1", "n2", "n3"}},
			balanced: true,
		},
		{
			name:  "six nodes in three zones",
			nodes: nodes("a1/a", "a2/a", "b1/b", "b2/b", "c1/c", "c2/c"), r: 3, count: 4,
			want:     [][]string{{"a1", "b1", "c1"}, {"a2", "b2", "c2"}, {"a1", "b1", "c1"}, {"a2", "b2", "c2"}},
			balanced: true,
		},
		{
			name:  "five nodes, no zones",
			nodes: nodes("n1/-", "n2/-", "n3/-", "n4/-", "n5/-"), r: 3, count: 5,
			want:     [][]string{{"n1", "n2", "n3"}, {"n4", "n5", "n1"}, {"n2", "n3", "n4"}, {"n5", "n1", "n2"}, {"n3", "n4", "n5"}},
			balanced: true,
		},
		{
			name:  "existing replicas steer new ones to empty nodes",
			nodes: nodes("n1/-/5", "n2/-/0", "n3/-/1", "n4/-/0"), r: 3, count: 1,
			want: [][]string{{"n2", "n4", "n3"}},
		},
		{
			name:  "zone spread wins over balance",
			nodes: nodes("a1/a", "b1/b", "b2/b", "b3/b"), r: 2, count: 3,
			want:      [][]string{{"a1", "b1"}, {"b2", "a1"}, {"b3", "a1"}},
			wantCount: map[string]int{"a1": 3, "b1": 1, "b2": 1, "b3": 1},
		},
		{
			name:  "more replicas than zones: zones used evenly",
			nodes: nodes("a1/a", "a2/a", "b1/b", "b2/b"), r: 3, count: 2,
			want:     [][]string{{"a1", "b1", "a2"}, {"b2", "a1", "b1"}},
			balanced: true,
		},
		{name: "new groups: none", nodes: nodes("n1/a"), r: 1, count: 0, want: [][]string{}},
		{name: "not enough nodes", nodes: nodes("n1/a", "n2/b"), r: 3, count: 1, err: ErrNotEnoughNodes},
		{name: "replication factor 0", nodes: nodes("n1/a"), r: 0, count: 1, err: ErrInvalid},
		{name: "a node twice", nodes: nodes("n1/a", "n1/b", "n2/c"), r: 3, count: 1, err: ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plan, err := PlaceGroups(tt.nodes, tt.r, tt.count)
			if tt.err != nil || err != nil {
				if !errors.Is(err, tt.err) {
					t.Fatalf("err = %v, want %v", err, tt.err)
				}
				return
			}
			checkPlacement(t, tt.nodes, tt.r, tt.count, plan)
			if tt.want != nil && !slices.EqualFunc(plan, tt.want, slices.Equal) {
				t.Errorf("plan %v, want %v", plan, tt.want)
			}
			counts := replicaCounts(tt.nodes, plan)
			if tt.balanced {
				lo, hi := minMax(counts)
				if hi-lo > 1 {
					t.Errorf("unbalanced: %v", counts)
				}
			}
			for id, want := range tt.wantCount {
				if counts[id] != want {
					t.Errorf("node %s holds %d replicas, want %d (all: %v)", id, counts[id], want, counts)
				}
			}
		})
	}
}

// checkPlacement checks what every plan must satisfy: count groups of r
// distinct known nodes, each using as many zones as it can.
func checkPlacement(t *testing.T, ns []Node, r, count int, plan [][]string) {
	t.Helper()
	zone := map[string]string{}
	zones := map[string]bool{}
	for _, n := range ns {
		zone[n.ID] = n.Zone
		zones[n.Zone] = true
	}
	if len(plan) != count {
		t.Fatalf("%d groups, want %d", len(plan), count)
	}
	for i, g := range plan {
		if len(g) != r {
			t.Fatalf("group %d has %d replicas, want %d", i, len(g), r)
		}
		seen := map[string]bool{}
		used := map[string]bool{}
		for _, id := range g {
			if _, ok := zone[id]; !ok || seen[id] {
				t.Fatalf("group %d: node %q unknown or repeated: %v", i, id, g)
			}
			seen[id] = true
			used[zone[id]] = true
		}
		if want := min(r, len(zones)); len(used) != want {
			t.Fatalf("group %d uses %d zones, could use %d: %v", i, len(used), want, g)
		}
	}
}

func replicaCounts(ns []Node, plan [][]string) map[string]int {
	c := map[string]int{}
	for _, n := range ns {
		c[n.ID] = n.Replicas
	}
	for _, g := range plan {
		for _, id := range g {
			c[id]++
		}
	}
	return c
}

func minMax(m map[string]int) (lo, hi int) {
	first := true
	for _, v := range m {
		if first || v < lo {
			lo = v
		}
		if first || v > hi {
			hi = v
		}
		first = false
	}
	return lo, hi
}

// TestPlaceGroupsRandom checks the invariants on random clusters with equal
// zones, where spreading and balancing never conflict.
func TestPlaceGroupsRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 500 {
		zones := 1 + rng.IntN(4)
		perZone := 1 + rng.IntN(4)
		var ns []Node
		for z := range zones {
			for i := range perZone {
				ns = append(ns, Node{ID: fmt.Sprintf("z%d-n%d", z, i), Zone: fmt.Sprintf("z%d", z)})
			}
		}
		r := 1 + rng.IntN(min(len(ns), 5))
		count := rng.IntN(20)
		plan, err := PlaceGroups(ns, r, count)
		if err != nil {
			t.Fatal(err)
		}
		checkPlacement(t, ns, r, count, plan)
		if lo, hi := minMax(replicaCounts(ns, plan)); hi-lo > 1 {
			t.Fatalf("%d zones x %d nodes, r=%d, %d groups: unbalanced %v", zones, perZone, r, count, replicaCounts(ns, plan))
		}
		again, _ := PlaceGroups(ns, r, count)
		if !slices.EqualFunc(plan, again, slices.Equal) {
			t.Fatal("not deterministic")
		}
	}
}

func TestAssignPartitions(t *testing.T) {
	g := func(spec ...int) []Group { // id:load pairs
		var gs []Group
		for i := 0; i < len(spec); i += 2 {
			gs = append(gs, Group{ID: uint64(spec[i]), Partitions: spec[i+1]})
		}
		return gs
	}
	tests := []struct {
		name       string
		groups     []Group
		partitions int
		want       []uint64
		err        error
	}{
		{"one partition, empty groups: lowest id", g(1, 0, 2, 0, 3, 0), 1, []uint64{1}, nil},
		{"one partition: least loaded", g(1, 5, 2, 0, 3, 2), 1, []uint64{2}, nil},
		{"spread beats load", g(1, 0, 2, 10, 3, 10), 3, []uint64{1, 2, 3}, nil},
		{"a second round once all are used", g(1, 0, 2, 10, 3, 10), 4, []uint64{1, 2, 3, 1}, nil},
		{"second round least loaded first", g(1, 4, 2, 0, 3, 2), 5, []uint64{2, 3, 1, 2, 3}, nil},
		{"input order does not matter", g(3, 0, 1, 0, 2, 0), 2, []uint64{1, 2}, nil},
		{"16 partitions on 3 groups", g(1, 0, 2, 0, 3, 0), 16, []uint64{1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3, 1}, nil},
		{"no groups", nil, 1, nil, ErrNoGroups},
		{"no partitions", g(1, 0), 0, nil, ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := AssignPartitions(tt.groups, tt.partitions)
			if !errors.Is(err, tt.err) {
				t.Fatalf("err = %v, want %v", err, tt.err)
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
		})
	}
}

// TestAssignPartitionsKeepsBalance creates many entities one after another,
// as the catalog would, and checks that group loads stay within one
// partition of each other.
func TestAssignPartitionsKeepsBalance(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	groups := []Group{{ID: 1}, {ID: 2}, {ID: 3}, {ID: 4}, {ID: 5}}
	for range 200 {
		p := 1 + rng.IntN(16)
		got, err := AssignPartitions(groups, p)
		if err != nil {
			t.Fatal(err)
		}
		distinct := map[uint64]bool{}
		for _, id := range got {
			distinct[id] = true
			groups[id-1].Partitions++
		}
		if want := min(p, len(groups)); len(distinct) != want {
			t.Fatalf("%d partitions on %d groups, want %d", p, len(distinct), want)
		}
		lo, hi := groups[0].Partitions, groups[0].Partitions
		for _, g := range groups {
			lo, hi = min(lo, g.Partitions), max(hi, g.Partitions)
		}
		if hi-lo > 1 {
			t.Fatalf("loads drifted apart: %v", groups)
		}
	}
}

func TestWantGroups(t *testing.T) {
	tests := []struct {
		name                                     string
		usable, r, perNodeCap, floor, partitions int
		want                                     int
	}{
		{"no cap: the floor", 3, 3, 0, 3, 16, 3},
		{"no entity wider than the floor", 3, 3, 8, 3, 1, 3},
		{"as many as partitions", 5, 3, 8, 3, 4, 4},
		{"three nodes hold cap groups", 3, 3, 8, 3, 16, 8},
		{"five nodes: 5 x 8 / 3", 5, 3, 8, 3, 16, 13},
		{"six nodes: every partition its group", 6, 3, 8, 3, 16, 16},
		{"the floor stands above the cap", 3, 3, 2, 5, 16, 5},
		{"one replica per group", 2, 1, 8, 3, 32, 16},
		{"too few nodes", 2, 3, 8, 3, 16, 0},
		{"no nodes", 0, 3, 8, 3, 16, 0},
		{"replication factor above the nodes", 4, 5, 8, 3, 16, 0},
		{"replication factor 0", 3, 0, 8, 3, 16, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := WantGroups(tt.usable, tt.r, tt.perNodeCap, tt.floor, tt.partitions); got != tt.want {
				t.Errorf("WantGroups(%d nodes, r=%d, cap %d, floor %d, %d partitions) = %d, want %d",
					tt.usable, tt.r, tt.perNodeCap, tt.floor, tt.partitions, got, tt.want)
			}
		})
	}
}

func TestPlaceGroupsWithin(t *testing.T) {
	tests := []struct {
		name          string
		nodes         []Node
		r, count, cap int
		want          [][]string // nil: only the properties are checked
		wantLen       int
		wantCount     map[string]int
		err           error
	}{
		{
			name:  "room for all",
			nodes: nodes("n1/-", "n2/-", "n3/-"), r: 3, count: 2, cap: 8,
			want: [][]string{{"n1", "n2", "n3"}, {"n1", "n2", "n3"}}, wantLen: 2,
		},
		{
			name:  "three nodes with three groups: up to the cap",
			nodes: nodes("n1/-/3", "n2/-/3", "n3/-/3"), r: 3, count: 13, cap: 8,
			wantLen:   5,
			wantCount: map[string]int{"n1": 8, "n2": 8, "n3": 8},
		},
		{
			name:  "five nodes filled up to the cap",
			nodes: nodes("n1/-/2", "n2/-/2", "n3/-/2", "n4/-/2", "n5/-/1"), r: 3, count: 16, cap: 4,
			wantLen:   3, // 11 free slots, but a fourth group would need a third node with room
			wantCount: map[string]int{"n1": 4, "n2": 4, "n3": 4, "n4": 3, "n5": 3},
		},
		{
			name:  "a full node is passed over",
			nodes: nodes("n1/-/4", "n2/-", "n3/-", "n4/-"), r: 3, count: 1, cap: 4,
			want: [][]string{{"n2", "n3", "n4"}}, wantLen: 1,
		},
		{
			name:  "fewer nodes with room than replicas",
			nodes: nodes("n1/-/4", "n2/-/4", "n3/-", "n4/-"), r: 3, count: 2, cap: 4,
			want: [][]string{}, wantLen: 0,
		},
		{
			name:  "a full zone stops placement rather than narrow a group",
			nodes: nodes("a1/a", "b1/b", "b2/b", "b3/b"), r: 2, count: 5, cap: 2,
			want:      [][]string{{"a1", "b1"}, {"b2", "a1"}},
			wantLen:   2,
			wantCount: map[string]int{"a1": 2, "b1": 1, "b2": 1, "b3": 0},
		},
		{
			name:  "zones of equal size fill evenly",
			nodes: nodes("a1/a", "a2/a", "b1/b", "b2/b", "c1/c", "c2/c"), r: 3, count: 10, cap: 2,
			wantLen:   4,
			wantCount: map[string]int{"a1": 2, "a2": 2, "b1": 2, "b2": 2, "c1": 2, "c2": 2},
		},
		{name: "cap 0", nodes: nodes("n1/-"), r: 1, count: 1, cap: 0, err: ErrInvalid},
		{name: "not enough nodes", nodes: nodes("n1/a", "n2/b"), r: 3, count: 1, cap: 4, err: ErrNotEnoughNodes},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plan, err := PlaceGroupsWithin(tt.nodes, tt.r, tt.count, tt.cap)
			if tt.err != nil || err != nil {
				if !errors.Is(err, tt.err) {
					t.Fatalf("err = %v, want %v", err, tt.err)
				}
				return
			}
			checkPlacement(t, tt.nodes, tt.r, tt.wantLen, plan)
			if tt.want != nil && !slices.EqualFunc(plan, tt.want, slices.Equal) {
				t.Errorf("plan %v, want %v", plan, tt.want)
			}
			counts := replicaCounts(tt.nodes, plan)
			for id, n := range counts {
				if n > tt.cap {
					t.Errorf("node %s holds %d replicas, over the cap of %d", id, n, tt.cap)
				}
			}
			for id, want := range tt.wantCount {
				if counts[id] != want {
					t.Errorf("node %s holds %d replicas, want %d (all: %v)", id, counts[id], want, counts)
				}
			}
		})
	}
}

// TestPlaceGroupsWithinRandom: on random clusters, with zones of unequal
// size and replicas already placed, no node passes the cap, every group
// uses as many zones as it can, and what is placed is a prefix of what
// PlaceGroups places without the cap whenever the cap never binds.
func TestPlaceGroupsWithinRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for range 500 {
		var ns []Node
		for z := range 1 + rng.IntN(4) {
			for i := range 1 + rng.IntN(4) {
				ns = append(ns, Node{ID: fmt.Sprintf("z%d-n%d", z, i), Zone: fmt.Sprintf("z%d", z), Replicas: rng.IntN(4)})
			}
		}
		r := 1 + rng.IntN(min(len(ns), 5))
		count, perNodeCap := rng.IntN(20), 1+rng.IntN(8)
		plan, err := PlaceGroupsWithin(ns, r, count, perNodeCap)
		if err != nil {
			t.Fatal(err)
		}
		if len(plan) > count {
			t.Fatalf("%d groups placed, %d asked", len(plan), count)
		}
		checkPlacement(t, ns, r, len(plan), plan)
		before := replicaCounts(ns, nil)
		for id, n := range replicaCounts(ns, plan) {
			if n > perNodeCap && n != before[id] {
				t.Fatalf("node %s: %d replicas, cap %d (had %d)", id, n, perNodeCap, before[id])
			}
		}
		free, _ := PlaceGroups(ns, r, len(plan))
		if fits := func() bool {
			for id, n := range replicaCounts(ns, free) {
				if n > perNodeCap && n != before[id] {
					return false
				}
			}
			return true
		}(); fits && !slices.EqualFunc(plan, free, slices.Equal) {
			t.Fatalf("the cap never bound, yet the plan %v differs from PlaceGroups' %v", plan, free)
		}
	}
}
