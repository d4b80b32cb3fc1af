package partition_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/quorumbus/quorumbus/partition"
	pt "github.com/quorumbus/quorumbus/partition/partitiontest"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// fakeLog is a Raft log for Options.Log: the entries applied so far, of
// which those below floor are truncated.
type fakeLog struct {
	mu      sync.Mutex
	entries map[uint64][]byte
	floor   uint64
	reads   int
}

func newFakeLog() *fakeLog { return &fakeLog{entries: map[uint64][]byte{}} }

func (l *fakeLog) add(e partition.Entry) {
	l.mu.Lock()
	l.entries[e.Index] = e.Data
	l.mu.Unlock()
}

func (l *fakeLog) read(i uint64) ([]byte, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.reads++
	if i < l.floor {
		return nil, fmt.Errorf("entry %d truncated (log starts at %d)", i, l.floor)
	}
	d, ok := l.entries[i]
	if !ok {
		return nil, fmt.Errorf("entry %d not found", i)
	}
	return d, nil
}

// truncate drops the entries below i, as Raft does after a snapshot.
func (l *fakeLog) truncate(i uint64) {
	l.mu.Lock()
	l.floor = i
	l.mu.Unlock()
}

func openWithLog(t *testing.T, dir string, l *fakeLog) *partition.Machine {
	t.Helper()
	opts := pt.Options()
	opts.Log = l.read
	m, err := partition.Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return m
}

// logDriver applies entries to a machine that keeps bodies in fakeLog.
type logDriver struct {
	t   *testing.T
	m   *partition.Machine
	log *fakeLog
	seq pt.Log
	now int64
}

func (d *logDriver) do(c *partitionpb.Command) *partitionpb.Result {
	d.t.Helper()
	e := d.seq.Entry(d.t, d.now, c)
	d.log.add(e)
	res, err := d.m.Apply([]partition.Entry{e})
	if err != nil {
		d.t.Fatalf("apply entry %d: %v", e.Index, err)
	}
	if res[0][0].Code != partitionpb.ResultCode_RESULT_OK {
		d.t.Fatalf("%v: %v %s", c, res[0][0].Code, res[0][0].Description)
	}
	return res[0][0]
}

func (d *logDriver) places() (inStore, inLog int) {
	d.t.Helper()
	s, l, err := partition.BodyPlaces(d.m)
	if err != nil {
		d.t.Fatal(err)
	}
	return s, l
}

// checkBodies fails unless the messages carry exactly the bodies named
// (a handed-out message has no field for a reference into the log).
func checkBodies(t *testing.T, what string, msgs []*partitionpb.Message, want ...string) {
	t.Helper()
	var got []string
	for _, m := range msgs {
		got = append(got, string(m.Bare)+string(m.Header))
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("%s: bodies %q, want %q", what, got, want)
	}
}

