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
		{Time: ms(900), Node: 0, Leader: true, Applied: 50, Commit: 50},
		{Time: ms(1100), Node: 0, Leader: true, Applied: 60, Commit: 60},
		{Time: ms(1100), Node: 1, Applied: 60},
		{Time: ms(1100), Node: 2, Applied: 10},
		{Time: ms(1400), Node: 2, Applied: 40},
		{Time: ms(1700), Node: 2, Applied: 61},
	}
	other := nemesis.Fault{Kind: nemesis.KillNode, Start: 0, End: ms(1000)}
	cs := CatchUps(samples, []nemesis.Fault{f, other}, 3, nemesis.IsolateNode)
	if len(cs) != 1 || !cs[0].Caught || cs[0].Took != 700*time.Millisecond {
		t.Fatalf("catch-ups %+v, want one of 700ms", cs)
	}
	if cs := CatchUps(samples[:4], []nemesis.Fault{f}, 3, nemesis.IsolateNode); cs[0].Caught {
		t.Errorf("a replica that never caught up counted as caught up: %+v", cs)
	}
	s := Figures([]Stall{{Fault: nemesis.Fault{Kind: nemesis.KillLeader}, Longest: 2 * time.Second}}, cs)
	if !strings.Contains(s, "leader kill -> writes resume                 n=1 p50 2s") || !strings.Contains(s, "replicas caught up       n=1 p50 700ms") {
		t.Errorf("figures:\n%s", s)
	}
}
