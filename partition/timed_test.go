package partition_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/quorumbus/quorumbus/partition"
	pt "github.com/quorumbus/quorumbus/partition/partitiontest"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// TestTimedCommandsBounded: ActivateScheduled and ExpireMessages do a
// bounded amount of work per command, and the leader's next proposal
// carries on where the last stopped, in due order.
func TestTimedCommandsBounded(t *testing.T) {
	d := pt.NewDriverLimits(t, 0, partition.Limits{LockCount: 100, ExpiredPerLock: 100, ExpiredLocks: 100, LockBytes: 1 << 20,
		Activated: 3, ExpiredMessages: 4})
	d.OK(pt.Upsert(pt.Queue(1, 0, "q")))
	var msgs []*partitionpb.NewMessage
	for i := range 7 {
		m := pt.Msg("s")
		m.ScheduledEnqueueTimeMs = 1000 + int64(6-i) // the last is due first
		m.TtlMs = 500
		msgs = append(msgs, m)
	}
	d.OK(pt.Enqueue(1, 0, msgs...))
	d.Now = 2000
	for i, want := range []uint64{4, 1, 0} {
		d.OK(pt.ActivateScheduled())
		if st := d.Stats(1, 0); st.ScheduledMessages != want {
			t.Fatalf("after activation %d: %d scheduled, want %d", i+1, st.ScheduledMessages, want)
		}
	}
	if _, ok := d.M.NextScheduledDue(); ok {
		t.Fatal("NextScheduledDue after all activated")
	}
	got, err := partition.Messages(d.M, 1, 0, pt.Main)
	if err != nil {
		t.Fatal(err)
	}
	// Activated in due order: the first activated was scheduled last.
	for i, m := range got {
		if m.SequenceNumber != uint64(8+i) || m.ScheduledEnqueueTimeMs != 1000+int64(i) || m.EnqueuedTimeMs != 2000 || m.ExpiresAtMs != 2500 {
			t.Fatalf("message %d: %v", i, m)
		}
	}
	if at, ok := d.M.NextMessageExpiry(); !ok || at != 2500 {
		t.Fatalf("NextMessageExpiry = %d, %v", at, ok)
	}
	d.Now = 2500
	for i, want := range []uint64{3, 0} {
		d.OK(pt.ExpireMessages())
		if st := d.Stats(1, 0); st.ActiveMessages != want {
			t.Fatalf("after expiry %d: %d active, want %d", i+1, st.ActiveMessages, want)
		}
	}
	if _, ok := d.M.NextMessageExpiry(); ok {
		t.Fatal("NextMessageExpiry after all expired")
	}
	if err := partition.CheckIndexes(d.M, 1, 0); err != nil {
		t.Fatal(err)
	}
}

