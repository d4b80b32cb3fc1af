package report

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/quorumbus/quorumbus/tests/jepsen/nemesis"
)

// ReplicaSample is one replica's GroupStatus of the watched group at a
// time on the run's clock.
type ReplicaSample struct {
	Time    int64  `json:"time"`
	Node    int    `json:"node"`
	Leader  bool   `json:"leader"`
	Applied uint64 `json:"applied"`
	Commit  uint64 `json:"commit"`
	// Voters, on a leader's sample: the nodes of the configuration it
	// holds. The replicas a catch-up waits for are the leader's voters
	// at the heal, not the first nodes started: placement moves replicas
	// onto spares (add-node, drain-node), and a node that no longer holds
	// the group never reports it again.
	Voters []int `json:"voters,omitempty"`
}

// CatchUp is how long after a fault's heal every replica had applied
// what the leader had committed when it was healed: for a partition,
// the time the cut-off replicas took to converge. The replicas are the
// voters of the leader's configuration at the heal; one that a later
// leader sample no longer lists (moved off its node) stops counting.
type CatchUp struct {
	Fault nemesis.Fault `json:"fault"`
	// Took is unset (and Caught false) when the samples ran out first.
	Took   time.Duration `json:"took_ns"`
	Caught bool          `json:"caught"`
}

// CatchUps measures the catch-up after every healed fault of the given
// kinds from the samples.
func CatchUps(samples []ReplicaSample, faults []nemesis.Fault, kinds ...string) []CatchUp {
	var out []CatchUp
	for _, f := range faults {
		if f.End == 0 || !slices.Contains(kinds, f.Kind) {
			continue
		}
		out = append(out, catchUp(samples, f))
	}
	return out
}

func catchUp(samples []ReplicaSample, f nemesis.Fault) CatchUp {
	c := CatchUp{Fault: f}
	// The leader's commit index and voters at the heal: its first
	// sample after.
	at := slices.IndexFunc(samples, func(s ReplicaSample) bool { return s.Time >= f.End && s.Leader })
	if at < 0 {
		return c
	}
	target := samples[at].Commit
	waiting := map[int]bool{}
	for _, v := range samples[at].Voters {
		waiting[v] = true
	}
	for _, s := range samples[at:] {
		switch {
		case s.Leader && len(s.Voters) > 0:
			for v := range waiting {
				if !slices.Contains(s.Voters, v) {
					delete(waiting, v) // moved off: nothing left to catch up
				}
			}
			if s.Applied >= target {
				delete(waiting, s.Node)
			}
		case s.Applied >= target:
			delete(waiting, s.Node)
		}
		if len(waiting) == 0 {
			c.Took, c.Caught = time.Duration(s.Time-f.End), true
			return c
		}
	}
	return c
}

// quantile of sorted durations (nearest rank).
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	i := int(q*float64(len(ds)) + 0.5)
	return ds[min(max(i-1, 0), len(ds)-1)]
}

// Figures are the availability figures of docs/reliability.md, drawn
// from the stalls and catch-ups of a run.
func Figures(stalls []Stall, catchUps []CatchUp) string {
	var b strings.Builder
	stallsOf := func(kinds ...string) []time.Duration {
		var ds []time.Duration
		for _, s := range stalls {
			if slices.Contains(kinds, s.Fault.Kind) {
				ds = append(ds, s.Longest)
			}
		}
		slices.Sort(ds)
		return ds
	}
	line := func(what string, ds []time.Duration) {
		if len(ds) == 0 {
			fmt.Fprintf(&b, "  %-44s no such fault\n", what)
			return
		}
		fmt.Fprintf(&b, "  %-44s n=%d p50 %v p99 %v max %v\n", what, len(ds),
			quantile(ds, 0.5).Round(10*time.Millisecond), quantile(ds, 0.99).Round(10*time.Millisecond), ds[len(ds)-1].Round(10*time.Millisecond))
	}
	b.WriteString("availability figures (longest gap between acknowledged sends across the fault):\n")
	line("leader kill -> writes resume", stallsOf(nemesis.KillLeader))
	line("paused leader -> writes resume", stallsOf(nemesis.PauseLeader))
	line("leader isolated -> writes resume", stallsOf(nemesis.IsolateLeader))
	var conv []time.Duration
	missed := 0
	for _, c := range catchUps {
		if c.Caught {
			conv = append(conv, c.Took)
		} else {
			missed++
		}
	}
	slices.Sort(conv)
	line("partition healed -> replicas caught up", conv)
	if missed > 0 {
		fmt.Fprintf(&b, "  %d healed partitions with no catch-up measured (no leader sample or the run ended)\n", missed)
	}
	return b.String()
}
