package partition_test

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/quorumbus/quorumbus/partition"
	pt "github.com/quorumbus/quorumbus/partition/partitiontest"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

func withID(c *partitionpb.Command, id string) *partitionpb.Command {
	c.RequestId = []byte(id)
	return c
}

// TestRequestIDs: a request sent again with its id is answered with the
// first answer and applied once, a send and a complete alike; without an
// id, or with a new one, a second complete is lock-lost as in Service Bus;
// after the window the id is new again.
func TestRequestIDs(t *testing.T) {
	d := pt.NewDriver(t, 1_000_000)
	d.OK(pt.Upsert(pt.Queue(1, 0, "q")))
	active := func(want uint64) {
		t.Helper()
		if st := d.Stats(1, 0); st.ActiveMessages != want {
			t.Fatalf("%d active messages, want %d", st.ActiveMessages, want)
		}
	}

	first := d.OK(withID(pt.Enqueue(1, 0, pt.Msg("a"), pt.Msg("b")), "send-1"))
	again := d.OK(withID(pt.Enqueue(1, 0, pt.Msg("a"), pt.Msg("b")), "send-1"))
	if !proto.Equal(first, again) || len(again.SequenceNumbers) != 2 {
		t.Fatalf("repeated send answered %v, first %v", again, first)
	}
	active(2)

	lock := d.OK(pt.Lock(1, 0, pt.Main, 2, 1))
	complete := func(id string) partitionpb.ResultCode {
		c := pt.Settle(1, 0, pt.Main, partitionpb.Disposition_DISPOSITION_COMPLETE, pt.Tokens(lock)...)
		if id != "" {
			c.RequestId = []byte(id)
		}
		return d.Apply(c)[0].Code
	}
	for i, want := range []struct {
		id   string
		code partitionpb.ResultCode
	}{
		{"settle-1", partitionpb.ResultCode_RESULT_OK},
		{"settle-1", partitionpb.ResultCode_RESULT_OK}, // the retry
		{"", partitionpb.ResultCode_RESULT_LOCK_LOST},  // a second complete
		{"settle-2", partitionpb.ResultCode_RESULT_LOCK_LOST},
		{"settle-2", partitionpb.ResultCode_RESULT_LOCK_LOST},
	} {
		if got := complete(want.id); got != want.code {
			t.Fatalf("complete %d (id %q): %v, want %v", i, want.id, got, want.code)
		}
	}
	active(0)

	// Both in one entry: the second is answered from the first.
	res := d.Apply(withID(pt.Enqueue(1, 0, pt.Msg("c")), "send-2"), withID(pt.Enqueue(1, 0, pt.Msg("c")), "send-2"))
	if !proto.Equal(res[0], res[1]) {
		t.Fatalf("in one entry: %v and %v", res[0], res[1])
	}
	active(1)

	// Past the window the id is new: applied again, its result replaced.
	d.Now += 120_000
	late := d.OK(withID(pt.Enqueue(1, 0, pt.Msg("a")), "send-1"))
	if late.SequenceNumbers[0] <= first.SequenceNumbers[1] {
		t.Fatalf("send-1 after the window: %v", late)
	}
	active(2)
	if again := d.OK(withID(pt.Enqueue(1, 0, pt.Msg("a")), "send-1")); !proto.Equal(again, late) {
		t.Fatalf("send-1 repeated after the window: %v, want %v", again, late)
	}
	active(2)

	// What a request id may not be.
	for name, c := range map[string]*partitionpb.Command{
		"on a receive-and-delete lock": withID(pt.ReceiveAndDelete(1, 0, pt.Main, 1), "lock-1"),
		"on a renewal":                 withID(pt.Renew(1, 0, pt.Main, []byte("0123456789abcdef")), "renew-1"),
		"of 65 bytes":                  withID(pt.Enqueue(1, 0, pt.Msg("x")), string(bytes.Repeat([]byte("i"), 65))),
	} {
		if r := d.Do(c); r.Code != partitionpb.ResultCode_RESULT_INVALID {
			t.Fatalf("request id %s: %v", name, r)
		}
	}
	active(2)
}

