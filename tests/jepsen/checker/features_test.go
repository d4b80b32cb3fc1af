package checker

import (
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/tests/jepsen/history"
)

// timed builds a history with explicit times (milliseconds), as the
// recorder would stamp them.
type timed struct{ ops []history.Op }

func (x *timed) at(ms int64, op history.Op) *timed {
	op.Time = ms * int64(time.Millisecond)
	x.ops = append(x.ops, op)
	return x
}

// pair appends an invoke at t0 and its completion at t1.
func (x *timed) pair(t0, t1 int64, p int, f string, done history.Type, o history.Op) *timed {
	inv := o
	inv.Process, inv.Type, inv.F = p, history.Invoke, f
	if f == history.Receive || f == history.AcceptSession {
		inv.MsgID, inv.Seq, inv.LockToken, inv.SessionID, inv.AtMs = "", 0, "", "", 0
	}
	o.Process, o.Type, o.F = p, done, f
	return x.at(t0, inv).at(t1, o)
}

func expectViolations(t *testing.T, name string, check func([]history.Op) []Violation, good, bad *timed) {
	t.Helper()
	if v := check(good.ops); len(v) > 0 {
		t.Errorf("%s: the healthy history fails: %v", name, v)
	}
	if v := check(bad.ops); len(v) == 0 {
		t.Errorf("%s passed a history that violates it", name)
	}
}

func TestDedupChecker(t *testing.T) {
	w := 10 * time.Second
	send := func(x *timed, t0, t1 int64, id string, done history.Type) *timed {
		return x.pair(t0, t1, 1, history.Send, done, history.Op{MsgID: id})
	}
	recv := func(x *timed, t0 int64, id string, seq int64) *timed {
		return x.pair(t0, t0+1, 10, history.Receive, history.OK, history.Op{MsgID: id, Seq: seq, LockToken: id + string(rune('A'+seq))})
	}
	// good: a resend within the window dropped, one after it taken, one
	// of unknown outcome taken.
	good := &timed{}
	send(good, 0, 10, "a", history.OK)
	send(good, 1000, 1010, "a", history.OK)
	recv(good, 2000, "a", 1)
	send(good, 0, 10, "b", history.OK)
	send(good, 15000, 15010, "b", history.OK)
	recv(good, 2000, "b", 2)
	recv(good, 16000, "b", 3)
	send(good, 0, 10, "c", history.OK)
	send(good, 9800, 9900, "c", history.Info)
	recv(good, 2000, "c", 4)
	recv(good, 11000, "c", 5)

	within := &timed{}
	send(within, 0, 10, "a", history.OK)
	send(within, 1000, 1010, "a", history.OK)
	recv(within, 2000, "a", 1)
	recv(within, 2000, "a", 2)
	expectViolations(t, "dedup (duplicate let through)", Dedup(w, nil), good, within)

	past := &timed{}
	send(past, 0, 10, "b", history.OK)
	send(past, 15000, 15010, "b", history.OK)
	recv(past, 2000, "b", 2)
	expectViolations(t, "dedup (resend past the window dropped)", Dedup(w, nil), good, past)

	lost := &timed{}
	send(lost, 0, 10, "a", history.OK)
	expectViolations(t, "dedup (lost)", Dedup(w, nil), good, lost)
}

func TestScheduledChecker(t *testing.T) {
	good := (&timed{}).pair(0, 5, 1, history.Send, history.OK, history.Op{MsgID: "a", AtMs: 5000}).
		pair(100, 101, 10, history.Receive, history.OK, history.Op{MsgID: "a", Seq: 1, LockToken: "L", AtMs: 5050})
	bad := (&timed{}).pair(0, 5, 1, history.Send, history.OK, history.Op{MsgID: "a", AtMs: 5000}).
		pair(100, 101, 10, history.Receive, history.OK, history.Op{MsgID: "a", Seq: 1, LockToken: "L", AtMs: 4000})
	expectViolations(t, "scheduled", Scheduled(ScheduledTolerance, nil), good, bad)
}

