package partition_test

import (
	"bytes"
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/quorumbus/quorumbus/partition"
	pt "github.com/quorumbus/quorumbus/partition/partitiontest"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// seedBatches are real batches of every command.
func seedBatches() []*partitionpb.Batch {
	return []*partitionpb.Batch{
		{},
		{NowMs: 1000, Commands: []*partitionpb.Command{pt.Upsert(pt.Queue(1, 2, "q")), pt.Delete(1, 2)}},
		{NowMs: -1, Commands: []*partitionpb.Command{pt.Enqueue(1, 0, pt.Msg("hello"), &partitionpb.NewMessage{
			MessageId: "id", SessionId: "s", PartitionKey: "k", TtlMs: 5, ScheduledEnqueueTimeMs: 9,
			Header: []byte{0x00, 0x53, 0x70}, Annotations: []byte{1}, Bare: []byte{2, 3},
		})}},
		{NowMs: 1 << 40, Commands: []*partitionpb.Command{pt.Lock(1, 0, dlq, 5, 7), pt.ReceiveAndDelete(1, 0, main, 1)}},
		{Commands: []*partitionpb.Command{
			pt.SettleCmd(&partitionpb.Settle{EntityId: 1, Disposition: deadLetter, LockTokens: [][]byte{make([]byte, 16)},
				DeadLetterReason: "r", DeadLetterDescription: "d", PropertiesToModify: []byte{0xc1}}),
			pt.Renew(1, 0, main, make([]byte, 16)), pt.ExpireLocks(), {},
		}},
		{NowMs: 7000, Commands: []*partitionpb.Command{ // format 2
			{Op: pt.Enqueue(1, 0, pt.Msg("once")).Op, RequestId: []byte("req-1")},
			{Op: pt.Settle(1, 0, main, partitionpb.Disposition_DISPOSITION_COMPLETE, make([]byte, 16)).Op, RequestId: []byte("req-2")},
			pt.DeleteCmd(&partitionpb.DeleteEntity{EntityId: 1, Version: 12}),
		}},
		{NowMs: 5000, Commands: []*partitionpb.Command{
			pt.ActivateScheduled(), pt.ExpireMessages(), pt.CancelScheduled(1, 0, 1, 2, 1<<48|3),
			pt.LockBySequence(&partitionpb.LockBySequence{EntityId: 1, Partition: 1, SubQueue: dlq, SequenceNumbers: []uint64{7, 7}, TokenSeed: pt.Seed(9)}),
			pt.LockBySequence(&partitionpb.LockBySequence{EntityId: 1, SequenceNumbers: []uint64{1}, ReceiveAndDelete: true}),
		}},
	}
}

func FuzzDecodeBatch(f *testing.F) {
	for _, b := range seedBatches() {
		data, err := partition.EncodeBatch(b)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte{})
	f.Add([]byte{2})
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := partition.DecodeBatch(data)
		if err != nil {
			if !errors.Is(err, partition.ErrMalformed) && !errors.Is(err, partition.ErrUnknownFormat) {
				t.Fatalf("DecodeBatch: unexpected error %v", err)
			}
			return
		}
		// What decodes, re-encodes to something that decodes the same.
		again, err := partition.EncodeBatch(b)
		if err != nil {
			t.Fatalf("EncodeBatch of a decoded batch: %v", err)
		}
		b2, err := partition.DecodeBatch(again)
		if err != nil || !proto.Equal(b, b2) {
			t.Fatalf("round trip: %v, %v != %v", err, b2, b)
		}
	})
}

// FuzzSnapshotStream: any stream either decodes or fails with
// ErrBadSnapshot, and never panics or allocates what a corrupt length
// claims. This is all Restore does before a byte reaches the store; the
// tests in snapshot_test.go cover the rest.
func FuzzSnapshotStream(f *testing.F) {
	d := workload(f)
	f.Add(snapshotBytes(f, d.M))
	f.Add(snapshotBytes(f, pt.Open(f)))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _, err := partition.ReadSnapshot(bytes.NewReader(data))
		if err != nil && !errors.Is(err, partition.ErrBadSnapshot) {
			t.Fatalf("ReadSnapshot: %v, want ErrBadSnapshot", err)
		}
	})
}