// TestRetriedLock: a peek-lock Lock sent again with its id answers with
// the messages the first one locked that are still locked by it, bodies
// and all, and locks nothing more; a Lock that locked nothing leaves the
// id free for the next one.
func TestRetriedLock(t *testing.T) {
	d := pt.NewDriver(t, 1_000_000)
	cfg := pt.Queue(1, 0, "q")
	cfg.LockDurationMs = 30_000
	d.OK(pt.Upsert(cfg))

	if r := d.OK(withID(pt.Lock(1, 0, pt.Main, 3, 1), "empty")); len(r.Messages) != 0 {
		t.Fatalf("lock of an empty queue: %v", r)
	}
	d.OK(pt.Enqueue(1, 0, pt.Msg("a"), pt.Msg("b"), pt.Msg("c"), pt.Msg("d")))
	first := d.OK(withID(pt.Lock(1, 0, pt.Main, 3, 2), "empty")) // the id is free: it locked nothing
	if len(first.Messages) != 3 {
		t.Fatalf("first lock: %d messages", len(first.Messages))
	}
	d.Now += 1000
	again := d.OK(withID(pt.Lock(1, 0, pt.Main, 3, 3), "empty")) // another seed: the first's tokens still come back
	if !proto.Equal(first, again) {
		t.Fatalf("repeated lock answered\n%v\nfirst\n%v", again, first)
	}
	if st := d.Stats(1, 0); st.ActiveMessages != 4 {
		t.Fatalf("%d active messages after the repeat, want 4", st.ActiveMessages)
	}
	if r := d.OK(pt.Lock(1, 0, pt.Main, 10, 4)); len(r.Messages) != 1 || string(r.Messages[0].Bare) != "d" {
		t.Fatalf("a new lock after the repeat got %v, want only d", pt.Seqs(r))
	}

	// Settled since: left out; renewed: still this Lock's.
	d.OK(pt.Settle(1, 0, pt.Main, partitionpb.Disposition_DISPOSITION_COMPLETE, first.Messages[1].LockToken))
	d.OK(pt.Renew(1, 0, pt.Main, first.Messages[2].LockToken))
	rest := d.OK(withID(pt.Lock(1, 0, pt.Main, 3, 5), "empty"))
	if got := pt.Seqs(rest); len(got) != 2 || got[0] != first.Messages[0].SequenceNumber || got[1] != first.Messages[2].SequenceNumber {
		t.Fatalf("repeat after a complete: %v", got)
	}
	// Abandoned and locked again by another Lock: not this one's.
	d.OK(pt.Settle(1, 0, pt.Main, partitionpb.Disposition_DISPOSITION_ABANDON, first.Messages[0].LockToken))
	if r := d.OK(pt.Lock(1, 0, pt.Main, 1, 6)); pt.Seqs(r)[0] != first.Messages[0].SequenceNumber {
		t.Fatalf("abandoned message not locked again: %v", pt.Seqs(r))
	}
	if got := pt.Seqs(d.OK(withID(pt.Lock(1, 0, pt.Main, 3, 7), "empty"))); len(got) != 1 || got[0] != first.Messages[2].SequenceNumber {
		t.Fatalf("repeat after abandon and relock: %v", got)
	}
	// Expired: nothing.
	d.Now += 30_000
	if r := d.OK(withID(pt.Lock(1, 0, pt.Main, 3, 8), "empty")); len(r.Messages) != 0 {
		t.Fatalf("repeat after the locks expired: %v", pt.Seqs(r))
	}
}

// TestRetriedLockBySequence: receiving deferred messages again with the
// request's id answers with those its first application locked, in the
// order asked, and is refused as not found once none is locked by it.
func TestRetriedLockBySequence(t *testing.T) {
	d := pt.NewDriver(t, 1_000_000)
	d.OK(pt.Upsert(pt.Queue(1, 0, "q")))
	d.OK(pt.Enqueue(1, 0, pt.Msg("a"), pt.Msg("b"), pt.Msg("c")))
	locked := d.OK(pt.Lock(1, 0, pt.Main, 3, 1))
	d.OK(pt.Settle(1, 0, pt.Main, partitionpb.Disposition_DISPOSITION_DEFER, pt.Tokens(locked)...))
	seqs := pt.Seqs(locked)
	byNumber := func(seed uint64) *partitionpb.Command {
		return withID(pt.LockBySequence(&partitionpb.LockBySequence{EntityId: 1, SubQueue: pt.Main,
			SequenceNumbers: []uint64{seqs[2], seqs[0]}, TokenSeed: pt.Seed(seed)}), "deferred")
	}
	first := d.OK(byNumber(2))
	if got := pt.Seqs(first); len(got) != 2 || got[0] != seqs[2] || got[1] != seqs[0] {
		t.Fatalf("first receive of deferred messages: %v", got)
	}
	if again := d.OK(byNumber(3)); !proto.Equal(first, again) {
		t.Fatalf("repeated receive of deferred messages answered\n%v\nfirst\n%v", again, first)
	}
	d.OK(pt.Settle(1, 0, pt.Main, partitionpb.Disposition_DISPOSITION_COMPLETE, first.Messages[0].LockToken))
	if got := pt.Seqs(d.OK(byNumber(4))); len(got) != 1 || got[0] != seqs[0] {
		t.Fatalf("repeat after completing one: %v", got)
	}
	d.OK(pt.Settle(1, 0, pt.Main, partitionpb.Disposition_DISPOSITION_COMPLETE, first.Messages[1].LockToken))
	if r := d.Do(byNumber(5)); r.Code != partitionpb.ResultCode_RESULT_INVALID || !strings.Contains(r.Description, "message not found") {
		t.Fatalf("repeat after completing both: %v", r)
	}
}