// TestCheckersAllowForSkew: a leader's clock skew moves the edge of the
// duplicate-detection window and a scheduled message's activation by
// design; P9 and P10 allow for the skews in effect around their
// judgements, and for no skew elsewhere in the run.
func TestCheckersAllowForSkew(t *testing.T) {
	w := 10 * time.Second
	// A resend 15 s after the first send, dropped as a duplicate: past
	// the window by the harness's clock, within it by a leader 9 s behind.
	past := (&timed{}).pair(0, 10, 1, history.Send, history.OK, history.Op{MsgID: "b"}).
		pair(15000, 15010, 1, history.Send, history.OK, history.Op{MsgID: "b"}).
		pair(16000, 16001, 10, history.Receive, history.OK, history.Op{MsgID: "b", Seq: 2, LockToken: "L"})
	during := []Skew{{Start: int64(14 * time.Second), End: int64(20 * time.Second), By: -9 * time.Second}}
	earlier := []Skew{{Start: int64(40 * time.Second), End: int64(50 * time.Second), By: -9 * time.Second}}
	if v := Dedup(w, during)(past.ops); len(v) != 0 {
		t.Errorf("P9 under a 9 s skew around the resend: %v", v)
	}
	if v := Dedup(w, earlier)(past.ops); len(v) != 1 {
		t.Errorf("P9 with the skew elsewhere in the run: %d violations, want 1", len(v))
	}
	// Delivered 1 s early: a leader 2 s ahead until just before.
	early := (&timed{}).pair(0, 5, 1, history.Send, history.OK, history.Op{MsgID: "a", AtMs: 5000}).
		pair(3000, 3001, 10, history.Receive, history.OK, history.Op{MsgID: "a", Seq: 1, LockToken: "L", AtMs: 4000})
	for _, c := range []struct {
		name  string
		skews []Skew
		want  int
	}{
		{"ahead until 1 s before the receive", []Skew{{Start: 0, End: int64(2 * time.Second), By: 2 * time.Second}}, 0},
		{"ahead, still in effect", []Skew{{Start: 0, By: 2 * time.Second}}, 0},
		{"behind", []Skew{{Start: 0, By: -2 * time.Second}}, 1},
		{"ahead by less than the lead", []Skew{{Start: 0, By: 500 * time.Millisecond}}, 1},
		{"ahead, ended long before", []Skew{{Start: 0, End: int64(500 * time.Millisecond), By: 2 * time.Second}}, 1},
	} {
		if v := Scheduled(ScheduledTolerance, c.skews)(early.ops); len(v) != c.want {
			t.Errorf("P10, skew %s: %d violations, want %d", c.name, len(v), c.want)
		}
	}
}

func TestLockRenewChecker(t *testing.T) {
	base := func() *timed {
		return (&timed{}).pair(0, 5, 1, history.Send, history.OK, history.Op{MsgID: "a"}).
			pair(10, 20, 10, history.Receive, history.OK, history.Op{MsgID: "a", Seq: 1, LockToken: "L1"}).
			pair(1000, 1010, 10, history.Renew, history.OK, history.Op{MsgID: "a", LockToken: "L1"})
	}
	good := base().
		pair(2000, 2010, 10, history.Renew, history.Fail, history.Op{MsgID: "a", LockToken: "L1"}).
		pair(2100, 2110, 10, history.Complete, history.Fail, history.Op{MsgID: "a", LockToken: "L1"}).
		pair(9000, 9010, 11, history.Receive, history.OK, history.Op{MsgID: "a", Seq: 1, DeliveryCount: 1, LockToken: "L2"}).
		pair(9100, 9110, 11, history.Complete, history.OK, history.Op{MsgID: "a", LockToken: "L2"})
	afterLost := base().
		pair(2000, 2010, 10, history.Renew, history.Fail, history.Op{MsgID: "a", LockToken: "L1"}).
		pair(2100, 2110, 10, history.Complete, history.OK, history.Op{MsgID: "a", LockToken: "L1"})
	expectViolations(t, "lock-renew (complete after lock lost)", LockRenew, good, afterLost)
	// L1 was renewed at 1000 and completed at 3000; L2 was handed out at
	// 1500 and renewed at 2000: both held at once.
	twoHolders := base().
		pair(1400, 1500, 11, history.Receive, history.OK, history.Op{MsgID: "a", Seq: 1, DeliveryCount: 1, LockToken: "L2"}).
		pair(2000, 2010, 11, history.Renew, history.OK, history.Op{MsgID: "a", LockToken: "L2"}).
		pair(3000, 3010, 10, history.Complete, history.OK, history.Op{MsgID: "a", LockToken: "L1"})
	expectViolations(t, "lock-renew (two holders)", LockRenew, good, twoHolders)
}

