package report

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/quorumbus/quorumbus/tests/jepsen/history"
	"github.com/quorumbus/quorumbus/tests/jepsen/nemesis"
)

// Stall is how a fault hurt availability: the longest stretch without an
// acknowledged send that overlaps the fault, and whether sends came back
// while the fault was still in effect (the cluster routed around it) or
// only after it was healed.
type Stall struct {
	Fault nemesis.Fault `json:"fault"`
	// Longest gap between two acknowledged sends (the first may come
	// before the fault) that ends after the fault starts and begins
	// before it ends.
	Longest time.Duration `json:"longest_ns"`
	// ResumedDuringFault: the gap ended before the heal.
	ResumedDuringFault bool `json:"resumed_during_fault"`
}

// StallThreshold is the gap below which a fault counts as unnoticed:
// the workload's own send interval and the machine's jitter stay under
// it.
const StallThreshold = time.Second

// Stalls measures each fault's stall from the history. A figure, not a
// check: the plan's availability targets are for the soak profile.
func Stalls(ops []history.Op, faults []nemesis.Fault) []Stall {
	var acks []int64
	for _, p := range history.Pairs(ops) {
		if p.Invoke.F == history.Send && p.Done.Type == history.OK {
			acks = append(acks, p.Done.Time)
		}
	}
	slices.Sort(acks)
	var out []Stall
	for _, f := range faults {
		end := f.End
		if end == 0 {
			end = f.Start
		}
		s := Stall{Fault: f}
		// The last ack before the fault opens the first gap.
		i, _ := slices.BinarySearch(acks, f.Start)
		prev := f.Start
		if i > 0 {
			prev = acks[i-1]
		}
		for ; i < len(acks) && prev < end; i++ {
			if gap := time.Duration(acks[i] - prev); gap > s.Longest {
				s.Longest, s.ResumedDuringFault = gap, acks[i] < end
			}
			prev = acks[i]
		}
		if i == len(acks) && prev < end {
			// No ack after the fault's last one before the heal: the gap
			// runs to the end of the history at least.
			s.Longest, s.ResumedDuringFault = max(s.Longest, time.Duration(end-prev)), false
		}
		out = append(out, s)
	}
	return out
}

// StallSummary has a line per fault kind: how many faults stalled sends
// for StallThreshold or more, the longest stall, and how many stalls
// lasted until the heal.
func StallSummary(stalls []Stall) string {
	type agg struct {
		n, stalled, untilHeal int
		longest               time.Duration
	}
	by := map[string]*agg{}
	for _, s := range stalls {
		a := by[s.Fault.Kind]
		if a == nil {
			a = &agg{}
			by[s.Fault.Kind] = a
		}
		a.n++
		a.longest = max(a.longest, s.Longest)
		if s.Longest >= StallThreshold {
			a.stalled++
			if !s.ResumedDuringFault {
				a.untilHeal++
			}
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "send stalls (no acknowledged send for %v or more) by fault kind:\n", StallThreshold)
	for _, k := range sortedKeys(by) {
		a := by[k]
		fmt.Fprintf(&b, "  %-17s %2d faults, %2d stalled, %2d until the heal, longest %v\n", k, a.n, a.stalled, a.untilHeal, a.longest.Round(10*time.Millisecond))
	}
	return b.String()
}
