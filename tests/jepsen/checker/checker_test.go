package checker

import (
	"testing"

	"github.com/quorumbus/quorumbus/tests/jepsen/history"
)

// h builds a synthetic history: each helper appends an invoke and its
// completion for one process.
type h []history.Op

func (x h) add(p int, f string, done history.Type, o history.Op) h {
	inv := history.Op{Process: p, Type: history.Invoke, F: f, MsgID: o.MsgID, LockToken: o.LockToken}
	o.Process, o.Type, o.F = p, done, f
	return append(x, inv, o)
}

func (x h) send(p int, id string, done history.Type) h {
	return x.add(p, history.Send, done, history.Op{MsgID: id})
}

func (x h) recv(p int, id string, seq int64, dc uint32, lock string) h {
	return x.add(p, history.Receive, history.OK, history.Op{MsgID: id, Seq: seq, DeliveryCount: dc, LockToken: lock})
}

func (x h) complete(p int, id, lock string, done history.Type) h {
	return x.add(p, history.Complete, done, history.Op{MsgID: id, LockToken: lock})
}

// healthy is a history every checker accepts: a message sent, received,
// its lock lost and redelivered, then completed; an indeterminate send
// that was never received; one that was.
func healthy() h {
	return h{}.
		send(1, "h-a", history.OK).
		send(1, "h-b", history.Info).
		send(2, "h-c", history.Info).
		send(2, "h-d", history.Fail).
		recv(10, "h-a", 101, 0, "h-L1").
		recv(11, "h-a", 101, 1, "h-L2").
		complete(10, "h-a", "h-L1", history.Fail). // lock lost: fine
		complete(11, "h-a", "h-L2", history.OK).
		recv(10, "h-c", 102, 0, "h-L3").
		complete(10, "h-c", "h-L3", history.Info)
}

func TestHealthyHistoryPassesEveryChecker(t *testing.T) {
	for _, r := range Run(Queue, healthy()) {
		if !r.Valid {
			t.Errorf("%s: %v", r.Name, r.Violations)
		}
	}
}

// Each case breaks exactly one promise; its checker must fail and the
// others must still pass, so a verdict names the right cause.
func TestEachCheckerFailsItsViolation(t *testing.T) {
	cases := []struct {
		checker string
		history h
	}{
		{"lost", h{}.send(1, "a", history.OK)},
		{"lost", h{}.send(1, "a", history.OK).send(1, "b", history.OK).recv(10, "b", 1, 0, "L1").complete(10, "b", "L1", history.OK)},
		{"unexpected", h{}.recv(10, "ghost", 1, 0, "L1")},
		{"aborted-read", h{}.send(1, "a", history.Fail).recv(10, "a", 1, 0, "L1")},
		{"double-complete", h{}.send(1, "a", history.OK).
			recv(10, "a", 1, 0, "L1").complete(10, "a", "L1", history.OK).
			complete(10, "a", "L1", history.OK)},
		{"resurrected", h{}.send(1, "a", history.OK).
			recv(10, "a", 1, 0, "L1").complete(10, "a", "L1", history.OK).
			recv(11, "a", 1, 1, "L2").complete(11, "a", "L2", history.Fail)},
		{"delivery-count", h{}.send(1, "a", history.OK).
			recv(10, "a", 1, 0, "L1").recv(11, "a", 1, 0, "L2").
			complete(11, "a", "L2", history.Info)},
		{"delivery-count", h{}.send(1, "a", history.OK).
			recv(10, "a", 1, 2, "L1").recv(10, "a", 1, 1, "L2").
			complete(10, "a", "L2", history.Info)},
		{"sequence-number", h{}.send(1, "a", history.OK).
			recv(10, "a", 1, 0, "L1").recv(10, "a", 2, 1, "L2")},
		{"sequence-number", h{}.send(1, "a", history.OK).send(1, "b", history.OK).
			recv(10, "a", 7, 0, "L1").recv(10, "b", 7, 0, "L2")},
	}
	for _, c := range cases {
		t.Run(c.checker, func(t *testing.T) {
			// The healthy history's ids are disjoint from the case's, so
			// the sum must fail only the case's checker.
			ops := append(healthy(), c.history...)
			var found bool
			for _, r := range Run(Queue, ops) {
				if r.Name == c.checker {
					found = true
					if r.Valid {
						t.Errorf("%s passed a history that violates it", r.Name)
					}
					continue
				}
				if !r.Valid {
					t.Errorf("%s failed too: %v", r.Name, r.Violations)
				}
			}
			if !found {
				t.Fatalf("no checker named %s", c.checker)
			}
		})
	}
}

func TestSummaryCounts(t *testing.T) {
	s := Summarize(healthy())
	want := Summary{Ops: 10, SendsOK: 1, SendsFail: 1, SendsInfo: 2, Received: 2, Deliveries: 3,
		Redeliveries: 1, Recovered: 1, CompletesOK: 1, CompletesFail: 1, CompletesInfo: 1}
	if s != want {
		t.Errorf("got %+v\nwant %+v", s, want)
	}
}

func TestPairsMatchesCompletionsToInvokesPerProcess(t *testing.T) {
	ops := []history.Op{
		{Process: 1, Type: history.Invoke, F: history.Send, MsgID: "a"},
		{Process: 2, Type: history.Invoke, F: history.Send, MsgID: "b"},
		{Process: 2, Type: history.Info, F: history.Send},
		{Process: 1, Type: history.OK, F: history.Send},
		{Process: 1, Type: history.Invoke, F: history.Send, MsgID: "c"},
	}
	ps := history.Pairs(ops)
	if len(ps) != 3 || ps[0].Done.Type != history.OK || ps[1].Done.Type != history.Info || ps[2].Done.Type != "" {
		t.Fatalf("pairs: %+v", ps)
	}
}
