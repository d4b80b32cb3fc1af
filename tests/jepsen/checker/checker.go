// Package checker holds the queue checkers: pure functions over a
// history (package history) that say whether the broker kept its promises
// and, when it did not, which operations show it. They never look at the
// cluster, so a saved history.jsonl can be checked again, and each is
// tested on synthetic histories that violate it (checker_test.go).
//
// The property ids (P1, P2, ...) name the properties in run reports;
// docs/reliability.md describes each checker.
package checker

import (
	"fmt"
	"sort"

	"github.com/quorumbus/quorumbus/tests/jepsen/history"
)

// Violation is one broken promise and the operations that show it.
type Violation struct {
	Msg string       `json:"msg"`
	Ops []history.Op `json:"ops"`
}

// Result is one checker's verdict.
type Result struct {
	Name       string      `json:"name"`
	Property   string      `json:"property"`
	Valid      bool        `json:"valid"`
	Violations []Violation `json:"violations,omitempty"`
}

// Checker is a pure function over a whole history.
type Checker struct {
	Name     string
	Property string
	Check    func(ops []history.Op) []Violation
}

// Queue is every checker that applies to a queue today (no sessions,
// duplicate detection, scheduling or transactions in the workload yet).
var Queue = []Checker{
	{"lost", "P1: every acknowledged send is received by the end of the drain", Lost},
	{"unexpected", "P2: nothing is received that was never sent", Unexpected},
	{"aborted-read", "P3: a send that failed definitely is never received", AbortedRead},
	{"double-complete", "P5: a message is completed successfully at most once", DoubleComplete},
	{"resurrected", "P4: no delivery of a message follows the delivery that completed it", Resurrected},
	{"delivery-count", "P7: each delivery of a message has a higher delivery count than the one before", DeliveryCount},
	{"sequence-number", "P8a/b: a message keeps one sequence number, and no two messages share one", SequenceNumbers},
}

// Run runs every checker over ops. A checker lists at most maxViolations
// violations; the rest are counted in a last one.
func Run(checkers []Checker, ops []history.Op) []Result {
	const maxViolations = 50
	var out []Result
	for _, c := range checkers {
		v := c.Check(ops)
		if len(v) > maxViolations {
			more := len(v) - maxViolations
			v = append(v[:maxViolations], Violation{Msg: fmt.Sprintf("... and %d more", more)})
		}
		out = append(out, Result{Name: c.Name, Property: c.Property, Valid: len(v) == 0, Violations: v})
	}
	return out
}

// delivery is a receive that returned a message.
type delivery = history.Op

// index gathers what the checkers share: the sends by outcome and the
// deliveries and successful completes of each message id.
type index struct {
	invoked    map[string]history.Op // send invokes by id
	sendDone   map[string]history.Op // send completions by id
	deliveries map[string][]delivery // in history order
	completes  map[string][]history.Op
	ids        []string // every id seen, sorted, so that output is stable
}

func build(ops []history.Op) *index {
	ix := &index{
		invoked:    map[string]history.Op{},
		sendDone:   map[string]history.Op{},
		deliveries: map[string][]delivery{},
		completes:  map[string][]history.Op{},
	}
	seen := map[string]bool{}
	note := func(id string) {
		if !seen[id] {
			seen[id] = true
			ix.ids = append(ix.ids, id)
		}
	}
	for _, p := range history.Pairs(ops) {
		switch p.Invoke.F {
		case history.Send:
			ix.invoked[p.Invoke.MsgID] = p.Invoke
			if p.Done.Type != "" {
				ix.sendDone[p.Invoke.MsgID] = p.Done
			}
			note(p.Invoke.MsgID)
		case history.Receive:
			if p.Done.Type == history.OK {
				ix.deliveries[p.Done.MsgID] = append(ix.deliveries[p.Done.MsgID], p.Done)
				note(p.Done.MsgID)
			}
		case history.Complete:
			if p.Done.Type == history.OK {
				ix.completes[p.Invoke.MsgID] = append(ix.completes[p.Invoke.MsgID], p.Done)
			}
		}
	}
	sort.Strings(ix.ids)
	return ix
}

