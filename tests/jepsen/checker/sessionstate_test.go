package checker

import (
	"testing"

	"github.com/quorumbus/quorumbus/tests/jepsen/history"
)

func TestSessionStateChecker(t *testing.T) {
	set := func(x *timed, t0, t1 int64, p int, sess, v string, done history.Type) *timed {
		return x.pair(t0, t1, p, history.SetState, done, history.Op{SessionID: sess, Attrs: map[string]string{"state": v}})
	}
	get := func(x *timed, t0, t1 int64, p int, sess, v string) *timed {
		return x.pair(t0, t1, p, history.GetState, history.OK, history.Op{SessionID: sess, Attrs: map[string]string{"state": v}})
	}
	healthy := func() *timed {
		x := &timed{}
		get(x, 0, 5, 1, "s1", "")
		set(x, 10, 15, 1, "s1", "a", history.OK)
		set(x, 20, 25, 1, "s1", "b", history.Info) // may or may not have happened
		get(x, 30, 35, 2, "s1", "a")
		set(x, 40, 45, 2, "s1", "c", history.Fail) // refused: never visible
		get(x, 50, 55, 3, "s1", "b")               // the unknown write landed late
		get(x, 0, 5, 1, "s2", "")
		return x
	}
	if v := SessionState(healthy().ops); len(v) > 0 {
		t.Fatalf("the healthy history fails: %v", v)
	}
	cases := map[string]func(x *timed){
		"a stale read":            func(x *timed) { get(x, 60, 65, 4, "s1", "a") },
		"a refused write seen":    func(x *timed) { get(x, 60, 65, 4, "s1", "c") },
		"another session's value": func(x *timed) { get(x, 60, 65, 4, "s2", "a") },
		"a state lost":            func(x *timed) { get(x, 60, 65, 4, "s1", "") },
	}
	for name, add := range cases {
		x := healthy()
		add(x)
		if v := SessionState(x.ops); len(v) == 0 {
			t.Errorf("%s: passed a history that violates P18", name)
		}
	}
}
