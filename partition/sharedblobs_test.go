package partition_test

import (
	"bytes"
	"testing"

	"github.com/quorumbus/quorumbus/partition"
	pt "github.com/quorumbus/quorumbus/partition/partitiontest"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// stagedTopicMsg stages bare on topic partition 10/0 in chunks of 100
// bytes and returns the message that names it, with the filter view of
// topicMsg.
func stagedTopicMsg(d *pt.Driver, blob byte, bare []byte, color string, n int64, subject string) *partitionpb.NewMessage {
	cmds, m := pt.Stage(10, 0, bytes.Repeat([]byte{blob}, partition.BlobIDBytes), bare, 100)
	for _, c := range cmds {
		d.OK(c)
	}
	v := topicMsg("", color, n, subject)
	m.MessageId, m.FilterView = string([]byte{blob}), v.FilterView
	return m
}

func blobChunks(t *testing.T, d *pt.Driver) int {
	t.Helper()
	chunks, _, err := partition.BlobRecords(d.M, 10, 0)
	if err != nil {
		t.Fatal(err)
	}
	return chunks
}

// TestTopicStagedBody: a message staged in chunks sent to a topic is
// stored once, under the topic, and every copy delivers it whole; the
// blob goes with its last copy (received, or its subscription deleted),
// and a topic deleted before its subscriptions leaves it to them.
func TestTopicStagedBody(t *testing.T) {
	d := pt.NewDriver(t, 1000)
	for _, c := range topicConfigs() {
		d.OK(pt.Upsert(c))
	}
	d.OK(pt.Delete(14, 0))
	bare := bytes.Repeat([]byte("0123456789"), 35) // 4 chunks
	main := partitionpb.SubQueue_SUB_QUEUE_MAIN
	// Copies: one in all, two in red (both its rules match).
	d.OK(pt.Enqueue(10, 0, stagedTopicMsg(d, 1, bare, "red", 5, "hot")))
	if n := blobChunks(t, d); n != 4 {
		t.Fatalf("%d chunks under the topic, want the 4 of one blob", n)
	}
	for _, c := range []struct {
		id   uint64
		want int
	}{{11, 1}, {12, 2}} {
		r := d.OK(pt.ReceiveAndDelete(c.id, 0, main, 10))
		if len(r.Messages) != c.want {
			t.Fatalf("entity %d: %d copies, want %d", c.id, len(r.Messages), c.want)
		}
		for _, m := range r.Messages {
			if !bytes.Equal(m.Bare, bare) {
				t.Fatalf("entity %d: a copy of %d bytes, want the %d sent", c.id, len(m.Bare), len(bare))
			}
		}
		if c.id == 11 && blobChunks(t, d) != 4 {
			t.Fatalf("the blob went with its first copy")
		}
	}
	if n := blobChunks(t, d); n != 0 {
		t.Fatalf("%d chunks left after the last copy", n)
	}

	// A subscription deleted with its copies gives its references back;
	// a blob nobody matched is deleted at once; a duplicate's too.
	d.OK(pt.Enqueue(10, 0, stagedTopicMsg(d, 2, bare, "red", 5, "")))
	d.OK(pt.Delete(12, 0))
	if n := blobChunks(t, d); n != 4 {
		t.Fatalf("%d chunks with all's copy left, want 4", n)
	}
	d.OK(pt.ReceiveAndDelete(11, 0, main, 10))
	if n := blobChunks(t, d); n != 0 {
		t.Fatalf("%d chunks after both subscriptions let go, want 0", n)
	}
	d.OK(pt.Upsert(topicConfigs()[4])) // broken -> only dead-lettered copies
	d.OK(pt.Delete(14, 0))
	d.OK(pt.Upsert(&partitionpb.EntityConfig{EntityId: 11, Name: "t/Subscriptions/all", Kind: placementpb.EntityKind_ENTITY_KIND_SUBSCRIPTION,
		TopicId: 10, Rules: []*placementpb.Rule{{Name: "no", Filter: &placementpb.Rule_FalseFilter{FalseFilter: true}}}}))
	d.OK(pt.Enqueue(10, 0, stagedTopicMsg(d, 3, bare, "blue", 0, "")))
	if n := blobChunks(t, d); n != 0 {
		t.Fatalf("%d chunks of a message nobody took, want 0", n)
	}

	// The topic deleted before its subscription: the copy still reads
	// its body, and takes the blob with it.
	d.OK(pt.Upsert(topicConfigs()[1]))
	d.OK(pt.Enqueue(10, 0, stagedTopicMsg(d, 4, bare, "blue", 0, "")))
	d.OK(pt.Delete(10, 0))
	if n := blobChunks(t, d); n != 4 {
		t.Fatalf("%d chunks after the topic's delete, want 4 (a copy names them)", n)
	}
	r := d.OK(pt.Lock(11, 0, main, 10, 1))
	if len(r.Messages) != 1 || !bytes.Equal(r.Messages[0].Bare, bare) {
		t.Fatalf("the copy after its topic's delete: %v", r.Messages)
	}
	d.OK(pt.Settle(11, 0, main, partitionpb.Disposition_DISPOSITION_COMPLETE, r.Messages[0].LockToken))
	if n := blobChunks(t, d); n != 0 {
		t.Fatalf("%d chunks after the last copy was completed, want 0", n)
	}
}
