package report

import (
	"fmt"
	"strings"

	"github.com/quorumbus/quorumbus/tests/jepsen/history"
)

// EntityCounts has a line per entity of the feature workloads (the queue
// workload's are in the summary's operations line): each function's
// operations as ok/fail/info, so a reader sees that every workload did
// its work, renews and session accepts among it.
func EntityCounts(ops []history.Op) string {
	type outcome struct{ ok, fail, info int }
	by := map[string]map[string]*outcome{}
	for _, p := range history.Pairs(ops) {
		e := p.Invoke.Entity
		if e == "" || p.Done.Type == "" {
			continue
		}
		if by[e] == nil {
			by[e] = map[string]*outcome{}
		}
		o := by[e][p.Invoke.F]
		if o == nil {
			o = &outcome{}
			by[e][p.Invoke.F] = o
		}
		switch p.Done.Type {
		case history.OK:
			o.ok++
		case history.Fail:
			o.fail++
		default:
			o.info++
		}
	}
	var b strings.Builder
	if len(by) > 0 {
		b.WriteString("workload operations by entity (ok/fail/info):\n")
	}
	for _, e := range sortedKeys(by) {
		fmt.Fprintf(&b, "  %s:", e)
		for _, f := range sortedKeys(by[e]) {
			o := by[e][f]
			fmt.Fprintf(&b, " %s %d/%d/%d", f, o.ok, o.fail, o.info)
		}
		b.WriteString("\n")
	}
	return b.String()
}
