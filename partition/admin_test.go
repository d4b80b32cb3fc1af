package partition_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/quorumbus/quorumbus/partition"
	pt "github.com/quorumbus/quorumbus/partition/partitiontest"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// deadLettered sends n messages to queue 1/0 and dead-letters them all,
// the odd ones with reason "odd", the even ones "even"; it returns their
// sequence numbers.
func deadLettered(t *testing.T, d *pt.Driver, n int) []uint64 {
	t.Helper()
	var msgs []*partitionpb.NewMessage
	for i := range n {
		msgs = append(msgs, pt.Msg(fmt.Sprint("m", i)))
	}
	d.OK(pt.Enqueue(1, 0, msgs...))
	got := d.OK(pt.Lock(1, 0, main, uint32(n), 7))
	for i, m := range got.Messages {
		reason := "even"
		if i%2 == 1 {
			reason = "odd"
		}
		d.OK(pt.SettleCmd(&partitionpb.Settle{EntityId: 1, SubQueue: main, LockTokens: [][]byte{m.LockToken},
			Disposition: partitionpb.Disposition_DISPOSITION_DEAD_LETTER, DeadLetterReason: reason, DeadLetterDescription: "why " + reason}))
	}
	return pt.Seqs(got)
}

func TestRedriveMovesInOneCommand(t *testing.T) {
	d := pt.NewDriver(t, 1_000_000)
	d.OK(pt.Upsert(pt.Queue(1, 0, "q")))
	seqs := deadLettered(t, d, 6)
	if st := d.Stats(1, 0); st.ActiveMessages != 0 || st.DeadLetterMessages != 6 {
		t.Fatalf("after dead-lettering: %v", st)
	}
	d.Now += 5000
	// Only the odd ones, by the reason a receiver of the DLQ sees as an
	// application property.
	r := d.OK(pt.Redrive(1, 0, "DeadLetterReason = 'odd'", seqs...))
	if want := []uint64{seqs[1], seqs[3], seqs[5]}; !slices.Equal(r.SequenceNumbers, want) {
		t.Fatalf("moved %v, want %v", r.SequenceNumbers, want)
	}
	if st := d.Stats(1, 0); st.ActiveMessages != 3 || st.DeadLetterMessages != 3 {
		t.Fatalf("after re-driving the odd ones: %v", st)
	}
	// A retry of the same command (its answer lost) moves nothing again.
	if r := d.OK(pt.Redrive(1, 0, "DeadLetterReason = 'odd'", seqs...)); len(r.SequenceNumbers) != 0 {
		t.Fatalf("the retry moved %v", r.SequenceNumbers)
	}
	got := d.OK(pt.Lock(1, 0, main, 10, 8))
	if len(got.Messages) != 3 {
		t.Fatalf("received %d re-driven messages, want 3", len(got.Messages))
	}
	for i, m := range got.Messages {
		if m.SequenceNumber <= seqs[5] || m.DeliveryCount != 0 || m.DeadLetterReason != "" || m.EnqueuedTimeMs != d.Now {
			t.Errorf("re-driven message %d: seq %d (old ones up to %d), delivery count %d, reason %q, enqueued %d (now %d)",
				i, m.SequenceNumber, seqs[5], m.DeliveryCount, m.DeadLetterReason, m.EnqueuedTimeMs, d.Now)
		}
		if want := fmt.Sprint("m", 2*i+1); string(m.Bare) != want {
			t.Errorf("re-driven message %d holds %q, want %q", i, m.Bare, want)
		}
	}
	// The rest, without a filter; the dead-letter queue is empty after.
	if r := d.OK(pt.Redrive(1, 0, "", seqs...)); len(r.SequenceNumbers) != 3 {
		t.Fatalf("moved %v, want the 3 even ones", r.SequenceNumbers)
	}
	if st := d.Stats(1, 0); st.ActiveMessages != 6 || st.DeadLetterMessages != 0 {
		t.Fatalf("after re-driving all: %v", st)
	}
	if err := partition.CheckIndexes(d.M, 1, 0); err != nil {
		t.Fatal(err)
	}
}

func TestRedriveFilterReadsTheView(t *testing.T) {
	d := pt.NewDriver(t, 1_000_000)
	d.OK(pt.Upsert(pt.Queue(1, 0, "q")))
	seqs := deadLettered(t, d, 2)
	red := &placementpb.RuleValue{Value: &placementpb.RuleValue_StringValue{StringValue: "red"}}
	r := d.OK(pt.RedriveCmd(&partitionpb.Redrive{EntityId: 1, SqlFilter: "color = 'red' AND sys.Label = 'x'", Candidates: []*partitionpb.RedriveCandidate{
		{SequenceNumber: seqs[0], View: &partitionpb.FilterView{Subject: "x", Properties: map[string]*placementpb.RuleValue{"color": red}}},
		{SequenceNumber: seqs[1], View: &partitionpb.FilterView{Subject: "y", Properties: map[string]*placementpb.RuleValue{"color": red}}},
	}}))
	if !slices.Equal(r.SequenceNumbers, seqs[:1]) {
		t.Fatalf("moved %v, want %v", r.SequenceNumbers, seqs[:1])
	}
}