// Lost (P1): an acknowledged send that no receive returned. The workload
// drains the queue with the faults healed before the history ends, so a
// message still missing then is gone.
func Lost(ops []history.Op) []Violation {
	ix := build(ops)
	var out []Violation
	for _, id := range ix.ids {
		done, ok := ix.sendDone[id]
		if ok && done.Type == history.OK && len(ix.deliveries[id]) == 0 {
			out = append(out, Violation{Msg: "acknowledged send " + id + " never received", Ops: []history.Op{ix.invoked[id], done}})
		}
	}
	return out
}

// Unexpected (P2): a delivery of an id no send attempted.
func Unexpected(ops []history.Op) []Violation {
	ix := build(ops)
	var out []Violation
	for _, id := range ix.ids {
		if _, sent := ix.invoked[id]; !sent && len(ix.deliveries[id]) > 0 {
			out = append(out, Violation{Msg: "received " + id + ", which was never sent", Ops: ix.deliveries[id][:1]})
		}
	}
	return out
}

// AbortedRead (P3): a delivery of a send that failed definitely. The
// workload reports fail only for errors that guarantee the broker did
// not take the message; anything unsure is info.
func AbortedRead(ops []history.Op) []Violation {
	ix := build(ops)
	var out []Violation
	for _, id := range ix.ids {
		done, ok := ix.sendDone[id]
		if ok && done.Type == history.Fail && len(ix.deliveries[id]) > 0 {
			out = append(out, Violation{Msg: "received " + id + ", whose send failed", Ops: []history.Op{done, ix.deliveries[id][0]}})
		}
	}
	return out
}

// DoubleComplete (P5): two successful completes of one message. Once a
// complete succeeds the message is gone; another complete can only
// succeed on a redelivery that should not exist or a lock that should
// be dead.
func DoubleComplete(ops []history.Op) []Violation {
	ix := build(ops)
	var out []Violation
	for _, id := range ix.ids {
		if c := ix.completes[id]; len(c) > 1 {
			out = append(out, Violation{Msg: fmt.Sprintf("%s completed successfully %d times", id, len(c)), Ops: c})
		}
	}
	return out
}

// Resurrected (P4): a delivery of a message with a higher delivery count
// than the delivery whose lock completed it. A completed message must
// never be handed out again.
//
// It compares delivery counts, not times: with prefetch, a receiver can
// pop an older delivery from its buffer after another receiver completed
// a newer one, and that is fine (the older lock is dead and its complete
// must fail; DoubleComplete checks that).
func Resurrected(ops []history.Op) []Violation {
	ix := build(ops)
	var out []Violation
	for _, id := range ix.ids {
		for _, c := range ix.completes[id] {
			var completed *delivery
			for i, d := range ix.deliveries[id] {
				if d.LockToken == c.LockToken {
					completed = &ix.deliveries[id][i]
				}
			}
			if completed == nil {
				out = append(out, Violation{Msg: id + " completed under a lock no delivery carried", Ops: []history.Op{c}})
				continue
			}
			for _, d := range ix.deliveries[id] {
				if d.DeliveryCount > completed.DeliveryCount {
					out = append(out, Violation{Msg: id + " delivered again after it was completed", Ops: []history.Op{*completed, c, d}})
				}
			}
		}
	}
	return out
}

