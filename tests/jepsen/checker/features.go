package checker

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/quorumbus/quorumbus/tests/jepsen/history"
)

// Suite is a workload's checkers and the entities whose operations they
// read.
type Suite struct {
	Name     string
	Entities []string
	Checkers []Checker
}

// RunSuites runs every suite over its own operations; each result's name
// is prefixed with its suite's.
func RunSuites(suites []Suite, ops []history.Op) []Result {
	var out []Result
	for _, s := range suites {
		for _, r := range Run(s.Checkers, history.Select(ops, s.Entities...)) {
			r.Name = s.Name + "/" + r.Name
			out = append(out, r)
		}
	}
	return out
}

// perCopy renames every delivery and complete to id@sequence-number, so
// that the per-message checkers judge each copy of an id on its own: a
// duplicate that the window let through legitimately is a second
// message with the same id.
func perCopy(ops []history.Op) []history.Op {
	byToken := map[string]string{}
	out := make([]history.Op, 0, len(ops))
	for _, op := range ops {
		if op.F == history.Receive && op.Type == history.OK {
			byToken[op.LockToken] = fmt.Sprintf("%s@%d", op.MsgID, op.Seq)
		}
	}
	for _, op := range ops {
		switch op.F {
		case history.Receive:
			if op.Type == history.OK {
				op.MsgID = byToken[op.LockToken]
			}
		case history.Complete:
			if id, ok := byToken[op.LockToken]; ok {
				op.MsgID = id
			}
		}
		out = append(out, op)
	}
	return out
}

// onCopies runs a per-message checker over perCopy's history.
func onCopies(f func([]history.Op) []Violation) func([]history.Op) []Violation {
	return func(ops []history.Op) []Violation { return f(perCopy(ops)) }
}

// DedupTolerance is how far the broker's stamp of a send may lie from
// the harness's clock (one machine, no skew): a resend is judged only
// when it lies this far clear of the window's edge.
const DedupTolerance = 500 * time.Millisecond

// Skew is a stretch of the run (harness times, nanoseconds since the
// start; End 0: to the end) during which one node's wall clock was off by
// By. The leader's clock stamps enqueue times and decides when a scheduled
// message is due and when a duplicate-detection window ends, so a skewed
// leader moves both by design; the checkers widen their tolerance by the
// skews in effect around each judgement, and by nothing elsewhere.
type Skew struct {
	Start, End int64
	By         time.Duration
}

// skewAround is the largest |By| of the skews in effect at some time in
// [from, to].
func skewAround(skews []Skew, from, to int64) time.Duration {
	var most time.Duration
	for _, s := range skews {
		if s.Start <= to && (s.End == 0 || s.End >= from) {
			most = max(most, s.By, -s.By)
		}
	}
	return most
}

// Dedup (P9) checks a queue with duplicate detection over window. For
// each id whose first send was acknowledged it counts the distinct
// messages (sequence numbers) delivered and bounds them: a resend
// acknowledged certainly within the window (it completed less than the
// window after the first send began) must have been dropped; one
// acknowledged certainly after it (it began more than the window after
// the first send completed) must be a new message; one whose outcome is
// unknown or that lies near the edge may be either; a failed one adds
// nothing. Too few copies is a loss or a wrong suppression, too many a
// duplicate let through. The edge is DedupTolerance wide, and wider by
// the skews in effect while the first send and the resend were stamped
// (each by the leader of its time).
func Dedup(window time.Duration, skews []Skew) func(ops []history.Op) []Violation {
	return func(ops []history.Op) []Violation {
		sends := map[string][]history.Pair{}
		copies := map[string]map[int64]history.Op{}
		var ids []string
		for _, p := range history.Pairs(ops) {
			switch p.Invoke.F {
			case history.Send:
				if sends[p.Invoke.MsgID] == nil {
					ids = append(ids, p.Invoke.MsgID)
				}
				sends[p.Invoke.MsgID] = append(sends[p.Invoke.MsgID], p)
			case history.Receive:
				if p.Done.Type == history.OK {
					if copies[p.Done.MsgID] == nil {
						copies[p.Done.MsgID] = map[int64]history.Op{}
					}
					copies[p.Done.MsgID][p.Done.Seq] = p.Done
				}
			}
		}
		sort.Strings(ids)
		win := int64(window)
		var out []Violation
		for _, id := range ids {
			ss := sends[id]
			first := ss[0]
			if first.Done.Type != history.OK {
				continue
			}
			lo, hi := 1, 1
			why := []history.Op{first.Invoke, first.Done}
			firstSkew := skewAround(skews, first.Invoke.Time, first.Done.Time)
			for _, r := range ss[1:] {
				tol := int64(DedupTolerance + firstSkew + skewAround(skews, r.Invoke.Time, r.Done.Time))
				switch {
				case r.Done.Type == history.Fail:
				case r.Done.Type == history.OK && r.Done.Time-first.Invoke.Time < win-tol:
					why = append(why, r.Invoke, r.Done) // within: dropped
				case r.Done.Type == history.OK && r.Invoke.Time-first.Done.Time > win+tol:
					lo, hi = lo+1, hi+1
					why = append(why, r.Invoke, r.Done)
				default:
					hi++
				}
			}
			got := len(copies[id])
			for _, d := range sortedCopies(copies[id]) {
				why = append(why, d)
			}
			switch {
			case got < lo:
				out = append(out, Violation{Msg: fmt.Sprintf("%s: %d messages delivered, at least %d acknowledged (a loss, or a resend past the window dropped)", id, got, lo), Ops: why})
			case got > hi:
				out = append(out, Violation{Msg: fmt.Sprintf("%s: %d messages delivered, at most %d possible (a duplicate within the window let through)", id, got, hi), Ops: why})
			}
		}
		return out
	}
}