func TestSessionCheckers(t *testing.T) {
	h1 := map[string]string{"holding": "h1"}
	h2 := map[string]string{"holding": "h2"}
	sends := func() *timed {
		return (&timed{}).
			pair(0, 5, 1, history.Send, history.OK, history.Op{MsgID: "ss0-000001", SessionID: "ss0"}).
			pair(6, 10, 1, history.Send, history.OK, history.Op{MsgID: "ss0-000002", SessionID: "ss0"})
	}
	good := sends().
		pair(100, 110, 10, history.AcceptSession, history.OK, history.Op{SessionID: "ss0", Attrs: h1}).
		pair(120, 130, 10, history.Receive, history.OK, history.Op{MsgID: "ss0-000001", Seq: 1, LockToken: "L1", SessionID: "ss0", Attrs: h1}).
		pair(140, 150, 10, history.Complete, history.OK, history.Op{MsgID: "ss0-000001", LockToken: "L1", SessionID: "ss0", Attrs: h1}).
		pair(160, 170, 10, history.Receive, history.OK, history.Op{MsgID: "ss0-000002", Seq: 2, LockToken: "L2", SessionID: "ss0", Attrs: h1}).
		pair(180, 190, 10, history.Complete, history.OK, history.Op{MsgID: "ss0-000002", LockToken: "L2", SessionID: "ss0", Attrs: h1}).
		pair(300, 310, 11, history.AcceptSession, history.OK, history.Op{SessionID: "ss0", Attrs: h2})
	outOfOrder := sends().
		pair(100, 110, 10, history.AcceptSession, history.OK, history.Op{SessionID: "ss0", Attrs: h1}).
		pair(120, 130, 10, history.Receive, history.OK, history.Op{MsgID: "ss0-000002", Seq: 2, LockToken: "L2", SessionID: "ss0", Attrs: h1}).
		pair(140, 150, 10, history.Complete, history.OK, history.Op{MsgID: "ss0-000002", LockToken: "L2", SessionID: "ss0", Attrs: h1}).
		pair(160, 170, 10, history.Receive, history.OK, history.Op{MsgID: "ss0-000001", Seq: 1, LockToken: "L1", SessionID: "ss0", Attrs: h1}).
		pair(180, 190, 10, history.Complete, history.OK, history.Op{MsgID: "ss0-000001", LockToken: "L1", SessionID: "ss0", Attrs: h1})
	expectViolations(t, "session-order", SessionOrder, good, outOfOrder)
	twoHolders := sends().
		pair(100, 110, 10, history.AcceptSession, history.OK, history.Op{SessionID: "ss0", Attrs: h1}).
		pair(112, 115, 11, history.AcceptSession, history.OK, history.Op{SessionID: "ss0", Attrs: h2}).
		pair(120, 130, 10, history.Receive, history.OK, history.Op{MsgID: "ss0-000001", Seq: 1, LockToken: "L1", SessionID: "ss0", Attrs: h1}).
		pair(121, 131, 11, history.Receive, history.OK, history.Op{MsgID: "ss0-000002", Seq: 2, LockToken: "L2", SessionID: "ss0", Attrs: h2}).
		pair(140, 150, 10, history.Complete, history.OK, history.Op{MsgID: "ss0-000001", LockToken: "L1", SessionID: "ss0", Attrs: h1}).
		pair(141, 151, 11, history.Complete, history.OK, history.Op{MsgID: "ss0-000002", LockToken: "L2", SessionID: "ss0", Attrs: h2})
	expectViolations(t, "session-exclusive", SessionExclusive, good, twoHolders)
}

