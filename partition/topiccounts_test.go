package partition_test

import (
	"testing"

	"github.com/quorumbus/quorumbus/partition"
	pt "github.com/quorumbus/quorumbus/partition/partitiontest"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// sizeOf is what a message counts in bytes (partition.messageSize).
func sizeOf(m *partitionpb.NewMessage) uint64 {
	return uint64(len(m.Header) + len(m.Annotations) + len(m.Bare))
}

// TestTopicCounts: a topic partition's size is each message's size once,
// split between its copies, less the shares of the copies its
// subscriptions let go; its scheduled count is the messages scheduled on
// it. Both follow sends, scheduling, cancels, locks, dead-lettering,
// completes, activation, expiry, a subscription's delete and a reopen.
func TestTopicCounts(t *testing.T) {
	dir := t.TempDir()
	d := &pt.Driver{T: t, M: pt.OpenDir(t, dir), Now: 1000}
	for _, c := range topicConfigs() {
		d.OK(pt.Upsert(c))
	}
	d.OK(pt.Delete(14, 0))
	want := func(size, scheduled uint64, after string) {
		t.Helper()
		s := d.Stats(10, 0)
		if s.SizeBytes != size || s.ScheduledMessages != scheduled || s.ActiveMessages != 0 || s.DeadLetterMessages != 0 || s.LockedMessages != 0 {
			t.Fatalf("after %s: topic counts %v; want %d bytes, %d scheduled, no messages of its own", after, s, size, scheduled)
		}
	}
	want(0, 0, "creation")

	// a: three copies (all, and both rules of red); b: one (all).
	a, b := topicMsg("a-body-of-some-length", "red", 5, "hot"), topicMsg("b-body", "blue", 0, "")
	d.OK(pt.Enqueue(10, 0, a, b))
	want(sizeOf(a)+sizeOf(b), 0, "two sends")
	if all, red := d.Stats(11, 0).SizeBytes, d.Stats(12, 0).SizeBytes; all != sizeOf(a)+sizeOf(b) || red != 2*sizeOf(a) {
		t.Fatalf("subscriptions hold %d and %d bytes, want every copy counted: %d and %d", all, red, sizeOf(a)+sizeOf(b), 2*sizeOf(a))
	}

	// c (three copies) and e (one) scheduled; c cancelled.
	c, e := topicMsg("c-scheduled", "red", 5, "hot"), topicMsg("e-scheduled", "blue", 0, "")
	c.ScheduledEnqueueTimeMs, e.ScheduledEnqueueTimeMs = 5000, 9000
	r := d.OK(pt.Enqueue(10, 0, c, e))
	want(sizeOf(a)+sizeOf(b)+sizeOf(c)+sizeOf(e), 2, "two scheduled")
	if at, ok := d.M.NextScheduledDue(); !ok || at != 5000 {
		t.Fatalf("next scheduled due at %d (%v), want 5000", at, ok)
	}
	d.OK(pt.CancelScheduled(10, 0, r.SequenceNumbers[0]))
	want(sizeOf(a)+sizeOf(b)+sizeOf(e), 1, "a cancel")

	// all lets a and b go: b's only copy, and a's first share.
	d.OK(pt.ReceiveAndDelete(11, 0, main, 2))
	aLeft := 2 * (sizeOf(a) / 3) // the first copy's share has the remainder too
	want(aLeft+sizeOf(e), 1, "all received a and b")

	// red locks both copies of a, dead-letters one: moves change nothing.
	lr := d.OK(pt.Lock(12, 0, main, 10, 1))
	want(aLeft+sizeOf(e), 1, "a lock")
	tokens := pt.Tokens(lr)
	d.OK(pt.Settle(12, 0, main, partitionpb.Disposition_DISPOSITION_DEAD_LETTER, tokens[0]))
	want(aLeft+sizeOf(e), 1, "a dead-letter")

	// A reopen keeps the counts, and the time a record comes due.
	if err := d.M.Close(); err != nil {
		t.Fatal(err)
	}
	d.M = pt.OpenDir(t, dir)
	want(aLeft+sizeOf(e), 1, "a reopen")

	d.OK(pt.Settle(12, 0, main, partitionpb.Disposition_DISPOSITION_COMPLETE, tokens[1]))
	d.OK(pt.ReceiveAndDelete(12, 0, dlq, 10))
	want(sizeOf(e), 1, "red completed a, and received its dead-lettered copy")

	// e comes due: the command that activates its copy ends its record.
	if at, ok := d.M.NextScheduledDue(); !ok || at != 9000 {
		t.Fatalf("next scheduled due at %d (%v), want 9000", at, ok)
	}
	d.Now = 9000
	d.OK(pt.ActivateScheduled())
	want(sizeOf(e), 0, "e's activation")
	if n, err := partition.TopicScheduledEntries(d.M, 10, 0); err != nil || n != 0 {
		t.Fatalf("%d records once due, %v; want 0", n, err)
	}
	if at, ok := d.M.NextScheduledDue(); ok {
		t.Fatalf("next scheduled due at %d with nothing scheduled", at)
	}
	if err := d.M.Close(); err != nil {
		t.Fatal(err)
	}
	d.M = pt.OpenDir(t, dir)
	if at, ok := d.M.NextScheduledDue(); ok {
		t.Fatalf("after a reopen, next scheduled due at %d with nothing scheduled", at)
	}

	// f expires in all; g is scheduled, and all is deleted with g's copy
	// and e: the message stays scheduled on the topic until its time.
	f, g := topicMsg("f-expires", "blue", 0, ""), topicMsg("g-scheduled", "blue", 0, "")
	f.TtlMs, g.ScheduledEnqueueTimeMs = 1000, 20_000
	d.OK(pt.Enqueue(10, 0, f, g))
	want(sizeOf(e)+sizeOf(f)+sizeOf(g), 1, "f and g")
	d.Now = 11_000
	d.OK(pt.ExpireMessages())
	want(sizeOf(e)+sizeOf(g), 1, "f's expiry")
	d.OK(pt.Delete(11, 0))
	want(0, 1, "all's delete")
	d.Now = 20_000
	d.OK(pt.ActivateScheduled())
	want(0, 0, "g's time")
}

// TestTopicCountsLargeMessage: a message staged in chunks counts its
// staged length once, and nothing once its copies are gone.
func TestTopicCountsLargeMessage(t *testing.T) {
	d := pt.NewDriver(t, 1000)
	for _, c := range topicConfigs() {
		d.OK(pt.Upsert(c))
	}
	d.OK(pt.Delete(14, 0))
	body := make([]byte, 3000)
	stage, m := pt.Stage(10, 0, []byte("0123456789abcdef"), body, 1024)
	for _, c := range stage {
		d.OK(c)
	}
	m.FilterView = topicMsg("", "red", 5, "hot").FilterView
	d.OK(pt.Enqueue(10, 0, m))
	if s := d.Stats(10, 0); s.SizeBytes != uint64(len(body)) {
		t.Fatalf("topic holds %d bytes, want the body once (%d)", s.SizeBytes, len(body))
	}
	d.OK(pt.ReceiveAndDelete(11, 0, main, 10))
	d.OK(pt.ReceiveAndDelete(12, 0, main, 10))
	if s := d.Stats(10, 0); s.SizeBytes != 0 {
		t.Fatalf("topic holds %d bytes with no copy left", s.SizeBytes)
	}
}

// TestTopicCountsTopicRecreated: a topic partition deleted and created
// again under its key while its subscriptions' partitions still hold
// copies counts their shares again (TestDeterminism's workload does it).
func TestTopicCountsTopicRecreated(t *testing.T) {
	d := pt.NewDriver(t, 1000)
	cfgs := topicConfigs()
	for _, c := range cfgs {
		d.OK(pt.Upsert(c))
	}
	d.OK(pt.Delete(14, 0))
	a := topicMsg("a-body", "red", 5, "hot")
	d.OK(pt.Enqueue(10, 0, a))
	d.OK(pt.Delete(10, 0))
	d.OK(pt.Upsert(cfgs[0]))
	if s := d.Stats(10, 0); s.SizeBytes != sizeOf(a) {
		t.Fatalf("created again: %d bytes, want the copies' %d", s.SizeBytes, sizeOf(a))
	}
	d.OK(pt.ReceiveAndDelete(11, 0, main, 10))
	d.OK(pt.ReceiveAndDelete(12, 0, main, 10))
	if s := d.Stats(10, 0); s.SizeBytes != 0 {
		t.Fatalf("no copy left: %d bytes", s.SizeBytes)
	}
}
