package partition_test

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/quorumbus/quorumbus/partition"
	pt "github.com/quorumbus/quorumbus/partition/partitiontest"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// TestTopicBodyKeptOnce: a topic message's copies name the same bytes of
// the Raft log until a snapshot moves the bodies into the store, which
// then keeps each message's bare body once, under the topic, for all its
// copies; the body goes with the last copy. A machine that keeps no
// bodies in the log stores them the same way at once (TestDeterminism
// holds the two to the same snapshot).
func TestTopicBodyKeptOnce(t *testing.T) {
	l := newFakeLog()
	d := &logDriver{t: t, m: openWithLog(t, t.TempDir(), l), log: l, now: 1000}
	for _, c := range topicConfigs() {
		d.do(pt.Upsert(c))
	}
	d.do(pt.Delete(14, 0))
	var sent []*partitionpb.NewMessage
	for i := range 3 {
		// Three copies each: one in "all", two in "red" (both its rules match).
		sent = append(sent, topicMsg(fmt.Sprintf("body-%d-%s", i, strings.Repeat("x", 200)), "red", 5, "hot"))
	}
	d.do(pt.Enqueue(10, 0, sent...))
	chunks := func() int {
		t.Helper()
		n, _, err := partition.BlobRecords(d.m, 10, 0)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if _, inLog := d.places(); inLog != 9 || chunks() != 0 {
		t.Fatalf("before a snapshot: %d copies name the log, %d blob chunks; want 9 and 0", inLog, chunks())
	}

	s, err := d.m.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	s.Release()
	l.truncate(d.m.AppliedIndex() + 1)
	if _, inLog := d.places(); inLog != 0 || chunks() != 3 {
		t.Fatalf("after a snapshot: %d copies name the log, %d blob chunks; want 0 and one per message (3)", inLog, chunks())
	}

	want := func(n int) string {
		var b []string
		for i := range n {
			b = append(b, fmt.Sprintf("body-%d-%s", i, strings.Repeat("x", 200)))
		}
		return strings.Join(b, " ")
	}
	bodies := func(id uint64) string {
		t.Helper()
		r := d.do(pt.ReceiveAndDelete(id, 0, partitionpb.SubQueue_SUB_QUEUE_MAIN, 10))
		var out []string
		for _, m := range r.Messages {
			out = append(out, string(m.Bare))
		}
		sort.Strings(out)
		return strings.Join(out, " ")
	}
	if got := bodies(11); got != want(3) {
		t.Fatalf("all: %q, want %q", got, want(3))
	}
	if n := chunks(); n != 3 {
		t.Fatalf("%d blob chunks while red still holds copies, want 3", n)
	}
	// Red holds two copies of each, sorted: 0 0 1 1 2 2.
	if got, w := bodies(12), strings.Join([]string{want(1), want(1), strings.TrimPrefix(want(2), want(1)+" "), strings.TrimPrefix(want(2), want(1)+" "), strings.TrimPrefix(want(3), want(2)+" "), strings.TrimPrefix(want(3), want(2)+" ")}, " "); got != w {
		t.Fatalf("red: %q, want %q", got, w)
	}
	if n := chunks(); n != 0 {
		t.Fatalf("%d blob chunks after the last copies went, want 0", n)
	}
}
