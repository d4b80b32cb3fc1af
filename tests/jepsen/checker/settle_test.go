package checker

import (
	"testing"

	"github.com/quorumbus/quorumbus/tests/jepsen/history"
)

func TestSettledChecker(t *testing.T) {
	const q, dlq = "q", "q/$DeadLetterQueue"
	check := Settled(q, dlq, "jepsen")
	send := func(x *timed, t0 int64, id string) *timed {
		return x.pair(t0, t0+1, 1, history.Send, history.OK, history.Op{Entity: q, MsgID: id})
	}
	recv := func(x *timed, t0 int64, entity, id string, dc uint32, tok string, attrs map[string]string) *timed {
		return x.pair(t0, t0+1, 10, history.Receive, history.OK, history.Op{Entity: entity, MsgID: id, Seq: 1, DeliveryCount: dc, LockToken: tok, Attrs: attrs})
	}
	settle := func(x *timed, t0 int64, f, entity, id, tok string, done history.Type) *timed {
		return x.pair(t0, t0+1, 10, f, done, history.Op{Entity: entity, MsgID: id, LockToken: tok})
	}
	deferred := map[string]string{"via": "deferred"}
	explicit := map[string]string{"reason": "jepsen"}
	healthy := func() *timed {
		x := &timed{}
		// a: abandoned, then completed.
		send(x, 0, "a")
		recv(x, 10, q, "a", 0, "a1", nil)
		settle(x, 20, history.Abandon, q, "a", "a1", history.OK)
		recv(x, 30, q, "a", 1, "a2", nil)
		settle(x, 40, history.Complete, q, "a", "a2", history.OK)
		// b: dead-lettered, then received from the sub-queue.
		send(x, 0, "b")
		recv(x, 10, q, "b", 0, "b1", nil)
		settle(x, 20, history.DeadLetter, q, "b", "b1", history.OK)
		recv(x, 30, dlq, "b", 0, "b2", explicit)
		settle(x, 40, history.Complete, dlq, "b", "b2", history.OK)
		// c: deferred, taken back by sequence number and completed; an
		// older prefetched delivery surfaces late.
		send(x, 0, "c")
		recv(x, 10, q, "c", 1, "c1", nil)
		settle(x, 20, history.Defer, q, "c", "c1", history.OK)
		recv(x, 30, q, "c", 1, "c2", deferred)
		settle(x, 40, history.Complete, q, "c", "c2", history.OK)
		recv(x, 50, q, "c", 0, "c0", nil)
		// d: abandoned past MaxDeliveryCount by the broker.
		send(x, 0, "d")
		recv(x, 10, q, "d", 0, "d1", nil)
		settle(x, 20, history.Abandon, q, "d", "d1", history.OK)
		recv(x, 30, dlq, "d", 1, "d2", map[string]string{"reason": "MaxDeliveryCountExceeded"})
		return x
	}
	cases := map[string]func(x *timed){
		"lost after an acknowledged defer": func(x *timed) {
			send(x, 100, "e")
			recv(x, 110, q, "e", 0, "e1", nil)
			settle(x, 120, history.Defer, q, "e", "e1", history.OK)
		},
		"delivered again after its dead-letter": func(x *timed) {
			recv(x, 100, q, "b", 1, "b3", nil)
		},
		"a deferred message in a plain receive": func(x *timed) {
			recv(x, 100, q, "c", 2, "c3", nil)
		},
		"completed and dead-lettered": func(x *timed) {
			recv(x, 100, dlq, "a", 2, "a3", map[string]string{"reason": "MaxDeliveryCountExceeded"})
		},
		"the workload's reason never asked for": func(x *timed) {
			recv(x, 100, dlq, "a", 2, "a3", explicit)
		},
		"an unknown reason": func(x *timed) {
			send(x, 100, "f")
			recv(x, 110, dlq, "f", 0, "f1", map[string]string{"reason": "TTLExpiredException"})
		},
	}
	if v := check(healthy().ops); len(v) > 0 {
		t.Fatalf("the healthy history fails: %v", v)
	}
	for name, add := range cases {
		x := healthy()
		add(x)
		if v := check(x.ops); len(v) == 0 {
			t.Errorf("%s: passed a history that violates P17", name)
		}
	}
}
