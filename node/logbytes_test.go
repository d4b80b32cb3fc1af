package node_test

import (
	"fmt"
	"testing"

	"github.com/quorumbus/quorumbus/node"
	"github.com/quorumbus/quorumbus/node/nodetest"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// TestLogBoundedInBytes: a log that takes many bytes in few entries (large
// messages, staged in chunks) is snapshotted and cut by its bytes, not
// only after SnapshotThreshold entries, and nothing is lost.
func TestLogBoundedInBytes(t *testing.T) {
	const snapshotBytes, trailingBytes = 8 << 20, 2 << 20
	c := nodetest.Start(t, nodetest.Options{Groups: []uint64{group}, Configure: func(_ int, cfg *node.Config) {
		cfg.SnapshotThreshold = 1 << 40 // never by entries
		cfg.SnapshotLogBytes, cfg.TrailingLogBytes = snapshotBytes, trailingBytes
	}})
	cl := c.Client(group)
	upsertEntity(t, cl, 60_000)
	const n = 24
	for i := range n {
		msg := &partitionpb.NewMessage{MessageId: fmt.Sprint(i), Bare: make([]byte, 1536<<10)}
		if _, err := cl.Send(ctxFor(t), &partitionpb.SendRequest{EntityId: entity, Messages: []*partitionpb.NewMessage{msg}}); err != nil {
			t.Fatalf("Send: %v", err)
		}
	}
	// Sent: 36 MiB in about 50 entries. What stays is what came after the
	// last snapshot, less than snapshotBytes, and a tail of trailingBytes,
	// give or take an entry of each.
	for i := range c.Len() {
		c.WaitFor(fmt.Sprintf("node %d's log cut by its bytes", i), func() bool {
			_, total, err := node.LogBytes(c.Node(i), group)
			return err == nil && total < snapshotBytes+trailingBytes+4<<20
		})
	}
	got := 0
	for got < n {
		msgs := receive(t, cl, 100, true, 5000)
		if len(msgs) == 0 {
			t.Fatalf("received %d of %d", got, n)
		}
		got += len(msgs)
	}
}