// TestRequestsPruned: results older than the window are deleted, a bounded
// number per entry, and the floor that lets entries skip the scan never
// hides one.
func TestRequestsPruned(t *testing.T) {
	d := pt.NewDriver(t, 1_000_000)
	d.OK(pt.Upsert(pt.Queue(1, 0, "q")))
	count := func(want int) {
		t.Helper()
		n, err := partition.RequestEntries(d.M)
		if err != nil {
			t.Fatal(err)
		}
		if n != want {
			t.Fatalf("at %d: %d request results, want %d", d.Now, n, want)
		}
	}
	for i := range 300 {
		d.OK(withID(pt.Enqueue(1, 0, pt.Msg("m")), fmt.Sprint("r", i)))
		d.Now++
	}
	count(300)
	d.Now += 60_000
	d.OK(pt.Enqueue(1, 0, pt.Msg("no id")))
	count(300)
	d.Now += 60_000 - 200 // results at or before now-120 s are stale: the first 101
	d.OK(pt.Enqueue(1, 0, pt.Msg("no id")))
	count(300 - 64)
	d.OK(pt.Enqueue(1, 0, pt.Msg("no id")))
	count(199)
	d.Now += 1000
	for range 4 { // 64 an entry without requests
		d.OK(pt.Enqueue(1, 0, pt.Msg("no id")))
	}
	count(0)
	d.OK(withID(pt.Enqueue(1, 0, pt.Msg("m")), "late"))
	count(1)
	d.Now += 120_000
	d.OK(pt.Enqueue(1, 0, pt.Msg("no id")))
	count(0)
}

// TestRequestFormat: an entry with a request id or a versioned delete is
// written in format 2; a format 1 entry's request ids are ignored, as
// replicas of that format did.
func TestRequestFormat(t *testing.T) {
	b := &partitionpb.Batch{NowMs: 1, Commands: []*partitionpb.Command{withID(pt.Enqueue(1, 0, pt.Msg("a")), "x")}}
	data, err := partition.EncodeBatch(b)
	if err != nil {
		t.Fatal(err)
	}
	if data[0] != partition.FormatV2 {
		t.Fatalf("format %d", data[0])
	}
	data[0] = partition.FormatV1
	got, err := partition.DecodeBatch(data)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Commands[0].RequestId) != 0 {
		t.Fatal("format 1 kept the request id")
	}
	b.Commands[0].RequestId = nil
	if data, _ := partition.EncodeBatch(b); data[0] != partition.FormatV1 {
		t.Fatalf("without request ids: format %d", data[0])
	}
	b.Commands = append(b.Commands, pt.DeleteCmd(&partitionpb.DeleteEntity{EntityId: 1, Version: 9}))
	if data, _ := partition.EncodeBatch(b); data[0] != partition.FormatV2 {
		t.Fatalf("with a versioned delete: format %d", data[0])
	}
	b.Commands = append(b.Commands, withID(pt.Lock(1, 0, pt.Main, 1, 1), "lock"))
	data, _ = partition.EncodeBatch(b)
	if data[0] != partition.FormatV3 {
		t.Fatalf("with a request id on a Lock: format %d", data[0])
	}
	if got, err := partition.DecodeBatch(data); err != nil || string(got.Commands[2].RequestId) != "lock" {
		t.Fatalf("format 3 decoded: %v, %v", got, err)
	}
	cmds, m := pt.Stage(1, 0, bytes.Repeat([]byte{1}, partition.BlobIDBytes), []byte("bare"), 4)
	b.Commands = append(b.Commands, cmds[0], pt.Enqueue(1, 0, m))
	data, _ = partition.EncodeBatch(b)
	if data[0] != partition.FormatV4 {
		t.Fatalf("with a staged body: format %d", data[0])
	}
	got, err = partition.DecodeBatch(data)
	if err != nil || len(got.Commands[4].GetEnqueue().Messages[0].StagedBody) != partition.BlobIDBytes {
		t.Fatalf("format 4 decoded: %v, %v", got, err)
	}
	data[0] = partition.FormatV3
	if got, err := partition.DecodeBatch(data); err != nil || len(got.Commands[4].GetEnqueue().Messages[0].StagedBody) != 0 {
		t.Fatalf("format 3 kept a staged body: %v, %v", got, err)
	}
	data[0] = partition.LastFormat + 1
	if _, err := partition.DecodeBatch(data); !errors.Is(err, partition.ErrUnknownFormat) {
		t.Fatalf("format %d: %v", data[0], err)
	}
}
