package report

import (
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/tests/jepsen/history"
	"github.com/quorumbus/quorumbus/tests/jepsen/nemesis"
)

// acks builds a history with one acknowledged send completing at each
// of the given times (seconds).
func acks(ts ...float64) []history.Op {
	var ops []history.Op
	for _, t := range ts {
		ns := int64(t * 1e9)
		ops = append(ops,
			history.Op{Process: 1, Type: history.Invoke, F: history.Send, Time: ns},
			history.Op{Process: 1, Type: history.OK, F: history.Send, Time: ns})
	}
	return ops
}

func TestStalls(t *testing.T) {
	fault := nemesis.Fault{Kind: "kill-leader", Start: 2e9, End: 6e9}
	cases := []struct {
		name    string
		ops     []history.Op
		longest time.Duration
		resumed bool
	}{
		{"resumed during the fault", acks(1.9, 4.9, 5.0, 7), 3 * time.Second, true},
		{"only after the heal", acks(1.9, 6.5, 7), 4600 * time.Millisecond, false},
		{"the longest of several gaps", acks(1.9, 2.1, 2.3, 5.9, 6.1), 3600 * time.Millisecond, true},
		{"nothing after the fault", acks(1.5), 4500 * time.Millisecond, false},
		// A gap that closed before the fault began is not the fault's.
		{"earlier gap ignored", acks(0, 1.9, 2.4, 2.9, 3.4, 3.9, 4.4, 4.9, 5.4, 5.9, 6.1), 500 * time.Millisecond, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := Stalls(c.ops, []nemesis.Fault{fault})[0]
			if s.Longest != c.longest || s.ResumedDuringFault != c.resumed {
				t.Errorf("got longest %v resumed %v, want %v %v", s.Longest, s.ResumedDuringFault, c.longest, c.resumed)
			}
		})
	}
}