// TestLogBodies: with Options.Log, sends write no body records; every way
// of reading a message (lock, receive-and-delete, peek, a move to the
// dead-letter queue) takes its body from the log; a snapshot moves the
// bodies into the store so that the log may be truncated below it; a body
// that changed in the log fails its checksum.
func TestLogBodies(t *testing.T) {
	dir := t.TempDir()
	l := newFakeLog()
	d := &logDriver{t: t, m: openWithLog(t, dir, l), log: l, now: 1000}
	d.do(pt.Upsert(pt.Queue(1, 0, "q")))
	var bodies []*partitionpb.NewMessage
	for i := range 8 {
		m := pt.Msg(fmt.Sprintf("body-%d", i))
		m.Header = []byte(fmt.Sprintf("/h%d", i))
		bodies = append(bodies, m)
	}
	d.do(pt.Enqueue(1, 0, bodies[:5]...))
	d.do(pt.Enqueue(1, 0, bodies[5:]...))
	if s, lg := d.places(); s != 0 || lg != 8 {
		t.Fatalf("after sends: %d bodies in the store, %d in the log; want 0 and 8", s, lg)
	}

	r := d.do(pt.Lock(1, 0, partitionpb.SubQueue_SUB_QUEUE_MAIN, 3, 7))
	checkBodies(t, "lock", r.Messages, "body-0/h0", "body-1/h1", "body-2/h2")
	d.do(pt.Settle(1, 0, partitionpb.SubQueue_SUB_QUEUE_MAIN, partitionpb.Disposition_DISPOSITION_COMPLETE, r.Messages[0].LockToken))
	d.do(pt.Settle(1, 0, partitionpb.SubQueue_SUB_QUEUE_MAIN, partitionpb.Disposition_DISPOSITION_ABANDON, r.Messages[1].LockToken))
	d.do(pt.Settle(1, 0, partitionpb.SubQueue_SUB_QUEUE_MAIN, partitionpb.Disposition_DISPOSITION_DEAD_LETTER, r.Messages[2].LockToken))
	r = d.do(pt.ReceiveAndDelete(1, 0, partitionpb.SubQueue_SUB_QUEUE_DEAD_LETTER, 10))
	checkBodies(t, "dead-letter queue", r.Messages, "body-2/h2")
	r = d.do(pt.ReceiveAndDelete(1, 0, partitionpb.SubQueue_SUB_QUEUE_MAIN, 2))
	checkBodies(t, "receive and delete", r.Messages, "body-1/h1", "body-3/h3")
	if s, lg := d.places(); s != 0 || lg != 4 {
		t.Fatalf("after receives: %d bodies in the store, %d in the log; want 0 and 4", s, lg)
	}
	if n := partition.Misuse(d.m); n > 0 {
		t.Fatalf("%d single deletes met no write or two", n)
	}

	// A snapshot moves the bodies in; Raft may then drop the log below it.
	s, err := d.m.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	s.Release()
	l.truncate(d.m.AppliedIndex() + 1)
	if s, lg := d.places(); s != 4 || lg != 0 {
		t.Fatalf("after a snapshot: %d bodies in the store, %d in the log; want 4 and 0", s, lg)
	}
	peek := func(what string, want ...string) {
		t.Helper()
		msgs, err := d.m.Peek(1, 0, partitionpb.SubQueue_SUB_QUEUE_MAIN, 0, 100, d.now)
		if err != nil {
			t.Fatalf("%s: peek: %v", what, err)
		}
		checkBodies(t, what, msgs, want...)
	}
	peek("peek after the snapshot", "body-4/h4", "body-5/h5", "body-6/h6", "body-7/h7")

	// New messages go to the log again, beside the moved ones; a restart
	// reads both.
	d.do(pt.Enqueue(1, 0, pt.Msg("late")))
	if s, lg := d.places(); s != 4 || lg != 1 {
		t.Fatalf("after another send: %d bodies in the store, %d in the log; want 4 and 1", s, lg)
	}
	if err := d.m.Close(); err != nil {
		t.Fatal(err)
	}
	d.m = openWithLog(t, dir, l)
	peek("peek after a restart", "body-4/h4", "body-5/h5", "body-6/h6", "body-7/h7", "late")
	r = d.do(pt.Lock(1, 0, partitionpb.SubQueue_SUB_QUEUE_MAIN, 10, 8))
	checkBodies(t, "lock after the restart", r.Messages, "body-4/h4", "body-5/h5", "body-6/h6", "body-7/h7", "late")

	// A body changed in the log is refused, not delivered.
	l.mu.Lock()
	last := l.entries[d.seq.Last-1] // the entry of "late"
	last[len(last)-2] ^= 0xff
	l.mu.Unlock()
	d.m.Close()
	d.m = openWithLog(t, dir, l) // no cached entry
	if _, err := d.m.Peek(1, 0, partitionpb.SubQueue_SUB_QUEUE_MAIN, 0, 100, d.now); !errors.Is(err, partition.ErrCorrupt) {
		t.Fatalf("peek of a body changed in the log: %v, want ErrCorrupt", err)
	}
}

