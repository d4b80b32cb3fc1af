package checker

import (
	"fmt"
	"math"

	"github.com/anishathalye/porcupine"

	"github.com/quorumbus/quorumbus/tests/jepsen/history"
)

// stateInput is one session-state operation as porcupine sees it.
type stateInput struct {
	session string
	set     bool
	value   string // what a set writes
}

// sessionStateModel is each session's state as a register, one porcupine
// partition per session (sessions are independent). It starts empty (no
// state); a set writes its value, a get must read the register. A set of
// unknown outcome never returns (porcupine may place it anywhere after
// its invoke, or past the end: not at all).
var sessionStateModel = porcupine.Model{
	Partition: partitionBy(func(in any) string { return in.(stateInput).session }),
	Init:      func() any { return "" },
	Step: func(state, input, output any) (bool, any) {
		in := input.(stateInput)
		if in.set {
			return true, in.value
		}
		return output.(string) == state.(string), state
	},
	Equal: func(a, b any) bool { return a.(string) == b.(string) },
	DescribeOperation: func(input, output any) string {
		in := input.(stateInput)
		if in.set {
			return fmt.Sprintf("set %s = %q", in.session, in.value)
		}
		return fmt.Sprintf("get %s -> %q", in.session, output)
	},
}

// sessionStateOperations turns the session workload's get-state and
// set-state operations into porcupine's: a fail is dropped (the broker
// refused it), a set of unknown outcome never returns, a get of unknown
// outcome is dropped (it changed nothing).
func sessionStateOperations(ops []history.Op) []porcupine.Operation {
	var out []porcupine.Operation
	for _, p := range history.Pairs(ops) {
		set := p.Invoke.F == history.SetState
		if !set && p.Invoke.F != history.GetState {
			continue
		}
		in := stateInput{session: p.Invoke.SessionID, set: set, value: p.Invoke.Attrs["state"]}
		op := porcupine.Operation{ClientId: p.Invoke.Process, Input: in, Call: p.Invoke.Time, Output: ""}
		switch p.Done.Type {
		case history.Fail:
			continue
		case history.OK:
			op.Output, op.Return = p.Done.Attrs["state"], p.Done.Time
		default:
			if !set {
				continue
			}
			op.Return = math.MaxInt64
		}
		out = append(out, op)
	}
	return out
}

// SessionState (P18): each session's state, written by its holders after
// each complete and read when a holder accepts the session, behaves as a
// linearizable register (porcupine): a read sees the latest write the
// broker acknowledged before it, or a write in flight, never an older one
// and never a write that was refused. Each session is checked on its
// own, so that a violation names its session's operations.
func SessionState(ops []history.Op) []Violation {
	bySession := map[string][]porcupine.Operation{}
	var order []string
	for _, op := range sessionStateOperations(ops) {
		s := op.Input.(stateInput).session
		if bySession[s] == nil {
			order = append(order, s)
		}
		bySession[s] = append(bySession[s], op)
	}
	var out []Violation
	for _, s := range order {
		pops := bySession[s]
		switch porcupine.CheckOperationsTimeout(sessionStateModel, pops, CatalogTimeout) {
		case porcupine.Ok:
			continue
		case porcupine.Unknown:
			out = append(out, Violation{Msg: fmt.Sprintf("session %s: porcupine gave no verdict within %v over %d state operations", s, CatalogTimeout, len(pops))})
			continue
		}
		v := Violation{Msg: fmt.Sprintf("session %s: its state's history of %d operations is not linearizable (its last 40 listed)", s, len(pops))}
		for _, p := range history.Pairs(ops) {
			if (p.Invoke.F == history.GetState || p.Invoke.F == history.SetState) && p.Invoke.SessionID == s {
				v.Ops = append(v.Ops, p.Invoke, p.Done)
			}
		}
		if len(v.Ops) > 40 {
			v.Ops = v.Ops[len(v.Ops)-40:]
		}
		out = append(out, v)
	}
	return out
}
