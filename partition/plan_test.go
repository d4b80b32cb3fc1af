package partition_test

import (
	"bytes"
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/quorumbus/quorumbus/partition"
	pt "github.com/quorumbus/quorumbus/partition/partitiontest"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// planConfigs is a topic (entity 10, default time to live 60 s) whose
// subscriptions' rules read what a plan must agree on: user properties
// (red), the message id and an action with newid() (ids), the batch's
// time (late), the topic's default time to live (ttl), a filter that
// fails on some messages (broken), and a disabled subscription (off).
func planConfigs() []*partitionpb.EntityConfig {
	sql := func(name, expr string) *placementpb.Rule {
		return &placementpb.Rule{Name: name, Filter: &placementpb.Rule_SqlFilter{SqlFilter: &placementpb.SqlFilter{Expression: expr}}}
	}
	sub := func(id uint64, name string, rules ...*placementpb.Rule) *partitionpb.EntityConfig {
		return &partitionpb.EntityConfig{EntityId: id, Name: "t/Subscriptions/" + name, Kind: placementpb.EntityKind_ENTITY_KIND_SUBSCRIPTION,
			TopicId: 10, Rules: rules, DeadLetteringOnFilterEvaluationExceptions: true}
	}
	ids := sql("ids", "sys.MessageId LIKE 'm%'")
	ids.Action = &placementpb.SqlRuleAction{Expression: "SET k = newid(); SET sys.Label = 'id'"}
	off := sub(17, "off", &placementpb.Rule{Name: "$Default", Filter: &placementpb.Rule_TrueFilter{TrueFilter: true}})
	off.Status = uint32(partitionpb.EntityStatus_ENTITY_STATUS_DISABLED)
	return []*partitionpb.EntityConfig{
		{EntityId: 10, Name: "t", Kind: placementpb.EntityKind_ENTITY_KIND_TOPIC, DefaultTtlMs: 60_000},
		sub(11, "red", sql("color", "color = 'red' AND n > 2"),
			&placementpb.Rule{Name: "subject", Filter: &placementpb.Rule_CorrelationFilter{CorrelationFilter: &placementpb.CorrelationFilter{Subject: "hot"}}}),
		sub(12, "ids", ids),
		sub(13, "late", sql("late", "when > sys.EnqueuedTimeUtc")),
		sub(14, "ttl", sql("ttl", "ttl = sys.TimeToLive")),
		sub(15, "broken", sql("div", "n / d = 1")),
		off,
	}
}

// planMsg is a message to planConfigs' topic: d = 0 makes broken's
// filter fail; when and ttl are compared with the batch's time and the
// message's time to live.
func planMsg(id, color string, n, d, when, ttl int64) *partitionpb.NewMessage {
	m := pt.Msg(id)
	m.MessageId = id
	m.FilterView = &partitionpb.FilterView{Subject: color, Properties: map[string]*placementpb.RuleValue{
		"color": {Value: &placementpb.RuleValue_StringValue{StringValue: color}},
		"n":     {Value: &placementpb.RuleValue_LongValue{LongValue: n}},
		"d":     {Value: &placementpb.RuleValue_LongValue{LongValue: d}},
		"when":  {Value: &placementpb.RuleValue_TimestampMs{TimestampMs: when}},
		"ttl":   {Value: &placementpb.RuleValue_DurationMs{DurationMs: ttl}},
	}}
	return m
}

// planMsgs is a send that meets every rule of planConfigs both ways.
func planMsgs(now int64) []*partitionpb.NewMessage {
	sched := planMsg("m-sched", "red", 3, 1, now+1, 60_000)
	sched.ScheduledEnqueueTimeMs = now + 5000
	ttl := planMsg("x-own-ttl", "blue", 1, 2, now-1, 30_000)
	ttl.TtlMs = 30_000
	return []*partitionpb.NewMessage{
		planMsg("m-red", "red", 3, 3, now+1, 60_000),
		planMsg("x-hot", "hot", 9, 0, now-1, 1),
		planMsg("m-div", "blue", 1, 0, now, 60_000),
		sched, ttl,
	}
}

// plannedEntry is the entry of cmds at now with the plan planner makes
// of them, as a leader builds it (node/propose.go).
func plannedEntry(t *testing.T, planner *partition.Machine, index uint64, now int64, cmds ...*partitionpb.Command) partition.Entry {
	t.Helper()
	b := &partitionpb.Batch{NowMs: now, Commands: cmds}
	planner.PlanTopicSends(b)
	data, err := partition.EncodeBatch(b)
	if err != nil {
		t.Fatal(err)
	}
	return partition.Entry{Index: index, Data: data}
}

// withoutPlans is e with no plan, as a leader of a version before plans
// wrote it.
func withoutPlans(t *testing.T, e partition.Entry) partition.Entry {
	t.Helper()
	b, err := partition.DecodeBatch(e.Data)
	if err != nil {
		t.Fatal(err)
	}
	b.TopicPlans = nil
	data, err := partition.EncodeBatch(b)
	if err != nil {
		t.Fatal(err)
	}
	return partition.Entry{Index: e.Index, Data: data}
}

func applyOne(t *testing.T, m *partition.Machine, e partition.Entry) []*partitionpb.Result {
	t.Helper()
	res, err := m.Apply([]partition.Entry{e})
	if err != nil {
		t.Fatal(err)
	}
	return res[0]
}

// copies describes every copy each subscription of planConfigs holds,
// and one TestTopicStalePlan adds (9).
func copies(t *testing.T, m *partition.Machine) string {
	t.Helper()
	var out bytes.Buffer
	for _, id := range []uint64{9, 11, 12, 13, 14, 15, 16, 17} {
		for _, q := range []partitionpb.SubQueue{main, dlq} {
			ms, err := partition.Messages(m, id, 0, q)
			if err != nil {
				t.Fatal(err)
			}
			for _, msg := range ms {
				fmt.Fprintf(&out, "%d %v %s seq=%d %v ttl=%d %s %v %v\n", id, q, msg.MessageId, msg.SequenceNumber, msg.State,
					msg.TtlMs, msg.DeadLetterDescription, msg.ActionSet, msg.ActionRemoved)
			}
		}
	}
	return out.String()
}

// TestTopicPlan: a replica that takes the leader's plans ends with the
// same results and state as one given the same entries without plans,
// which evaluates every rule itself (a replica of the version before).
func TestTopicPlan(t *testing.T) {
	p, u := pt.Open(t), pt.Open(t)
	var setup []*partitionpb.Command
	for _, c := range planConfigs() {
		setup = append(setup, pt.Upsert(c))
	}
	index := uint64(1)
	for _, m := range []*partition.Machine{p, u} {
		applyOne(t, m, plannedEntry(t, p, index, 1000, setup...))
	}
	for now := int64(2000); now < 10_000; now += 1000 {
		index++
		e := plannedEntry(t, p, index, now, pt.Enqueue(10, 0, planMsgs(now)...), pt.Enqueue(10, 0, planMsg("m-2", "red", 5, 5, now, 60_000)))
		got, want := applyOne(t, p, e), applyOne(t, u, withoutPlans(t, e))
		for k := range want {
			if !proto.Equal(got[k], want[k]) {
				t.Fatalf("entry %d command %d: with the plan %v, without %v", index, k, got[k], want[k])
			}
		}
	}
	if taken, stale := partition.PlanCounts(p); taken != 16 || stale != 0 {
		t.Fatalf("plans taken %d, stale %d: want every one of the 16 taken", taken, stale)
	}
	if taken, stale := partition.PlanCounts(u); taken+stale != 0 {
		t.Fatalf("the replica without plans counted %d taken, %d stale", taken, stale)
	}
	if c := copies(t, p); c != copies(t, u) {
		t.Fatalf("copies with plans:\n%s\nwithout:\n%s", c, copies(t, u))
	}
	if !bytes.Equal(snapshotBytes(t, p), snapshotBytes(t, u)) {
		t.Fatal("the snapshots with and without plans differ")
	}

	// The plan is what a replica goes by when it is fresh: a plan that
	// says "none matched" for a message that matches gives no copy.
	index++
	e := plannedEntry(t, p, index, 20_000, pt.Enqueue(10, 0, planMsg("m-forged", "red", 3, 3, 0, 0)))
	b, err := partition.DecodeBatch(e.Data)
	if err != nil {
		t.Fatal(err)
	}
	if len(b.TopicPlans) != 1 {
		t.Fatalf("plans %v: want one", b.TopicPlans)
	}
	plan := b.TopicPlans[0]
	if plan.Command != 0 || len(plan.Matched) != 1 || len(plan.Evaluate) != 0 {
		t.Fatalf("plan %v: want the first command's, one message's outcome", plan)
	}
	clear(plan.Matched[0])
	forged, err := partition.EncodeBatch(b)
	if err != nil {
		t.Fatal(err)
	}
	before := copies(t, p)
	applyOne(t, p, partition.Entry{Index: index, Data: forged})
	if after := copies(t, p); after != before {
		t.Fatalf("a plan in which no rule matched gave copies:\n%s", after)
	}
}

// TestTopicStalePlan: a plan made before a change that alters what its
// rules give (a rule, a subscription added, deleted or disabled, the
// topic's default time to live), or carried at another time than its
// batch's, is not taken: the replica evaluates the rules as they are at
// apply, to the result of an entry without a plan.
func TestTopicStalePlan(t *testing.T) {
	upsert := func(edit func(cfgs []*partitionpb.EntityConfig) *partitionpb.EntityConfig) func() []*partitionpb.Command {
		return func() []*partitionpb.Command { return []*partitionpb.Command{pt.Upsert(edit(planConfigs()))} }
	}
	for _, c := range []struct {
		name   string
		change func() []*partitionpb.Command // applied between the plan and its entry
		retime bool                          // the batch's time moves after the plan
	}{
		{name: "rule changed", change: upsert(func(cfgs []*partitionpb.EntityConfig) *partitionpb.EntityConfig {
			cfgs[1].Rules[0].Filter = &placementpb.Rule_SqlFilter{SqlFilter: &placementpb.SqlFilter{Expression: "color = 'blue'"}}
			return cfgs[1]
		})},
		{name: "rule removed", change: upsert(func(cfgs []*partitionpb.EntityConfig) *partitionpb.EntityConfig {
			cfgs[1].Rules = cfgs[1].Rules[1:]
			return cfgs[1]
		})},
		{name: "subscription deleted", change: func() []*partitionpb.Command { return []*partitionpb.Command{pt.Delete(11, 0)} }},
		{name: "subscription added", change: upsert(func(cfgs []*partitionpb.EntityConfig) *partitionpb.EntityConfig {
			// First in copy order, with one rule: the rules after it
			// move by one, and the plan's bitmap keeps its size.
			s := proto.Clone(cfgs[6]).(*partitionpb.EntityConfig)
			s.EntityId, s.Name, s.Status = 9, "t/Subscriptions/first", 0
			return s
		})},
		{name: "subscription disabled", change: upsert(func(cfgs []*partitionpb.EntityConfig) *partitionpb.EntityConfig {
			cfgs[1].Status = uint32(partitionpb.EntityStatus_ENTITY_STATUS_DISABLED)
			return cfgs[1]
		})},
		{name: "subscription enabled", change: upsert(func(cfgs []*partitionpb.EntityConfig) *partitionpb.EntityConfig {
			cfgs[6].Status = 0
			return cfgs[6]
		})},
		{name: "dead-lettering of errors off", change: upsert(func(cfgs []*partitionpb.EntityConfig) *partitionpb.EntityConfig {
			cfgs[5].DeadLetteringOnFilterEvaluationExceptions = false
			return cfgs[5]
		})},
		{name: "topic's default time to live", change: upsert(func(cfgs []*partitionpb.EntityConfig) *partitionpb.EntityConfig {
			cfgs[0].DefaultTtlMs = 1
			return cfgs[0]
		})},
		{name: "batch's time", retime: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			// p takes the plan, u the same entry without it, x the plan
			// before the change, so that the change shows.
			p, u, x := pt.Open(t), pt.Open(t), pt.Open(t)
			var setup []*partitionpb.Command
			for _, cfg := range planConfigs() {
				setup = append(setup, pt.Upsert(cfg))
			}
			for _, m := range []*partition.Machine{p, u, x} {
				applyOne(t, m, plannedEntry(t, p, 1, 1000, setup...))
			}
			now := int64(2000)
			send := plannedEntry(t, p, 3, now, pt.Enqueue(10, 0, planMsgs(now)...))
			applyOne(t, x, partition.Entry{Index: 2, Data: send.Data})
			var change []*partitionpb.Command
			if c.change != nil {
				change = c.change()
			}
			for _, m := range []*partition.Machine{p, u} {
				applyOne(t, m, plannedEntry(t, p, 2, now, change...))
			}
			if c.retime {
				// The plan's time is 2000; the batch's is not.
				b, err := partition.DecodeBatch(send.Data)
				if err != nil {
					t.Fatal(err)
				}
				b.NowMs = 2001
				if send.Data, err = partition.EncodeBatch(b); err != nil {
					t.Fatal(err)
				}
			}
			got, want := applyOne(t, p, send), applyOne(t, u, withoutPlans(t, send))
			if !proto.Equal(got[0], want[0]) {
				t.Fatalf("with the stale plan %v, without %v", got[0], want[0])
			}
			if cp, cu := copies(t, p), copies(t, u); cp != cu {
				t.Fatalf("copies with the stale plan:\n%s\nwithout a plan:\n%s", cp, cu)
			}
			if cp := copies(t, p); cp == copies(t, x) {
				t.Fatalf("the change makes no difference to the copies, so the test shows nothing:\n%s", cp)
			}
			if taken, stale := partition.PlanCounts(p); taken != 0 || stale != 1 {
				t.Fatalf("plans taken %d, stale %d: want the one stale", taken, stale)
			}
		})
	}
}