// Messages locked before a snapshot and settled after it: the snapshot
// moved their bodies into the store, and the settlements must see that
// (lockcache.go forgets the records it kept), or a complete leaves the
// moved body behind and an abandon names a log entry Raft may drop.
func TestLockedAcrossSnapshot(t *testing.T) {
	const main = partitionpb.SubQueue_SUB_QUEUE_MAIN
	l := newFakeLog()
	d := &logDriver{t: t, m: openWithLog(t, t.TempDir(), l), log: l, now: 1000}
	d.do(pt.Upsert(pt.Queue(1, 0, "q")))
	d.do(pt.Enqueue(1, 0, pt.Msg("a"), pt.Msg("b")))
	r := d.do(pt.Lock(1, 0, main, 2, 7))
	s, err := d.m.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	s.Release()
	l.truncate(d.m.AppliedIndex() + 1)
	d.do(pt.Settle(1, 0, main, partitionpb.Disposition_DISPOSITION_COMPLETE, r.Messages[0].LockToken))
	d.do(pt.Settle(1, 0, main, partitionpb.Disposition_DISPOSITION_ABANDON, r.Messages[1].LockToken))
	r = d.do(pt.Lock(1, 0, main, 2, 8))
	checkBodies(t, "after the abandon", r.Messages, "b")
	d.do(pt.Settle(1, 0, main, partitionpb.Disposition_DISPOSITION_COMPLETE, r.Messages[0].LockToken))
	if s, lg := d.places(); s != 0 || lg != 0 {
		t.Fatalf("everything completed: %d bodies left in the store, %d in the log", s, lg)
	}
}

// TestLogBodiesSubscriptionsApart: ten subscriptions of a topic, each a
// few entries behind the next, received from in turn, one message at a
// time, as receivers of each drain them together: each entry is read
// from the log once, not once per message (a reader that kept one entry
// read its entry back for nearly every message, since each read took the
// entry of another subscription's last read out).
func TestLogBodiesSubscriptionsApart(t *testing.T) {
	l := newFakeLog()
	d := &logDriver{t: t, m: openWithLog(t, t.TempDir(), l), log: l, now: 1000}
	d.do(pt.Upsert(&partitionpb.EntityConfig{EntityId: 10, Name: "t", Kind: placementpb.EntityKind_ENTITY_KIND_TOPIC}))
	const subs, entries, perEntry = 10, 14, 8
	for i := range subs {
		d.do(pt.Upsert(&partitionpb.EntityConfig{
			EntityId: uint64(11 + i), Name: fmt.Sprintf("t/Subscriptions/s%d", i), Kind: placementpb.EntityKind_ENTITY_KIND_SUBSCRIPTION, TopicId: 10,
			Rules: []*placementpb.Rule{{Name: "$Default", Filter: &placementpb.Rule_TrueFilter{TrueFilter: true}}},
		}))
	}
	for e := range entries {
		var msgs []*partitionpb.NewMessage
		for i := range perEntry {
			msgs = append(msgs, pt.Msg(fmt.Sprintf("m%d", e*perEntry+i)))
		}
		d.do(pt.Enqueue(10, 0, msgs...))
	}
	main := partitionpb.SubQueue_SUB_QUEUE_MAIN
	for i := range subs { // subscription i is i entries in
		if i > 0 {
			d.do(pt.ReceiveAndDelete(uint64(11+i), 0, main, uint32(i*perEntry)))
		}
	}
	l.mu.Lock()
	l.reads = 0
	l.mu.Unlock()
	for n := range 4 * perEntry { // four entries each, in turn
		for i := range subs {
			r := d.do(pt.ReceiveAndDelete(uint64(11+i), 0, main, 1))
			if want := fmt.Sprintf("m%d", i*perEntry+n); len(r.Messages) != 1 || string(r.Messages[0].Bare) != want {
				t.Fatalf("subscription %d: %v, want %s", i, r.Messages, want)
			}
		}
	}
	// The entries read: the 4 + 9 = 13 the subscriptions span, at most.
	if l.reads > subs+3 {
		t.Fatalf("%d reads of the log for %d messages in %d entries", l.reads, 4*perEntry*subs, subs+3)
	}
}
