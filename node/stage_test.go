package node_test

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/hashicorp/raft-wal/segment"

	"github.com/quorumbus/quorumbus/node"
	"github.com/quorumbus/quorumbus/node/nodetest"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

func TestEntryBoundBelowLogStore(t *testing.T) {
	if node.MaxEntryBytes >= segment.MaxEntrySize/4 {
		t.Fatalf("entries of up to %d bytes: raft-wal reads back at most %d", node.MaxEntryBytes, segment.MaxEntrySize)
	}
}

// TestLargeSendsSurviveRestart: a message larger than any entry may be,
// and a send of many messages that together are, are acknowledged,
// written in entries under the bound, and read back whole after every
// node restarted.
func TestLargeSendsSurviveRestart(t *testing.T) {
	c := nodetest.StartCluster(t, 3, group)
	cl := c.Client(group)
	upsertEntity(t, cl, 60_000)

	body := func(n, seed int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(i*31 + seed)
		}
		return b
	}
	want := map[string][]byte{"large": body(9<<20+17, 1)}
	var batch []*partitionpb.NewMessage
	for i := range 40 {
		id := fmt.Sprintf("batch-%d", i)
		want[id] = body(200<<10+i, i)
		batch = append(batch, &partitionpb.NewMessage{MessageId: id, Bare: want[id]})
	}
	for _, msgs := range [][]*partitionpb.NewMessage{{{MessageId: "large", Bare: want["large"]}}, batch} {
		resp, err := cl.Send(ctxFor(t), &partitionpb.SendRequest{EntityId: entity, Messages: msgs, RequestId: []byte(msgs[0].MessageId)})
		if err != nil {
			t.Fatalf("Send: %v", err)
		}
		if r := resp.Result; r.Code != partitionpb.ResultCode_RESULT_OK || len(r.SequenceNumbers) != len(msgs) {
			t.Fatalf("Send result %v", r)
		}
	}
	for i := range c.Len() {
		largest, _, err := node.LogBytes(c.Node(i), group)
		if err != nil {
			t.Fatal(err)
		}
		if largest > node.MaxEntryBytes {
			t.Fatalf("node %d holds an entry of %d bytes, over the bound of %d", i, largest, node.MaxEntryBytes)
		}
	}

	for i := range c.Len() {
		c.Kill(i)
	}
	for i := range c.Len() {
		c.Restart(i)
	}
	for len(want) > 0 {
		msgs := receive(t, cl, 100, true, 5000)
		if len(msgs) == 0 {
			t.Fatalf("%d messages not received after the restart", len(want))
		}
		for _, m := range msgs {
			if !bytes.Equal(m.Bare, want[m.MessageId]) {
				t.Fatalf("message %q: %d bytes, want %d", m.MessageId, len(m.Bare), len(want[m.MessageId]))
			}
			delete(want, m.MessageId)
		}
	}
}