func TestRedriveRefusals(t *testing.T) {
	d := pt.NewDriver(t, 1_000_000)
	d.OK(pt.Upsert(pt.Queue(1, 0, "q")))
	seqs := deadLettered(t, d, 1)
	for name, c := range map[string]*partitionpb.Command{
		"syntax":        pt.Redrive(1, 0, "color = ", seqs...),
		"no entity":     pt.Redrive(2, 0, "", seqs...),
		"long filter":   pt.Redrive(1, 0, string(make([]byte, partition.MaxRedriveFilterBytes+1)), seqs...),
		"many":          pt.Redrive(1, 0, "", make([]uint64, partition.MaxRedriveCount+1)...),
		"purge nothing": pt.Purge(1, 0, main, 0, 0),
	} {
		if r := d.Do(c); r.Code == partitionpb.ResultCode_RESULT_OK {
			t.Errorf("%s: OK, want a rejection", name)
		}
	}
	// A locked dead-lettered message stays where it is.
	l := d.OK(pt.Lock(1, 0, dlq, 1, 9))
	if r := d.OK(pt.Redrive(1, 0, "", seqs...)); len(r.SequenceNumbers) != 0 || len(l.Messages) != 1 {
		t.Fatalf("moved %v of a locked message", r.SequenceNumbers)
	}
	// A send-disabled entity takes no re-driven message.
	cfg := pt.Queue(1, 0, "q")
	cfg.Status = uint32(partitionpb.EntityStatus_ENTITY_STATUS_SEND_DISABLED)
	d.OK(pt.Upsert(cfg))
	if r := d.Do(pt.Redrive(1, 0, "", seqs...)); r.Code != partitionpb.ResultCode_RESULT_ENTITY_DISABLED {
		t.Fatalf("re-drive into a send-disabled queue: %v", r.Code)
	}
}

func TestPurgeInBoundedBatches(t *testing.T) {
	d := pt.NewDriver(t, 1_000_000)
	d.OK(pt.Upsert(pt.Queue(1, 0, "q")))
	var msgs []*partitionpb.NewMessage
	for i := range 25 {
		msgs = append(msgs, pt.Msg(fmt.Sprint("m", i)))
	}
	d.OK(pt.Enqueue(1, 0, msgs...))
	d.OK(pt.Lock(1, 0, main, 3, 1)) // locked ones go too
	d.OK(pt.Enqueue(1, 0, &partitionpb.NewMessage{Bare: []byte("later"), ScheduledEnqueueTimeMs: d.Now + 60_000}))
	var from uint64
	var batches, purged int
	for {
		r := d.OK(pt.Purge(1, 0, main, from, 10))
		batches++
		purged += len(r.SequenceNumbers)
		if len(r.SequenceNumbers) > 10 {
			t.Fatalf("one purge deleted %d, over its max 10", len(r.SequenceNumbers))
		}
		if !r.More {
			break
		}
		from = r.NextSequenceNumber
	}
	if purged != 26 || batches != 3 {
		t.Fatalf("purged %d in %d batches, want 26 in 3", purged, batches)
	}
	if st := d.Stats(1, 0); st.ActiveMessages != 0 || st.ScheduledMessages != 0 || st.LockedMessages != 0 || st.SizeBytes != 0 {
		t.Fatalf("after the purge: %v", st)
	}
	if err := partition.CheckIndexes(d.M, 1, 0); err != nil {
		t.Fatal(err)
	}
	if next, ok := d.M.NextLockExpiry(); ok {
		t.Errorf("a lock expiry at %d remains after the purge", next)
	}
}

func TestPurgeBeforeTime(t *testing.T) {
	d := pt.NewDriver(t, 1_000_000)
	d.OK(pt.Upsert(pt.Queue(1, 0, "q")))
	deadLettered(t, d, 4)
	d.Now += 1000
	bound := d.Now
	d.OK(pt.Enqueue(1, 0, pt.Msg("new")))
	got := d.OK(pt.Lock(1, 0, main, 1, 3))
	d.OK(pt.SettleCmd(&partitionpb.Settle{EntityId: 1, SubQueue: main, LockTokens: pt.Tokens(got), Disposition: partitionpb.Disposition_DISPOSITION_DEAD_LETTER}))
	r := d.OK(pt.PurgeCmd(&partitionpb.Purge{EntityId: 1, SubQueue: dlq, BeforeEnqueuedTimeMs: bound, MaxCount: 100}))
	if len(r.SequenceNumbers) != 4 || r.More {
		t.Fatalf("purged %v (more %t), want the 4 older ones", r.SequenceNumbers, r.More)
	}
	if st := d.Stats(1, 0); st.DeadLetterMessages != 1 {
		t.Fatalf("after the purge: %v", st)
	}
}

func TestRedriveSessionMessages(t *testing.T) {
	d := pt.NewDriver(t, 1_000_000)
	d.OK(pt.Upsert(pt.SessionQueue(1, 0, "s")))
	d.OK(pt.Enqueue(1, 0, pt.SessionMsg("a", "1"), pt.SessionMsg("a", "2")))
	tok := pt.SessionToken(1)
	d.OK(pt.Accept(1, 0, "a", tok))
	got := d.OK(pt.LockSession(1, 0, "a", tok, 2, 5))
	d.OK(pt.SettleCmd(&partitionpb.Settle{EntityId: 1, SubQueue: main, LockTokens: pt.Tokens(got), Disposition: partitionpb.Disposition_DISPOSITION_DEAD_LETTER}))
	d.OK(pt.Release(1, 0, "a", tok))
	if r := d.OK(pt.Redrive(1, 0, "sys.SessionId = 'a'", pt.Seqs(got)...)); len(r.SequenceNumbers) != 2 {
		t.Fatalf("moved %v", r.SequenceNumbers)
	}
	d.OK(pt.Accept(1, 0, "a", pt.SessionToken(2)))
	again := d.OK(pt.LockSession(1, 0, "a", pt.SessionToken(2), 5, 6))
	if len(again.Messages) != 2 || string(again.Messages[0].Bare) != "1" {
		t.Fatalf("the session's stream after re-drive: %d messages", len(again.Messages))
	}
	if err := partition.CheckIndexes(d.M, 1, 0); err != nil {
		t.Fatal(err)
	}
}
