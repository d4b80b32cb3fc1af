package checker

import (
	"testing"

	"github.com/quorumbus/quorumbus/tests/jepsen/history"
)

func TestTopicCatalogLinearizable(t *testing.T) {
	op := func(x *timed, t0 int64, p int, f, family string, sub int, done history.Type, result string) *timed {
		o := history.Op{Entity: history.TopicCatalog, Attrs: map[string]string{"family": family, "sub": string(rune('0' + sub))}}
		if done == history.OK {
			o.Attrs = map[string]string{"family": family, "sub": string(rune('0' + sub)), "result": result}
		}
		return x.pair(t0, t0+5, p, f, done, o)
	}
	healthy := func() *timed {
		x := &timed{}
		op(x, 0, 1, history.CreateSub, "f", 0, history.OK, "no-topic")
		op(x, 10, 1, history.CreateTopic, "f", 0, history.OK, "created")
		op(x, 20, 2, history.CreateSub, "f", 0, history.OK, "created")
		op(x, 30, 1, history.AddRule, "f", 0, history.OK, "created")
		op(x, 40, 2, history.AddRule, "f", 0, history.OK, "exists")
		op(x, 50, 1, history.CreateSub, "f", 1, history.Info, "") // may land any time
		op(x, 60, 2, history.DeleteTopic, "f", 0, history.OK, "deleted")
		op(x, 70, 1, history.GetSub, "f", 0, history.OK, "absent")
		op(x, 80, 2, history.RemoveRule, "f", 0, history.OK, "absent")
		op(x, 90, 1, history.CreateTopic, "f", 0, history.OK, "created")
		op(x, 100, 2, history.CreateSub, "f", 0, history.OK, "created")
		op(x, 110, 1, history.RemoveRule, "f", 0, history.OK, "absent") // a new subscription has no rule
		op(x, 0, 3, history.GetTopic, "g", 0, history.OK, "absent")
		return x
	}
	if v := TopicCatalogLinearizable(healthy().ops); len(v) > 0 {
		t.Fatalf("the healthy history fails: %v", v)
	}
	cases := map[string]func(x *timed){
		"a subscription outlives its topic's delete": func(x *timed) {
			op(x, 120, 1, history.DeleteTopic, "f", 0, history.OK, "deleted")
			op(x, 130, 2, history.GetSub, "f", 0, history.OK, "found")
		},
		"a subscription without its topic": func(x *timed) {
			op(x, 120, 1, history.CreateSub, "g", 0, history.OK, "created")
		},
		"a rule kept across its subscription's re-creation": func(x *timed) {
			op(x, 120, 1, history.AddRule, "f", 0, history.OK, "created")
			op(x, 130, 2, history.DeleteSub, "f", 0, history.OK, "deleted")
			op(x, 140, 1, history.CreateSub, "f", 0, history.OK, "created")
			op(x, 150, 2, history.AddRule, "f", 0, history.OK, "exists")
		},
		"a topic created twice": func(x *timed) {
			op(x, 120, 1, history.CreateTopic, "f", 0, history.OK, "created")
		},
	}
	for name, add := range cases {
		x := healthy()
		add(x)
		if v := TopicCatalogLinearizable(x.ops); len(v) == 0 {
			t.Errorf("%s: passed a history that violates P19", name)
		}
	}
}
