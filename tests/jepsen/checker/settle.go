package checker

import (
	"fmt"
	"maps"
	"slices"

	"github.com/quorumbus/quorumbus/tests/jepsen/history"
)

// Settled (P17) checks a queue whose receivers abandon, dead-letter and
// defer (workload.StartSettle) together with its dead-letter sub-queue
// dlq; explicitReason is the DeadLetterReason the workload dead-letters
// with. For each message:
//
//   - an acknowledged send ends settled: completed (from the queue, or
//     after deferral through $management; a complete of unknown outcome
//     counts) or delivered from dlq;
//   - after a dead-letter or defer the broker acknowledged, no plain
//     delivery from the queue under a newer lock (a higher delivery count,
//     or another lock at the same count); a deferred message comes back
//     only by its sequence number, a dead-lettered one only from dlq;
//   - a message completed successfully never shows up in dlq;
//   - a delivery from dlq carries the broker's reason
//     (MaxDeliveryCountExceeded) or the workload's, and the workload's
//     only after the workload asked to dead-letter it.
//
// Delivery counts stand in for time, as in Resurrected: a receiver's
// prefetched older delivery may surface after a newer one was settled.
func Settled(queue, dlq, explicitReason string) func(ops []history.Op) []Violation {
	return func(ops []history.Op) []Violation {
		type settled struct{ delivery, done history.Op }
		acked := map[string]history.Op{}
		var ids []string
		done := map[string]bool{}
		deliveries := map[string][]history.Op{} // plain deliveries from the queue
		toDLQ := map[string][]history.Op{}      // deliveries from dlq
		asked := map[string]bool{}              // a dead-letter that may have happened
		cutoffs := map[string][]settled{}       // acknowledged dead-letters and defers
		completedOK := map[string]history.Op{}
		byToken := map[string]history.Op{}
		for _, p := range history.Pairs(ops) {
			inv, d := p.Invoke, p.Done
			switch inv.F {
			case history.Send:
				if d.Type == history.OK {
					acked[inv.MsgID] = d
					ids = append(ids, inv.MsgID)
				}
			case history.Receive:
				if d.Type != history.OK {
					continue
				}
				switch {
				case d.Entity == dlq:
					toDLQ[d.MsgID] = append(toDLQ[d.MsgID], d)
					done[d.MsgID] = true
				case d.Attrs["via"] == "deferred":
				default:
					deliveries[d.MsgID] = append(deliveries[d.MsgID], d)
				}
				byToken[d.LockToken] = d
			case history.Complete:
				// A complete of unknown outcome may have taken the
				// message: it cannot be shown lost.
				if d.Type == history.OK || d.Type == history.Info {
					done[inv.MsgID] = true
				}
				if d.Type == history.OK && inv.Entity == queue {
					completedOK[inv.MsgID] = d
				}
			case history.DeadLetter, history.Defer:
				if inv.F == history.DeadLetter && d.Type != history.Fail {
					asked[inv.MsgID] = true
				}
				if d.Type == history.OK {
					if dl, ok := byToken[inv.LockToken]; ok {
						cutoffs[inv.MsgID] = append(cutoffs[inv.MsgID], settled{dl, d})
					}
				}
			}
		}
		var out []Violation
		for _, id := range ids {
			if !done[id] {
				out = append(out, Violation{Msg: fmt.Sprintf("acknowledged send %s was never completed nor received from %s", id, dlq), Ops: []history.Op{acked[id]}})
			}
		}
		for _, id := range slices.Sorted(maps.Keys(cutoffs)) {
			cs := cutoffs[id]
			for _, c := range cs {
				for _, dl := range deliveries[id] {
					newer := dl.DeliveryCount > c.delivery.DeliveryCount ||
						dl.DeliveryCount == c.delivery.DeliveryCount && dl.LockToken != c.delivery.LockToken
					if newer {
						out = append(out, Violation{Msg: fmt.Sprintf("%s delivered from the queue under a newer lock after its %s was acknowledged", id, c.done.F),
							Ops: []history.Op{c.delivery, c.done, dl}})
					}
				}
			}
		}
		for _, id := range slices.Sorted(maps.Keys(toDLQ)) {
			ds := toDLQ[id]
			if c, ok := completedOK[id]; ok {
				out = append(out, Violation{Msg: id + " reached the dead-letter sub-queue although it was completed", Ops: []history.Op{c, ds[0]}})
			}
			for _, d := range ds {
				switch reason := d.Attrs["reason"]; reason {
				case "MaxDeliveryCountExceeded":
				case explicitReason:
					if !asked[id] {
						out = append(out, Violation{Msg: id + " dead-lettered with the workload's reason, which never asked for it", Ops: []history.Op{d}})
					}
				default:
					out = append(out, Violation{Msg: fmt.Sprintf("%s dead-lettered for reason %q", id, reason), Ops: []history.Op{d}})
				}
			}
		}
		return out
	}
}