func sortedCopies(m map[int64]history.Op) []history.Op {
	var out []history.Op
	for _, d := range m {
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Seq < out[j].Seq })
	return out
}

// ScheduledTolerance is how early a scheduled message may reach the
// workload: the broker stamps times in milliseconds and runs on the
// harness's machine and clock.
const ScheduledTolerance = 100 * time.Millisecond

// Scheduled (P10): no scheduled message reaches a receiver before its
// scheduled enqueue time (the send's AtMs) less tolerance, on the wall
// clock (a receive's AtMs). A message delivered e early was activated,
// before its receive, by a leader whose clock was at least e ahead: the
// tolerance widens by the skew ahead of each fault in effect between By
// before the receive and its end.
func Scheduled(tolerance time.Duration, skews []Skew) func(ops []history.Op) []Violation {
	return func(ops []history.Op) []Violation {
		at := map[string]history.Op{}
		var out []Violation
		for _, p := range history.Pairs(ops) {
			switch p.Invoke.F {
			case history.Send:
				at[p.Invoke.MsgID] = p.Invoke
			case history.Receive:
				d := p.Done
				s, ok := at[d.MsgID]
				if d.Type != history.OK || !ok || s.AtMs == 0 || d.AtMs >= s.AtMs-tolerance.Milliseconds() {
					continue
				}
				allowed := tolerance
				for _, k := range skews {
					// Activated during k, at most k.By before the
					// scheduled time and before the receive ended.
					if k.By > 0 && k.Start <= d.Time && (k.End == 0 || k.End >= d.Time-int64(k.By)) {
						allowed = max(allowed, tolerance+k.By)
					}
				}
				if d.AtMs < s.AtMs-allowed.Milliseconds() {
					out = append(out, Violation{Msg: fmt.Sprintf("%s delivered %d ms before its scheduled time (%v allowed)", d.MsgID, s.AtMs-d.AtMs, allowed), Ops: []history.Op{s, d}})
				}
			}
		}
		return out
	}
}

// hold is a stretch over which a receiver certainly held a lock: from
// the end of the receive (or accept) that granted it, which came after
// the grant, to the start of the last operation the broker accepted
// under it, which it judged after that start.
type hold struct {
	key        string // message id or session id
	name       string // lock token or session holding
	start, end int64
	ops        []history.Op
}

// overlaps reports every two holds of one key, under different names,
// that overlap: two receivers held one lock at once.
func overlaps(holds []hold, what string) []Violation {
	sort.Slice(holds, func(i, j int) bool {
		if holds[i].key != holds[j].key {
			return holds[i].key < holds[j].key
		}
		return holds[i].start < holds[j].start
	})
	var out []Violation
	for i := range holds {
		for j := i + 1; j < len(holds) && holds[j].key == holds[i].key; j++ {
			a, b := holds[i], holds[j]
			if a.name != b.name && b.start < a.end && a.start < b.end {
				out = append(out, Violation{Msg: fmt.Sprintf("%s %s held by %s and %s at once", what, a.key, a.name, b.name),
					Ops: append(append([]history.Op(nil), a.ops...), b.ops...)})
			}
		}
	}
	return out
}