func TestTopicChecker(t *testing.T) {
	subs := map[string]func(map[string]string) bool{
		"t/Subscriptions/all": func(map[string]string) bool { return true },
		"t/Subscriptions/red": func(a map[string]string) bool { return a["color"] == "red" },
	}
	red := map[string]string{"color": "red"}
	blue := map[string]string{"color": "blue"}
	recv := func(x *timed, id, sub string, seq int64) *timed {
		return x.pair(100, 101, 10, history.Receive, history.OK, history.Op{Entity: "t/Subscriptions/" + sub, MsgID: id, Seq: seq, LockToken: id + sub})
	}
	good := (&timed{}).
		pair(0, 5, 1, history.Send, history.OK, history.Op{Entity: "t", MsgID: "a", Attrs: red}).
		pair(0, 5, 2, history.Send, history.OK, history.Op{Entity: "t", MsgID: "b", Attrs: blue}).
		pair(0, 5, 3, history.Send, history.Info, history.Op{Entity: "t", MsgID: "c", Attrs: red})
	recv(good, "a", "all", 1)
	recv(good, "a", "red", 1)
	recv(good, "b", "all", 2)

	missing := (&timed{}).pair(0, 5, 1, history.Send, history.OK, history.Op{Entity: "t", MsgID: "a", Attrs: red})
	recv(missing, "a", "all", 1)
	expectViolations(t, "topic (missing in a matching subscription)", Topic("t", subs), good, missing)

	wrong := (&timed{}).pair(0, 5, 1, history.Send, history.OK, history.Op{Entity: "t", MsgID: "b", Attrs: blue})
	recv(wrong, "b", "all", 1)
	recv(wrong, "b", "red", 1)
	expectViolations(t, "topic (a subscription whose rule does not match)", Topic("t", subs), good, wrong)

	partial := (&timed{}).pair(0, 5, 1, history.Send, history.Info, history.Op{Entity: "t", MsgID: "c", Attrs: red})
	recv(partial, "c", "red", 1)
	expectViolations(t, "topic (unknown send in some subscriptions only)", Topic("t", subs), good, partial)

	ghost := &timed{}
	recv(ghost, "z", "all", 1)
	expectViolations(t, "topic (never sent)", Topic("t", subs), good, ghost)
}

func TestCatalogLinearizable(t *testing.T) {
	op := func(f, name, result string) history.Op {
		return history.Op{Entity: "$catalog", Attrs: map[string]string{"entity": name, "result": result}}
	}
	good := (&timed{}).
		pair(0, 10, 1, history.Create, history.OK, op("", "q", "created")).
		pair(20, 30, 2, history.Get, history.OK, op("", "q", "found")).
		pair(40, 50, 1, history.Delete, history.Info, op("", "q", "")).
		pair(60, 70, 2, history.Get, history.OK, op("", "q", "found")).
		pair(80, 90, 2, history.Get, history.OK, op("", "q", "absent")).
		pair(100, 110, 3, history.Create, history.OK, op("", "q", "created"))
	for i := range good.ops {
		good.ops[i].Attrs = map[string]string{"entity": "q", "result": good.ops[i].Attrs["result"]}
		if good.ops[i].Type == history.Invoke {
			good.ops[i].Attrs = map[string]string{"entity": "q"}
		}
	}
	// A get that misses a create acknowledged before it began (a stale
	// read), then a create answered "created" twice without a delete.
	stale := (&timed{}).
		pair(0, 10, 1, history.Create, history.OK, op("", "q", "created")).
		pair(20, 30, 2, history.Get, history.OK, op("", "q", "absent"))
	doubled := (&timed{}).
		pair(0, 10, 1, history.Create, history.OK, op("", "q", "created")).
		pair(20, 30, 2, history.Create, history.OK, op("", "q", "created"))
	expectViolations(t, "catalog (stale read)", CatalogLinearizable, good, stale)
	expectViolations(t, "catalog (created twice)", CatalogLinearizable, good, doubled)
}

func TestConverged(t *testing.T) {
	good := []DigestSample{{Node: "n1", Group: 1, Applied: 7, Sum: []byte{1}}, {Node: "n2", Group: 1, Applied: 7, Sum: []byte{1}}}
	if v := Converged(good); len(v) > 0 {
		t.Errorf("equal digests fail: %v", v)
	}
	for name, bad := range map[string][]DigestSample{
		"diverged": {{Node: "n1", Group: 1, Applied: 7, Sum: []byte{1}}, {Node: "n2", Group: 1, Applied: 7, Sum: []byte{2}}},
		"behind":   {{Node: "n1", Group: 1, Applied: 7, Sum: []byte{1}}, {Node: "n2", Group: 1, Applied: 6, Sum: []byte{1}}},
		"silent":   {{Node: "n1", Group: 1, Applied: 7, Sum: []byte{1}}, {Node: "n2", Group: 1, Err: "unavailable"}},
	} {
		if v := Converged(bad); len(v) == 0 {
			t.Errorf("%s: passed", name)
		}
	}
}
