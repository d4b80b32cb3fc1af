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
	if node.RaceOn {
		// 36 MiB through three replicas: 4.5 s without the detector,
		// 41 s with it.
		t.Skip("moves hundreds of MiB: run without -race (make test does)")
	}
	const snapshotBytes, trailingBytes = 8 << 20, 2 << 20
	c := nodetest.Start(t, nodetest.Options{Groups: []uint64{group}, Configure: func(_ int, cfg *node.Config) {
		cfg.SnapshotThreshold = 1 << 40 // never by entries
		cfg.SnapshotLogBytes, cfg.TrailingLogBytes = snapshotBytes, trailingBytes
	}})
	cl := c.Client(group)
	upsertEntity(t, cl, 60_000)
	// Each message is received and deleted at once, so that snapshots stay
	// small and the threshold stays SnapshotLogBytes (a snapshot larger
	// than that raises it, so that a large store is not rewritten for
	// every few MiB sent).
	const n = 24
	for i := range n {
		msg := &partitionpb.NewMessage{MessageId: fmt.Sprint(i), Bare: make([]byte, 1536<<10)}
		if _, err := cl.Send(ctxFor(t), &partitionpb.SendRequest{EntityId: entity, Messages: []*partitionpb.NewMessage{msg}, RequestId: []byte(msg.MessageId)}); err != nil {
			t.Fatalf("Send: %v", err)
		}
		if got := receive(t, cl, 1, true, 5000); len(got) != 1 || got[0].MessageId != msg.MessageId {
			t.Fatalf("received %v after sending %s", got, msg.MessageId)
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
}