// LockRenew (P11): after a renew of a lock was answered lock-lost, no
// complete under that lock succeeds; and a message's lock is held by at
// most one receiver at a time: the certain holds (receive to the last
// renew or complete the broker accepted) of two lock tokens of one
// message never overlap.
func LockRenew(ops []history.Op) []Violation {
	recv := map[string]history.Op{}   // lock token -> delivery
	lost := map[string]history.Op{}   // lock token -> the renew answered lock-lost
	lastOK := map[string]history.Op{} // lock token -> invoke of the last accepted renew or complete
	var out []Violation
	for _, p := range history.Pairs(ops) {
		tok := p.Invoke.LockToken
		switch p.Invoke.F {
		case history.Receive:
			if p.Done.Type == history.OK {
				recv[p.Done.LockToken] = p.Done
			}
		case history.Renew:
			switch p.Done.Type {
			case history.Fail:
				if _, ok := lost[tok]; !ok {
					lost[tok] = p.Done
				}
			case history.OK:
				lastOK[tok] = p.Invoke
			}
		case history.Complete:
			if p.Done.Type != history.OK {
				continue
			}
			if l, ok := lost[tok]; ok && l.Time < p.Invoke.Time {
				out = append(out, Violation{Msg: fmt.Sprintf("%s completed under lock %s after a renew was told the lock is lost", p.Invoke.MsgID, tok), Ops: []history.Op{l, p.Invoke, p.Done}})
			}
			lastOK[tok] = p.Invoke
		}
	}
	var holds []hold
	for tok, d := range recv {
		if e, ok := lastOK[tok]; ok && e.Time > d.Time {
			holds = append(holds, hold{key: d.MsgID, name: tok, start: d.Time, end: e.Time, ops: []history.Op{d, e}})
		}
	}
	return append(out, overlaps(holds, "the lock of message")...)
}

// SessionExclusive (P12): a session is locked by at most one receiver at
// a time: the certain holds of two holdings of one session (from the
// accept's end to the start of the last complete the broker accepted
// on that link) never overlap.
func SessionExclusive(ops []history.Op) []Violation {
	accepted := map[string]history.Op{} // holding -> accept ok
	lastOK := map[string]history.Op{}
	for _, p := range history.Pairs(ops) {
		h := p.Invoke.Attrs["holding"]
		switch p.Invoke.F {
		case history.AcceptSession:
			if p.Done.Type == history.OK {
				accepted[h] = p.Done
			}
		case history.Complete:
			if p.Done.Type == history.OK && h != "" {
				lastOK[h] = p.Invoke
			}
		}
	}
	var holds []hold
	for h, a := range accepted {
		if e, ok := lastOK[h]; ok && e.Time > a.Time {
			holds = append(holds, hold{key: a.SessionID, name: h, start: a.Time, end: e.Time, ops: []history.Op{a, e}})
		}
	}
	return overlaps(holds, "session")
}

// sessionIndex reads k of a session message id (workload.SessionMessageID).
func sessionIndex(id string) (string, int, bool) {
	i := strings.LastIndexByte(id, '-')
	if i < 0 {
		return "", 0, false
	}
	k, err := strconv.Atoi(id[i+1:])
	return id[:i], k, err == nil
}

// SessionOrder (P13): a session's messages are delivered in order. Each
// session is sent by one sender one message at a time, so an
// acknowledged message j was enqueued before every later k; no delivery
// of k may reach a receiver while j has not been completed, that is,
// unless a complete of j (accepted, or of unknown outcome) began before
// k arrived.
func SessionOrder(ops []history.Op) []Violation {
	type msg struct {
		sent     history.Op // ok send
		settled  int64      // earliest start of an accepted or unknown complete; -1 if none
		hasSent  bool
		complete history.Op
	}
	bySession := map[string]map[int]*msg{}
	get := func(id string) *msg {
		s, k, ok := sessionIndex(id)
		if !ok {
			return nil
		}
		if bySession[s] == nil {
			bySession[s] = map[int]*msg{}
		}
		m := bySession[s][k]
		if m == nil {
			m = &msg{settled: -1}
			bySession[s][k] = m
		}
		return m
	}
	pairs := history.Pairs(ops)
	for _, p := range pairs {
		switch p.Invoke.F {
		case history.Send:
			if m := get(p.Invoke.MsgID); m != nil && p.Done.Type == history.OK {
				m.sent, m.hasSent = p.Done, true
			}
		case history.Complete:
			if m := get(p.Invoke.MsgID); m != nil && (p.Done.Type == history.OK || p.Done.Type == history.Info) {
				if m.settled < 0 || p.Invoke.Time < m.settled {
					m.settled, m.complete = p.Invoke.Time, p.Invoke
				}
			}
		}
	}
	var out []Violation
	reported := map[string]bool{}
	for _, p := range pairs {
		if p.Invoke.F != history.Receive || p.Done.Type != history.OK {
			continue
		}
		d := p.Done
		s, k, ok := sessionIndex(d.MsgID)
		if !ok {
			continue
		}
		for j, m := range bySession[s] {
			if j >= k || !m.hasSent || (m.settled >= 0 && m.settled < d.Time) {
				continue
			}
			key := fmt.Sprintf("%s/%d/%d", s, j, k)
			if reported[key] {
				continue
			}
			reported[key] = true
			v := Violation{Msg: fmt.Sprintf("session %s: message %d delivered before the earlier message %d was completed", s, k, j), Ops: []history.Op{m.sent, d}}
			if m.settled >= 0 {
				v.Ops = append(v.Ops, m.complete)
			}
			out = append(out, v)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Msg < out[j].Msg })
	return out
}

