package partition_test

import (
	"strings"
	"testing"

	"github.com/quorumbus/quorumbus/partition"
	pt "github.com/quorumbus/quorumbus/partition/partitiontest"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

func forwarded(body string, seq uint64, hops uint32) *partitionpb.NewMessage {
	m := pt.Msg(body)
	m.Forwarded = &partitionpb.ForwardOrigin{EntityId: 7, Partition: 1, SequenceNumber: seq, Hops: hops,
		DeadLetterReason: "r", DeadLetterSource: "src", ModifiedProperties: [][]byte{{0xc1, 1, 0}}}
	return m
}

// TestForwardDedup: the destination takes a forwarded message once per
// origin within the window, however often it is sent, and keeps what the
// source's state added to it; after the window the origin is forgotten
// and pruned.
func TestForwardDedup(t *testing.T) {
	d := pt.NewDriver(t, 1000)
	d.OK(pt.Upsert(pt.Queue(1, 0, "dest")))
	first := d.OK(pt.Enqueue(1, 0, forwarded("a", 5, 1), forwarded("b", 6, 2)))
	// The forwarder sends again, after a failure: a, and c, new.
	again := d.OK(pt.Enqueue(1, 0, forwarded("a", 5, 1), forwarded("c", 7, 1)))
	if again.SequenceNumbers[0] != first.SequenceNumbers[0] {
		t.Fatalf("a sent again answered %d, want the sequence number it got first, %d", again.SequenceNumbers[0], first.SequenceNumbers[0])
	}
	// The same sequence number from another sub-queue is another origin.
	dlq := forwarded("d", 5, 1)
	dlq.Forwarded.SubQueue = partitionpb.SubQueue_SUB_QUEUE_DEAD_LETTER
	d.OK(pt.Enqueue(1, 0, dlq))
	r := d.OK(pt.ReceiveAndDelete(1, 0, partitionpb.SubQueue_SUB_QUEUE_MAIN, 100))
	var got string
	for _, m := range r.Messages {
		got += string(m.Bare)
		if m.DeadLetterReason != "r" || m.DeadLetterSource != "src" || len(m.ModifiedProperties) != 1 || m.ForwardHops == 0 {
			t.Errorf("message %s lost what its source added: %v", m.Bare, m)
		}
	}
	if got != "abcd" {
		t.Fatalf("destination holds %q, want abcd", got)
	}
	if n, err := partition.ForwardEntries(d.M, 1, 0); err != nil || n != 4 {
		t.Fatalf("forward entries %d, %v; want 4", n, err)
	}
	// After the window: a is taken again (the source's retry came too
	// late), and the stale entries are pruned as sends go on.
	d.Now += partition.ForwardDedupWindowMs
	d.OK(pt.Enqueue(1, 0, forwarded("a", 5, 1)))
	d.Now++
	d.OK(pt.Enqueue(1, 0, pt.Msg("plain")))
	if n, err := partition.ForwardEntries(d.M, 1, 0); err != nil || n != 1 {
		t.Fatalf("forward entries after the window %d, %v; want 1 (a's new one)", n, err)
	}
	if s := d.Stats(1, 0); s.ActiveMessages != 2 {
		t.Fatalf("%d active messages, want 2 (a again, plain)", s.ActiveMessages)
	}
}

// TestForwardToTopic: a message forwarded to a topic is fanned out by the
// subscriptions' rules once per origin, however often it is sent; each
// copy keeps what the source added and its hop count, and a rule
// action's changes go on top of the origin's.
func TestForwardToTopic(t *testing.T) {
	d := pt.NewDriver(t, 1000)
	for _, c := range topicConfigs() {
		d.OK(pt.Upsert(c))
	}
	d.OK(pt.Delete(14, 0)) // the broken rule: not this test's business
	cfg := topicConfigs()[2]
	cfg.Rules[1].Action = &placementpb.SqlRuleAction{Expression: "SET sys.To = 'x'; SET kept = 'new'; REMOVE dropped"}
	d.OK(pt.Upsert(cfg))
	fwd := func(body, color string, n int64, subject string, seq uint64) *partitionpb.NewMessage {
		m := topicMsg(body, color, n, subject)
		// The view a forwarder sends sees the message as delivered
		// (frontend.ForTopic), the origin's changes included.
		m.FilterView.Properties["dropped"] = &placementpb.RuleValue{Value: &placementpb.RuleValue_BoolValue{BoolValue: true}}
		m.Forwarded = &partitionpb.ForwardOrigin{EntityId: 7, Partition: 1, SequenceNumber: seq, Hops: 2,
			DeadLetterReason: "r", DeadLetterSource: "src",
			ActionSet:     &partitionpb.FilterView{Subject: "s0", Properties: map[string]*placementpb.RuleValue{"dropped": {Value: &placementpb.RuleValue_BoolValue{BoolValue: true}}}},
			ActionRemoved: []string{"kept"}}
		return m
	}
	first := d.OK(pt.Enqueue(10, 0, fwd("a", "red", 3, "", 1), fwd("b", "blue", 0, "hot", 2)))
	again := d.OK(pt.Enqueue(10, 0, fwd("b", "blue", 0, "hot", 2), fwd("c", "red", 9, "", 3)))
	if again.SequenceNumbers[0] != first.SequenceNumbers[1] || again.SequenceNumbers[1] == first.SequenceNumbers[1] {
		t.Fatalf("b sent again answered %v, want the topic sequence number it got first (%v)", again.SequenceNumbers, first.SequenceNumbers)
	}
	main := partitionpb.SubQueue_SUB_QUEUE_MAIN
	if got := bodiesOf(t, d, 11, main); got != "a b c" {
		t.Fatalf("all holds %q, want a b c (b once)", got)
	}
	r := d.OK(pt.ReceiveAndDelete(12, 0, main, 10))
	var got string
	for _, m := range r.Messages {
		got += string(m.Bare)
		if m.ForwardHops != 2 || m.DeadLetterSource != "src" || m.DeadLetterReason != "r" {
			t.Errorf("copy %s lost what its source added: %v", m.Bare, m)
		}
		set := m.ActionSet
		if string(m.Bare) == "b" {
			// The subject rule's action over the origin's changes.
			if set.GetTo() != "x" || set.GetSubject() != "s0" || set.GetProperties()["kept"].GetStringValue() != "new" ||
				set.GetProperties()["dropped"] != nil || strings.Join(m.ActionRemoved, ",") != "dropped" {
				t.Errorf("b's changes: %v removed %v", set, m.ActionRemoved)
			}
		} else if set.GetSubject() != "s0" || strings.Join(m.ActionRemoved, ",") != "kept" {
			t.Errorf("copy %s: the origin's changes %v removed %v", m.Bare, set, m.ActionRemoved)
		}
	}
	if got != "abc" {
		t.Fatalf("red holds %q, want abc", got)
	}
	if n, err := partition.ForwardEntries(d.M, 10, 0); err != nil || n != 3 {
		t.Fatalf("the topic remembers %d origins, %v; want 3", n, err)
	}
}

// TestForwardRefused: a forwarded message with a hop count out of range
// is refused whole.
func TestForwardRefused(t *testing.T) {
	d := pt.NewDriver(t, 1000)
	d.OK(pt.Upsert(pt.Queue(1, 0, "dest")))
	d.OK(pt.Upsert(&partitionpb.EntityConfig{EntityId: 2, Name: "t", Kind: placementpb.EntityKind_ENTITY_KIND_TOPIC}))
	for _, c := range []*partitionpb.Command{
		pt.Enqueue(1, 0, pt.Msg("ok"), forwarded("x", 1, partition.MaxForwardHops+1)),
		pt.Enqueue(1, 0, forwarded("x", 1, 0)),
		pt.Enqueue(2, 0, forwarded("x", 1, 0)),
	} {
		if r := d.Do(c); r.Code == partitionpb.ResultCode_RESULT_OK {
			t.Errorf("%v accepted", c)
		}
	}
	if s := d.Stats(1, 0); s.ActiveMessages != 0 {
		t.Fatalf("a refused send left %d messages", s.ActiveMessages)
	}
}

// TestForwardSources lists what the leader forwards.
func TestForwardSources(t *testing.T) {
	d := pt.NewDriver(t, 1000)
	q := pt.Queue(1, 0, "a")
	q.ForwardTo = "b"
	q.ForwardDeadLetteredMessagesTo = "c"
	d.OK(pt.Upsert(q))
	d.OK(pt.Upsert(pt.Queue(2, 0, "b")))
	// An entity that requires sessions forwards its main queue a session
	// at a time, its dead-letter queue as any other.
	sq := pt.Queue(3, 0, "s")
	sq.RequiresSession, sq.ForwardTo, sq.ForwardDeadLetteredMessagesTo = true, "b", "c"
	d.OK(pt.Upsert(sq))
	got := d.M.ForwardSources()
	if len(got) != 4 || got[0].To != "b" || got[0].SubQueue != partitionpb.SubQueue_SUB_QUEUE_MAIN ||
		got[1].To != "c" || got[1].SubQueue != partitionpb.SubQueue_SUB_QUEUE_DEAD_LETTER || got[0].Name != "a" ||
		got[0].Sessions || !got[2].Sessions || got[3].Sessions {
		t.Fatalf("ForwardSources = %+v", got)
	}
}
