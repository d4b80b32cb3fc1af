package partition_test

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/quorumbus/quorumbus/partition"
	pt "github.com/quorumbus/quorumbus/partition/partitiontest"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

func blobID(n byte) []byte { return bytes.Repeat([]byte{n}, partition.BlobIDBytes) }

func bareOf(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i * 7)
	}
	return b
}

// stage applies the chunks of a staged body, one entry each, and returns
// the message that names it.
func stage(d *pt.Driver, blob []byte, bare []byte) *partitionpb.NewMessage {
	d.T.Helper()
	cmds, m := pt.Stage(1, 0, blob, bare, 4000)
	for _, c := range cmds {
		d.OK(c)
	}
	return m
}

func checkBlobs(t *testing.T, d *pt.Driver, chunks, staged int) {
	t.Helper()
	c, s, err := partition.BlobRecords(d.M, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	if c != chunks || s != staged {
		t.Fatalf("%d chunks and %d staged records, want %d and %d", c, s, chunks, staged)
	}
}

// TestStagedBody: a message whose bare section was staged in chunks is
// delivered whole, keeps its body when it moves to the dead-letter queue,
// survives a snapshot and restore, and its chunks go with it.
func TestStagedBody(t *testing.T) {
	d := pt.NewDriver(t, 1000)
	d.OK(pt.Upsert(pt.Queue(1, 0, "q")))
	bare := bareOf(10_000)
	m := stage(d, blobID(1), bare)
	m.MessageId, m.Header = "big", []byte{0x00, 0x53, 0x70, 0x45}
	checkBlobs(t, d, 3, 1)
	d.OK(pt.Enqueue(1, 0, m, pt.Msg("small")))
	checkBlobs(t, d, 3, 0)
	if got := d.Stats(1, 0).SizeBytes; got != uint64(len(bare)+4+len("small")) {
		t.Fatalf("size %d, want %d", got, len(bare)+4+len("small"))
	}

	peeked, err := d.M.Peek(1, 0, main, 0, 10, d.Now)
	if err != nil {
		t.Fatal(err)
	}
	if len(peeked) != 2 || !bytes.Equal(peeked[0].Bare, bare) {
		t.Fatalf("peeked %d messages; the first has %d bytes", len(peeked), len(peeked[0].Bare))
	}

	r := d.OK(pt.Lock(1, 0, main, 1, 1))
	if len(r.Messages) != 1 || !bytes.Equal(r.Messages[0].Bare, bare) || !bytes.Equal(r.Messages[0].Header, m.Header) {
		t.Fatalf("locked %v", r.Messages)
	}
	d.OK(pt.Settle(1, 0, main, deadLetter, pt.Tokens(r)...))
	checkBlobs(t, d, 3, 0)

	b := pt.Open(t)
	if err := b.Restore(bytes.NewReader(snapshotBytes(t, d.M))); err != nil {
		t.Fatal(err)
	}
	if got, err := b.Peek(1, 0, dlq, 0, 1, d.Now); err != nil || len(got) != 1 || !bytes.Equal(got[0].Bare, bare) {
		t.Fatalf("the restored dead-letter queue: %v", err)
	}

	r = d.OK(pt.Lock(1, 0, dlq, 1, 2))
	if !bytes.Equal(r.Messages[0].Bare, bare) {
		t.Fatal("the dead-lettered message lost its body")
	}
	d.OK(pt.Settle(1, 0, dlq, complete, pt.Tokens(r)...))
	checkBlobs(t, d, 0, 0)
	if err := partition.CheckIndexes(d.M, 1, 0); err != nil {
		t.Fatal(err)
	}
}

// TestStagedBodyRefused: an Enqueue naming a blob that is not whole is
// refused, and so is a second chunk at an offset; nothing is stored.
func TestStagedBodyRefused(t *testing.T) {
	d := pt.NewDriver(t, 1000)
	d.OK(pt.Upsert(pt.Queue(1, 0, "q")))
	cmds, m := pt.Stage(1, 0, blobID(1), bareOf(10_000), 4000)
	d.OK(cmds[2]) // chunks may come in any order
	d.OK(cmds[0])
	if r := d.Do(cmds[0]); r.Code != partitionpb.ResultCode_RESULT_INVALID {
		t.Fatalf("a second chunk at an offset: %v", r.Code)
	}
	if r := d.Do(pt.Enqueue(1, 0, m)); r.Code != partitionpb.ResultCode_RESULT_INVALID {
		t.Fatalf("an Enqueue of a partial blob: %v %s", r.Code, r.Description)
	}
	if n := d.Stats(1, 0).ActiveMessages; n != 0 {
		t.Fatalf("%d messages stored", n)
	}
	d.OK(cmds[1])
	d.OK(pt.Enqueue(1, 0, m))
	r := d.OK(pt.Lock(1, 0, main, 1, 1))
	if !bytes.Equal(r.Messages[0].Bare, bareOf(10_000)) {
		t.Fatal("chunks staged out of order were read back wrong")
	}
}

// TestStagedBodyNotKept: the blob of a repeated request, of a duplicate
// message and of a deleted entity is deleted, and a blob no Enqueue took
// over is pruned once the staging window has passed.
func TestStagedBodyNotKept(t *testing.T) {
	d := pt.NewDriver(t, 1000)
	d.OK(pt.Upsert(&partitionpb.EntityConfig{EntityId: 1, Name: "q", RequiresDuplicateDetection: true, DuplicateDetectionWindowMs: 60_000}))
	bare := bareOf(5000)

	m := stage(d, blobID(1), bare)
	first := d.OK(withID(pt.Enqueue(1, 0, m), "r1"))
	m = stage(d, blobID(2), bare)
	again := d.OK(withID(pt.Enqueue(1, 0, m), "r1"))
	if fmt.Sprint(first.SequenceNumbers) != fmt.Sprint(again.SequenceNumbers) {
		t.Fatalf("the repeat answered %v, the first %v", again.SequenceNumbers, first.SequenceNumbers)
	}
	checkBlobs(t, d, 2, 0)

	m = stage(d, blobID(3), bare)
	m.MessageId = "dup"
	d.OK(pt.Enqueue(1, 0, m))
	m = stage(d, blobID(4), bare)
	m.MessageId = "dup"
	d.OK(pt.Enqueue(1, 0, m))
	checkBlobs(t, d, 4, 0)
	if n := d.Stats(1, 0).ActiveMessages; n != 2 {
		t.Fatalf("%d messages, want 2", n)
	}

	cmds, _ := pt.Stage(1, 0, blobID(5), bare, 4000) // never enqueued
	d.OK(cmds[0])
	checkBlobs(t, d, 5, 1)
	d.Now += 11 * 60 * 1000
	stage(d, blobID(6), bare)
	checkBlobs(t, d, 6, 1) // blob 5 pruned, blob 6 staged

	d.OK(pt.Delete(1, 0))
	checkBlobs(t, d, 0, 0)
}