// TestTimedRules: table of the rules of the new commands that the
// transcripts do not spell out.
func TestTimedRules(t *testing.T) {
	tests := []struct {
		name string
		cmds []*partitionpb.Command
		want error // of the last command
	}{
		{"dedup window below 20 s", []*partitionpb.Command{
			pt.Upsert(&partitionpb.EntityConfig{EntityId: 1, RequiresDuplicateDetection: true, DuplicateDetectionWindowMs: 19_999}),
		}, partition.ErrInvalid},
		{"dedup window above 7 days", []*partitionpb.Command{
			pt.Upsert(&partitionpb.EntityConfig{EntityId: 1, DuplicateDetectionWindowMs: 7*24*3600_000 + 1}),
		}, partition.ErrInvalid},
		{"dedup window of 7 days", []*partitionpb.Command{
			pt.Upsert(&partitionpb.EntityConfig{EntityId: 1, DuplicateDetectionWindowMs: 7 * 24 * 3600_000}),
		}, nil},
		{"cancel on a missing entity", []*partitionpb.Command{pt.CancelScheduled(9, 0, 1)}, partition.ErrEntityNotFound},
		{"cancel of too many numbers", []*partitionpb.Command{
			pt.Upsert(pt.Queue(1, 0, "q")), pt.CancelScheduled(1, 0, make([]uint64, partition.MaxSequenceNumbers+1)...),
		}, partition.ErrInvalid},
		{"cancel of nothing known", []*partitionpb.Command{pt.Upsert(pt.Queue(1, 0, "q")), pt.CancelScheduled(1, 0, 1, 2, 3)}, nil},
		{"receive-deferred without a seed", []*partitionpb.Command{
			pt.Upsert(pt.Queue(1, 0, "q")), pt.LockBySequence(&partitionpb.LockBySequence{EntityId: 1, SequenceNumbers: []uint64{1}}),
		}, partition.ErrInvalid},
		{"receive-deferred of an active message", []*partitionpb.Command{
			pt.Upsert(pt.Queue(1, 0, "q")), pt.Enqueue(1, 0, pt.Msg("a")),
			pt.LockBySequence(&partitionpb.LockBySequence{EntityId: 1, SequenceNumbers: []uint64{1}, TokenSeed: pt.Seed(1)}),
		}, partition.ErrMessageNotFound},
		{"receive-deferred on a receive-disabled entity", []*partitionpb.Command{
			pt.Upsert(&partitionpb.EntityConfig{EntityId: 1, Status: uint32(partitionpb.EntityStatus_ENTITY_STATUS_RECEIVE_DISABLED)}),
			pt.LockBySequence(&partitionpb.LockBySequence{EntityId: 1, SequenceNumbers: []uint64{1}, TokenSeed: pt.Seed(1)}),
		}, partition.ErrEntityDisabled},
		{"long message id with dedup", []*partitionpb.Command{
			pt.Upsert(&partitionpb.EntityConfig{EntityId: 1, RequiresDuplicateDetection: true}),
			pt.Enqueue(1, 0, &partitionpb.NewMessage{MessageId: string(make([]byte, partition.MaxMessageIDBytes+1))}),
		}, partition.ErrInvalid},
		{"activate and expire with no entity", []*partitionpb.Command{pt.ActivateScheduled(), pt.ExpireMessages()}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := pt.NewDriver(t, 1000)
			res := d.Apply(tc.cmds...)
			for i, r := range res[:len(res)-1] {
				if r.Code != partitionpb.ResultCode_RESULT_OK {
					t.Fatalf("command %d: %v", i, r)
				}
			}
			err := partition.ResultErr(res[len(res)-1])
			if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, partition.Err(mustCode(t, tc.want))) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
}

func mustCode(t *testing.T, err error) partitionpb.ResultCode {
	c, ok := partition.Code(err)
	if !ok {
		t.Fatalf("%v is not a rejection", err)
	}
	return c
}

// TestDedupPruned: duplicate-detection entries older than the window are
// deleted by later sends, a few per send, and those inside it are kept;
// a send that finds nothing to prune leaves the next ones a floor to skip
// the scan by, which must not keep entries from being pruned later.
func TestDedupPruned(t *testing.T) {
	d := pt.NewDriver(t, 1_000_000)
	cfg := pt.Queue(1, 0, "q")
	cfg.RequiresDuplicateDetection, cfg.DuplicateDetectionWindowMs = true, 60_000
	d.OK(pt.Upsert(cfg))
	count := func(want int) {
		t.Helper()
		n, err := partition.DedupEntries(d.M, 1, 0)
		if err != nil {
			t.Fatal(err)
		}
		if n != want {
			t.Fatalf("at %d: %d dedup entries, want %d", d.Now, n, want)
		}
	}
	send := func(id string) {
		m := pt.Msg("x")
		m.MessageId = id
		d.OK(pt.Enqueue(1, 0, m))
	}
	for i := range 300 {
		send(fmt.Sprint("a", i))
		d.Now++
	}
	count(300)
	// Sends without ids inside the window prune nothing; the scan they
	// skip must not hide entries that fall out of the window later.
	d.Now += 30_000
	send("")
	count(300)
	d.Now += 30_000 - 200 // the first 101 entries are now out of the window
	send("")
	if n, _ := partition.DedupEntries(d.M, 1, 0); n >= 300 || n < 200 {
		t.Fatalf("%d dedup entries after the first fell out of the window", n)
	}
	for range 20 { // each send prunes a bounded number
		send("")
	}
	count(199) // the window's cutoff is inclusive: 101 fell out
	d.Now += 1000
	for range 4 { // 65 a send
		send("")
	}
	count(0)
	send("b")
	count(1)
	d.Now += 60_000
	send("")
	count(0)
}