// DeliveryCount (P7): each new lock on a message raises its delivery
// count, so two deliveries under different locks never share a count,
// and one receiver, which gets a link's deliveries in the order the
// broker sent them, never sees a message's count stay or go down.
func DeliveryCount(ops []history.Op) []Violation {
	ix := build(ops)
	var out []Violation
	for _, id := range ix.ids {
		ds := ix.deliveries[id]
		byCount := map[uint32]delivery{}
		last := map[int]delivery{} // process -> its latest delivery of id
		for _, d := range ds {
			if prev, ok := byCount[d.DeliveryCount]; ok && prev.LockToken != d.LockToken {
				out = append(out, Violation{Msg: fmt.Sprintf("%s delivered under two locks with delivery count %d", id, d.DeliveryCount), Ops: []history.Op{prev, d}})
			}
			byCount[d.DeliveryCount] = d
			if prev, ok := last[d.Process]; ok && d.DeliveryCount <= prev.DeliveryCount {
				out = append(out, Violation{Msg: fmt.Sprintf("%s: delivery count went from %d to %d at one receiver", id, prev.DeliveryCount, d.DeliveryCount), Ops: []history.Op{prev, d}})
			}
			last[d.Process] = d
		}
	}
	return out
}

// SequenceNumbers (P8a, P8b): the queue is one partition, so a sequence
// number names one message. Every delivery of a message carries the
// number it was enqueued with (two numbers for one id mean one send was
// enqueued twice: the workload never sends an id again), and no two
// ids share one.
func SequenceNumbers(ops []history.Op) []Violation {
	ix := build(ops)
	var out []Violation
	owner := map[int64]delivery{}
	for _, id := range ix.ids {
		var first *delivery
		for i, d := range ix.deliveries[id] {
			if first == nil {
				first = &ix.deliveries[id][i]
			} else if d.Seq != first.Seq {
				out = append(out, Violation{Msg: fmt.Sprintf("%s has sequence numbers %d and %d", id, first.Seq, d.Seq), Ops: []history.Op{*first, d}})
			}
			if o, ok := owner[d.Seq]; ok && o.MsgID != id {
				out = append(out, Violation{Msg: fmt.Sprintf("sequence number %d carried by %s and %s", d.Seq, o.MsgID, id), Ops: []history.Op{o, d}})
			}
			owner[d.Seq] = d
		}
	}
	return out
}

// Summary counts what a run did: the figures a report prints.
type Summary struct {
	Ops              int `json:"ops"` // invokes
	SendsOK          int `json:"sends_ok"`
	SendsFail        int `json:"sends_fail"`
	SendsInfo        int `json:"sends_info"`
	Received         int `json:"received_distinct"`
	Deliveries       int `json:"deliveries"`
	Redeliveries     int `json:"redeliveries"`       // deliveries beyond the first of an id
	Recovered        int `json:"recovered"`          // info sends that were received
	CompletesOK      int `json:"completes_ok"`       // successful completes
	CompletesFail    int `json:"completes_fail"`     // refused: lock lost
	CompletesInfo    int `json:"completes_info"`     // outcome unknown
	EmptyReceives    int `json:"empty_receives"`     // receives that timed out empty
	UnfinishedAtStop int `json:"unfinished_at_stop"` // invokes with no completion
}

// Summarize counts the history's operations by kind and outcome.
func Summarize(ops []history.Op) Summary {
	var s Summary
	ix := build(ops)
	for _, p := range history.Pairs(ops) {
		s.Ops++
		t := p.Done.Type
		if t == "" {
			s.UnfinishedAtStop++
			continue
		}
		switch p.Invoke.F {
		case history.Send:
			switch t {
			case history.OK:
				s.SendsOK++
			case history.Fail:
				s.SendsFail++
			case history.Info:
				s.SendsInfo++
			}
		case history.Receive:
			if t == history.OK {
				s.Deliveries++
			} else {
				s.EmptyReceives++
			}
		case history.Complete:
			switch t {
			case history.OK:
				s.CompletesOK++
			case history.Fail:
				s.CompletesFail++
			case history.Info:
				s.CompletesInfo++
			}
		}
	}
	for id, ds := range ix.deliveries {
		s.Received++
		s.Redeliveries += len(ds) - 1
		if d, ok := ix.sendDone[id]; ok && d.Type == history.Info {
			s.Recovered++
		}
	}
	return s
}
