package report

import (
	"strings"
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/tests/jepsen/nemesis"
)

// A replica cut off behind the leader catches up 700 ms after the heal:
// the catch-up is measured from the heal to the last replica's sample at
// or past the leader's commit index at the heal.
func TestCatchUpsFromSamples(t *testing.T) {
	ms := func(n int64) int64 { return n * int64(time.Millisecond) }
	f := nemesis.Fault{Kind: nemesis.IsolateNode, Target: "n3", Start: ms(0), End: ms(1000)}
	samples := []ReplicaSample{
		{Time: ms(900), Node: 0, Leader: true, Applied: 50, Commit: 50, Voters: []int{0, 1, 2}},
		{Time: ms(1100), Node: 0, Leader: true, Applied: 60, Commit: 60, Voters: []int{0, 1, 2}},
		{Time: ms(1100), Node: 1, Applied: 60},
		{Time: ms(1100), Node: 2, Applied: 10},
		{Time: ms(1400), Node: 2, Applied: 40},
		{Time: ms(1700), Node: 2, Applied: 61},
	}
	other := nemesis.Fault{Kind: nemesis.KillNode, Start: 0, End: ms(1000)}
	cs := CatchUps(samples, []nemesis.Fault{f, other}, nemesis.IsolateNode)
	if len(cs) != 1 || !cs[0].Caught || cs[0].Took != 700*time.Millisecond {
		t.Fatalf("catch-ups %+v, want one of 700ms", cs)
	}
	if cs := CatchUps(samples[:4], []nemesis.Fault{f}, nemesis.IsolateNode); cs[0].Caught {
		t.Errorf("a replica that never caught up counted as caught up: %+v", cs)
	}
	s := Figures([]Stall{{Fault: nemesis.Fault{Kind: nemesis.KillLeader}, Longest: 2 * time.Second}}, cs)
	if !strings.Contains(s, "leader kill -> writes resume                 n=1 p50 2s") || !strings.Contains(s, "replicas caught up       n=1 p50 700ms") {
		t.Errorf("figures:\n%s", s)
	}
}

// A catch-up waits for the voters of the leader's configuration at the
// heal, whichever nodes they are: a spare that holds a replica counts,
// a first node that holds none does not, and a voter that a later
// leader sample no longer lists (moved off) stops counting. Before, the
// first three nodes were awaited, and a catch-up lasted until placement
// happened to put a replica back on all three: minutes in the soak.
func TestCatchUpFollowsTheConfiguration(t *testing.T) {
	ms := func(n int64) int64 { return n * int64(time.Millisecond) }
	f := nemesis.Fault{Kind: nemesis.PartitionBridge, Target: "n1|n3", Start: ms(0), End: ms(1000)}
	samples := []ReplicaSample{
		// Node 1 no longer holds the group; spare 3 does.
		{Time: ms(1100), Node: 0, Leader: true, Applied: 60, Commit: 60, Voters: []int{0, 2, 3}},
		{Time: ms(1100), Node: 2, Applied: 20},
		{Time: ms(1100), Node: 3, Applied: 20},
		{Time: ms(1300), Node: 3, Applied: 60},
		// Node 2 is drained before it caught up.
		{Time: ms(1500), Node: 0, Leader: true, Applied: 70, Commit: 70, Voters: []int{0, 3, 4}},
	}
	cs := CatchUps(samples, []nemesis.Fault{f}, nemesis.PartitionBridge)
	if len(cs) != 1 || !cs[0].Caught || cs[0].Took != 500*time.Millisecond {
		t.Fatalf("catch-ups %+v, want one of 500ms", cs)
	}
	if cs := CatchUps(samples[:4], []nemesis.Fault{f}, nemesis.PartitionBridge); cs[0].Caught {
		t.Errorf("caught up while node 2, a voter, was behind: %+v", cs)
	}
}