// TestPlanWhileApplying plans sends, as the leader's proposers do, while
// the machine applies rule changes and sends: under the race detector it
// shows that the planner reads nothing Apply writes.
func TestPlanWhileApplying(t *testing.T) {
	m := pt.Open(t)
	var setup []*partitionpb.Command
	for _, cfg := range planConfigs() {
		setup = append(setup, pt.Upsert(cfg))
	}
	applyOne(t, m, plannedEntry(t, m, 1, 1000, setup...))
	done := make(chan struct{})
	planned := make(chan int)
	go func() {
		n := 0
		for {
			select {
			case <-done:
				planned <- n
				return
			default:
			}
			b := &partitionpb.Batch{NowMs: 1500, Commands: []*partitionpb.Command{pt.Enqueue(10, 0, planMsgs(1500)...)}}
			m.PlanTopicSends(b)
			n += len(b.TopicPlans)
		}
	}()
	for i := range uint64(50) {
		cfgs := planConfigs()
		cfgs[1].Rules[0].Filter = &placementpb.Rule_SqlFilter{SqlFilter: &placementpb.SqlFilter{Expression: fmt.Sprintf("n > %d", i%5)}}
		now := 2000 + int64(i)
		applyOne(t, m, plannedEntry(t, m, 2+2*i, now, pt.Upsert(cfgs[1])))
		applyOne(t, m, plannedEntry(t, m, 3+2*i, now, pt.Enqueue(10, 0, planMsgs(now)...)))
	}
	close(done)
	if n := <-planned; n == 0 {
		t.Fatal("the planner made no plan")
	}
	if taken, _ := partition.PlanCounts(m); taken != 50 {
		t.Fatalf("%d plans taken, want the 50 made at apply's state", taken)
	}
}