// Topic (P14): every acknowledged send to the topic reaches exactly the
// subscriptions whose rule matches its properties (the send's Attrs),
// and a send of unknown outcome reaches all of them or none; nothing
// reaches a subscription whose rule does not match, and nothing arrives
// that was never sent. subs maps each subscription's entity to its rule.
func Topic(topic string, subs map[string]func(map[string]string) bool) func(ops []history.Op) []Violation {
	return func(ops []history.Op) []Violation {
		sends := map[string]history.Pair{}
		got := map[string]map[string]history.Op{} // id -> subscription -> first delivery
		var ids []string
		for _, p := range history.Pairs(ops) {
			switch {
			case p.Invoke.F == history.Send && p.Invoke.Entity == topic:
				sends[p.Invoke.MsgID] = p
				ids = append(ids, p.Invoke.MsgID)
			case p.Invoke.F == history.Receive && p.Done.Type == history.OK:
				if got[p.Done.MsgID] == nil {
					got[p.Done.MsgID] = map[string]history.Op{}
				}
				if _, ok := got[p.Done.MsgID][p.Done.Entity]; !ok {
					got[p.Done.MsgID][p.Done.Entity] = p.Done
				}
			}
		}
		var out []Violation
		for id, bySub := range got {
			if _, ok := sends[id]; !ok {
				for _, d := range bySub {
					out = append(out, Violation{Msg: "received " + id + ", which was never sent to the topic", Ops: []history.Op{d}})
				}
			}
		}
		names := make([]string, 0, len(subs))
		for n := range subs {
			names = append(names, n)
		}
		sort.Strings(names)
		sort.Strings(ids)
		for _, id := range ids {
			p := sends[id]
			arrived := len(got[id]) > 0
			for _, sub := range names {
				d, in := got[id][sub]
				want := subs[sub](p.Invoke.Attrs)
				switch {
				case in && !want:
					out = append(out, Violation{Msg: fmt.Sprintf("%s reached %s, whose rule does not match it", id, sub), Ops: []history.Op{p.Invoke, d}})
				case in && p.Done.Type == history.Fail:
					out = append(out, Violation{Msg: fmt.Sprintf("%s reached %s although its send failed", id, sub), Ops: []history.Op{p.Done, d}})
				case !in && want && p.Done.Type == history.OK:
					out = append(out, Violation{Msg: fmt.Sprintf("acknowledged send %s never reached %s", id, sub), Ops: []history.Op{p.Invoke, p.Done}})
				case !in && want && arrived:
					out = append(out, Violation{Msg: fmt.Sprintf("%s reached some matching subscriptions but not %s", id, sub), Ops: []history.Op{p.Invoke, p.Done}})
				}
			}
		}
		return out
	}
}

// Without returns checkers without the named ones.
func Without(cs []Checker, names ...string) []Checker {
	var out []Checker
	for _, c := range cs {
		skip := false
		for _, n := range names {
			skip = skip || c.Name == n
		}
		if !skip {
			out = append(out, c)
		}
	}
	return out
}

// PerCopy returns the named checkers judging each copy of an id
// (id@sequence-number) on its own: for a queue where one id may
// legitimately become two messages.
func PerCopy(cs []Checker, names ...string) []Checker {
	var out []Checker
	for _, c := range cs {
		for _, n := range names {
			if c.Name == n {
				c.Check = onCopies(c.Check)
				out = append(out, c)
			}
		}
	}
	return out
}
