package checker

import (
	"fmt"
	"math"
	"strconv"

	"github.com/anishathalye/porcupine"

	"github.com/quorumbus/quorumbus/tests/jepsen/history"
)

// familyState is a topic family in the catalog: the topic, its
// subscriptions, and whether each has the workload's rule. A
// subscription exists only under its topic, a rule only on its
// subscription.
type familyState struct {
	topic bool
	sub   [history.TopicFamilySubs]bool
	rule  [history.TopicFamilySubs]bool
}

// familyInput is one operation of the topic metadata workload.
type familyInput struct {
	f, family string
	sub       int
}

// step applies in's effect to s, as the catalog would if it took it.
func (s familyState) step(in familyInput) familyState {
	i := in.sub
	switch in.f {
	case history.CreateTopic:
		s.topic = true
	case history.DeleteTopic:
		s = familyState{}
	case history.CreateSub:
		if s.topic && !s.sub[i] {
			s.sub[i], s.rule[i] = true, false
		}
	case history.DeleteSub:
		s.sub[i], s.rule[i] = false, false
	case history.AddRule:
		if s.sub[i] {
			s.rule[i] = true
		}
	case history.RemoveRule:
		s.rule[i] = false
	}
	return s
}

// answers says whether the catalog in state s could answer out to in.
func (s familyState) answers(in familyInput, out string) bool {
	i := in.sub
	switch in.f {
	case history.CreateTopic:
		return out == "created" && !s.topic || out == "exists" && s.topic
	case history.DeleteTopic:
		return out == "deleted" && s.topic || out == "absent" && !s.topic
	case history.GetTopic:
		return out == "found" && s.topic || out == "absent" && !s.topic
	case history.CreateSub:
		return out == "created" && s.topic && !s.sub[i] || out == "exists" && s.sub[i] || out == "no-topic" && !s.topic
	case history.DeleteSub:
		return out == "deleted" && s.sub[i] || out == "absent" && !s.sub[i]
	case history.GetSub:
		return out == "found" && s.sub[i] || out == "absent" && !s.sub[i]
	case history.AddRule:
		return out == "created" && s.sub[i] && !s.rule[i] || out == "exists" && s.rule[i] || out == "absent" && !s.sub[i]
	case history.RemoveRule:
		return out == "deleted" && s.rule[i] || out == "absent" && !s.rule[i]
	}
	return false
}

// topicCatalogModel checks each family on its own. An operation of
// unknown outcome ("") may have taken effect or not.
var topicCatalogModel = (&porcupine.NondeterministicModel{
	Partition: partitionBy(func(in any) string { return in.(familyInput).family }),
	Init:      func() []any { return []any{familyState{}} },
	Step: func(state, input, output any) []any {
		s, in, out := state.(familyState), input.(familyInput), output.(string)
		if out == "" {
			if next := s.step(in); next != s {
				return []any{s, next}
			}
			return []any{s}
		}
		if !s.answers(in, out) {
			return nil
		}
		return []any{s.step(in)}
	},
	DescribeOperation: func(input, output any) string {
		in := input.(familyInput)
		return fmt.Sprintf("%s %s s%d -> %q", in.f, in.family, in.sub, output)
	},
}).ToModel()

// topicCatalogOperations turns the workload's history into porcupine's:
// a fail is dropped, a change of unknown outcome never returns, a read of
// unknown outcome is dropped.
func topicCatalogOperations(ops []history.Op) []porcupine.Operation {
	var out []porcupine.Operation
	for _, p := range history.Pairs(ops) {
		if p.Invoke.Entity != history.TopicCatalog {
			continue
		}
		sub, _ := strconv.Atoi(p.Invoke.Attrs["sub"])
		in := familyInput{f: p.Invoke.F, family: p.Invoke.Attrs["family"], sub: sub}
		op := porcupine.Operation{ClientId: p.Invoke.Process, Input: in, Call: p.Invoke.Time, Output: ""}
		switch p.Done.Type {
		case history.Fail:
			continue
		case history.OK:
			op.Output, op.Return = p.Done.Attrs["result"], p.Done.Time
		default:
			if in.f == history.GetTopic || in.f == history.GetSub {
				continue
			}
			op.Return = math.MaxInt64
		}
		out = append(out, op)
	}
	return out
}

// TopicCatalogLinearizable (P19): creates, deletes and reads of topics,
// subscriptions and rules are linearizable against a model in which a
// subscription needs its topic, a rule its subscription, and deleting a
// topic deletes its subscriptions and their rules.
func TopicCatalogLinearizable(ops []history.Op) []Violation {
	return linearizable(topicCatalogModel, topicCatalogOperations(ops), "the topic catalog", ops, func(p history.Pair) bool {
		return p.Invoke.Entity == history.TopicCatalog
	})
}
