package checker

import (
	"fmt"
	"math"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/quorumbus/quorumbus/tests/jepsen/history"
)

// catalogInput is one metadata operation as porcupine sees it.
type catalogInput struct {
	f, name string
}

// catalogModel is the catalog as a set of names, one porcupine
// partition per name (the names are independent). A create or delete of
// unknown outcome may have taken effect or not, so the model is
// nondeterministic; an unknown outcome is "" and matches either.
var catalogModel = (&porcupine.NondeterministicModel{
	Partition: partitionBy(func(in any) string { return in.(catalogInput).name }),
	Init:      func() []any { return []any{false} },
	Step: func(state, input, output any) []any {
		exists, in, out := state.(bool), input.(catalogInput), output.(string)
		switch in.f {
		case history.Create:
			switch {
			case out == "created" && !exists, out == "exists" && exists:
				return []any{true}
			case out == "" && exists:
				return []any{true}
			case out == "":
				return []any{true, false}
			}
		case history.Delete:
			switch {
			case out == "deleted" && exists, out == "absent" && !exists:
				return []any{false}
			case out == "" && exists:
				return []any{false, true}
			case out == "":
				return []any{false}
			}
		case history.Get:
			if out == "found" && exists || out == "absent" && !exists {
				return []any{exists}
			}
		}
		return nil
	},
	DescribeOperation: func(input, output any) string {
		in := input.(catalogInput)
		return fmt.Sprintf("%s %s -> %q", in.f, in.name, output)
	},
}).ToModel()

// partitionBy is a porcupine partition function: the operations of each
// key (a name, a family, a session), checked on their own, in the order
// their keys first appear.
func partitionBy(key func(input any) string) func([]porcupine.Operation) [][]porcupine.Operation {
	return func(h []porcupine.Operation) [][]porcupine.Operation {
		by := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range h {
			k := key(op.Input)
			if by[k] == nil {
				keys = append(keys, k)
			}
			by[k] = append(by[k], op)
		}
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, by[k])
		}
		return out
	}
}

// CatalogOperations turns the metadata workload's history into
// porcupine's operations: a fail is dropped (it had no effect), an info
// never returns (it may take effect any time after its invoke).
func CatalogOperations(ops []history.Op) []porcupine.Operation {
	var out []porcupine.Operation
	for _, p := range history.Pairs(ops) {
		switch p.Invoke.F {
		case history.Create, history.Delete, history.Get:
		default:
			continue
		}
		in := catalogInput{f: p.Invoke.F, name: p.Invoke.Attrs["entity"]}
		op := porcupine.Operation{ClientId: p.Invoke.Process, Input: in, Call: p.Invoke.Time, Output: ""}
		switch p.Done.Type {
		case history.Fail:
			continue
		case history.OK:
			op.Output, op.Return = p.Done.Attrs["result"], p.Done.Time
		default: // info, or no answer before the history ended
			if p.Invoke.F == history.Get {
				continue // a read of unknown outcome changed nothing
			}
			op.Return = math.MaxInt64
		}
		out = append(out, op)
	}
	return out
}

// CatalogTimeout bounds porcupine's search; past it the verdict is
// unknown, which fails the check (say so rather than pass unproven).
var CatalogTimeout = 60 * time.Second

// CatalogLinearizable (P15): the catalog's creates, deletes and gets of
// entities are linearizable, checked with porcupine against a set of
// names.
func CatalogLinearizable(ops []history.Op) []Violation {
	return linearizable(catalogModel, CatalogOperations(ops), "the catalog", ops, func(p history.Pair) bool {
		return p.Invoke.F == history.Create || p.Invoke.F == history.Delete || p.Invoke.F == history.Get
	})
}

// linearizable checks pops against model with porcupine (bounded by
// CatalogTimeout: past it the verdict is unknown, which fails the check
// rather than pass unproven). A violation names what was checked, where
// the longest linearizable prefixes of a failing partition end, and the
// first 40 completions of the operations mine selects.
func linearizable(model porcupine.Model, pops []porcupine.Operation, what string, ops []history.Op, mine func(history.Pair) bool) []Violation {
	res, info := porcupine.CheckOperationsVerbose(model, pops, CatalogTimeout)
	switch res {
	case porcupine.Ok:
		return nil
	case porcupine.Unknown:
		return []Violation{{Msg: fmt.Sprintf("%s: porcupine gave no verdict within %v over %d operations", what, CatalogTimeout, len(pops))}}
	}
	v := Violation{Msg: fmt.Sprintf("%s: the history of %d operations is not linearizable", what, len(pops))}
	for _, part := range info.PartialLinearizationsOperations() {
		if len(part) == 0 {
			continue
		}
		var lens []int
		for _, l := range part {
			lens = append(lens, len(l))
		}
		v.Msg += fmt.Sprintf("; a partition's longest linearizable prefixes: %v operations", lens)
		break
	}
	for _, p := range history.Pairs(ops) {
		if mine(p) && len(v.Ops) < 40 {
			v.Ops = append(v.Ops, p.Done)
		}
	}
	return []Violation{v}
}

// VisualizeCatalog writes porcupine's HTML view of the metadata history
// to path: each operation on a timeline and how far a linearization got.
// The test writes it into the report when P15 fails.
func VisualizeCatalog(ops []history.Op, path string) error {
	_, info := porcupine.CheckOperationsVerbose(catalogModel, CatalogOperations(ops), CatalogTimeout)
	return porcupine.VisualizePath(catalogModel, info, path)
}
