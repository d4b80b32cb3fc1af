package partition_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/quorumbus/quorumbus/partition"
	pt "github.com/quorumbus/quorumbus/partition/partitiontest"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

const (
	main = partitionpb.SubQueue_SUB_QUEUE_MAIN
	dlq  = partitionpb.SubQueue_SUB_QUEUE_DEAD_LETTER

	complete   = partitionpb.Disposition_DISPOSITION_COMPLETE
	abandon    = partitionpb.Disposition_DISPOSITION_ABANDON
	deadLetter = partitionpb.Disposition_DISPOSITION_DEAD_LETTER
	deferD     = partitionpb.Disposition_DISPOSITION_DEFER
	release    = partitionpb.Disposition_DISPOSITION_RELEASE

	codeOK       = partitionpb.ResultCode_RESULT_OK
	codeLost     = partitionpb.ResultCode_RESULT_LOCK_LOST
	codeInvalid  = partitionpb.ResultCode_RESULT_INVALID
	codeNotFound = partitionpb.ResultCode_RESULT_ENTITY_NOT_FOUND
)

func msgs(n int) []*partitionpb.NewMessage {
	var out []*partitionpb.NewMessage
	for i := range n {
		out = append(out, pt.Msg(fmt.Sprintf("m%d", i)))
	}
	return out
}

func TestSequenceNumbers(t *testing.T) {
	d := pt.NewDriver(t, 1000)
	for _, part := range []uint32{0, 1, 0xffff} {
		d.OK(pt.Upsert(pt.Queue(1, part, "q")))
	}
	for _, part := range []uint32{0, 1, 0xffff} {
		var got []uint64
		got = append(got, d.OK(pt.Enqueue(1, part, msgs(3)...)).SequenceNumbers...)
		for _, r := range d.Apply(pt.Enqueue(1, part, msgs(2)...), pt.Enqueue(1, part), pt.Enqueue(1, part, msgs(1)...)) {
			got = append(got, r.SequenceNumbers...)
		}
		// Rejected enqueues and other entities take no numbers.
		d.Apply(pt.Enqueue(1, part, &partitionpb.NewMessage{TtlMs: -1}), pt.Enqueue(2, part, msgs(1)...))
		got = append(got, d.OK(pt.Enqueue(1, part, msgs(1)...)).SequenceNumbers...)
		for i, seq := range got {
			if want := uint64(part)<<48 | uint64(i+1); seq != want {
				t.Errorf("partition %d: message %d: sequence number %#x, want %#x", part, i, seq, want)
			}
		}
	}
}

func TestLockTokens(t *testing.T) {
	d := pt.NewDriver(t, 1000)
	d.OK(pt.Upsert(pt.Queue(5, 42, "q")))
	d.OK(pt.Enqueue(5, 42, msgs(2)...))
	r := d.OK(pt.Lock(5, 42, main, 2, 0x0102030405060708))
	for _, m := range r.Messages {
		if len(m.LockToken) != 16 {
			t.Fatalf("token %x: want 16 bytes", m.LockToken)
		}
		seq := binary.BigEndian.Uint64(m.LockToken)
		if seq != m.SequenceNumber || seq>>48 != 42 {
			t.Errorf("token %x: sequence %#x (partition %d), want %#x of partition 42", m.LockToken, seq, seq>>48, m.SequenceNumber)
		}
		if !bytes.Equal(m.LockToken[8:], pt.Seed(0x0102030405060708)) {
			t.Errorf("token %x does not end in the seed", m.LockToken)
		}
		if m.LockedUntilMs != 1000+partition.DefaultLockDurationMs {
			t.Errorf("locked until %d, want now + the default lock duration", m.LockedUntilMs)
		}
	}
	if r := d.Do(&partitionpb.Command{Op: &partitionpb.Command_Lock{Lock: &partitionpb.Lock{EntityId: 5, Partition: 42, MaxCount: 1, TokenSeed: []byte{1}}}}); r.Code != codeInvalid {
		t.Errorf("lock with a 1-byte seed: %v, want INVALID", r.Code)
	}
}

// TestSettleRules checks which tokens a settle or renew accepts. Every
// case starts from messages 1..3 locked with seed 1 at t=1000 (lock 10 s)
// and 4 unlocked; a rejected command must leave the state as it was.
func TestSettleRules(t *testing.T) {
	tok := func(seq uint64, seed uint64) []byte {
		return append(binary.BigEndian.AppendUint64(nil, seq), pt.Seed(seed)...)
	}
	tests := []struct {
		name   string
		now    int64
		sub    partitionpb.SubQueue
		disp   partitionpb.Disposition
		renew  bool
		tokens [][]byte
		want   partitionpb.ResultCode
		locked uint64 // locked messages after
	}{
		{name: "valid", now: 1000, tokens: [][]byte{tok(1, 1), tok(2, 1)}, want: codeOK, locked: 1},
		{name: "just before expiry", now: 10999, tokens: [][]byte{tok(1, 1)}, want: codeOK, locked: 2},
		{name: "at expiry", now: 11000, tokens: [][]byte{tok(1, 1)}, want: codeLost, locked: 3},
		{name: "wrong seed", now: 1000, tokens: [][]byte{tok(1, 2)}, want: codeLost, locked: 3},
		{name: "unlocked message", now: 1000, tokens: [][]byte{tok(4, 1)}, want: codeLost, locked: 3},
		{name: "no such message", now: 1000, tokens: [][]byte{tok(99, 1)}, want: codeLost, locked: 3},
		{name: "short token", now: 1000, tokens: [][]byte{tok(1, 1)[:15]}, want: codeLost, locked: 3},
		{name: "other partition", now: 1000, tokens: [][]byte{tok(1<<48|1, 1)}, want: codeLost, locked: 3},
		{name: "wrong sub-queue", now: 1000, sub: dlq, tokens: [][]byte{tok(1, 1)}, want: codeLost, locked: 3},
		{name: "one lost spoils all", now: 1000, tokens: [][]byte{tok(1, 1), tok(2, 9), tok(3, 1)}, want: codeLost, locked: 3},
		{name: "duplicate settles once", now: 1000, disp: abandon, tokens: [][]byte{tok(1, 1), tok(1, 1)}, want: codeOK, locked: 2},
		{name: "out of order", now: 1000, tokens: [][]byte{tok(3, 1), tok(1, 1), tok(2, 1)}, want: codeOK, locked: 0},
		{name: "a twin with another seed", now: 1000, tokens: [][]byte{tok(2, 1), tok(2, 9)}, want: codeLost, locked: 3},
		{name: "duplicates among others", now: 1000, tokens: [][]byte{tok(3, 1), tok(1, 1), tok(3, 1), tok(1, 1)}, want: codeOK, locked: 1},
		{name: "no tokens", now: 1000, tokens: nil, want: codeOK, locked: 3},
		{name: "bad disposition", now: 1000, disp: 9, tokens: [][]byte{tok(1, 1)}, want: codeInvalid, locked: 3},
		{name: "bad sub-queue", now: 1000, sub: 7, tokens: [][]byte{tok(1, 1)}, want: codeInvalid, locked: 3},
		{name: "renew", now: 5000, renew: true, tokens: [][]byte{tok(1, 1), tok(3, 1)}, want: codeOK, locked: 3},
		{name: "renew lost", now: 5000, renew: true, tokens: [][]byte{tok(1, 1), tok(4, 1)}, want: codeLost, locked: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := pt.NewDriver(t, 1000)
			d.OK(pt.Upsert(&partitionpb.EntityConfig{EntityId: 1, Name: "q", LockDurationMs: 10_000}))
			d.OK(pt.Enqueue(1, 0, msgs(4)...))
			d.OK(pt.Lock(1, 0, main, 3, 1))
			before, err := partition.Messages(d.M, 1, 0, main)
			if err != nil {
				t.Fatal(err)
			}
			d.Now = tt.now
			var c *partitionpb.Command
			if tt.renew {
				c = pt.Renew(1, 0, tt.sub, tt.tokens...)
			} else {
				c = pt.Settle(1, 0, tt.sub, tt.disp, tt.tokens...)
			}
			r := d.Do(c)
			if r.Code != tt.want {
				t.Fatalf("%v (%s), want %v", r.Code, r.Description, tt.want)
			}
			if got := d.Stats(1, 0).LockedMessages; got != tt.locked {
				t.Errorf("%d locked after, want %d", got, tt.locked)
			}
			after, err := partition.Messages(d.M, 1, 0, main)
			if err != nil {
				t.Fatal(err)
			}
			if tt.want != codeOK && !equalMessages(before, after) {
				t.Errorf("a rejected command changed the messages:\nbefore %v\nafter  %v", before, after)
			}
			if tt.renew && tt.want == codeOK {
				if len(r.LockedUntilMs) != len(tt.tokens) || r.LockedUntilMs[0] != tt.now+10_000 {
					t.Errorf("renew: locked until %v, want %d per token", r.LockedUntilMs, tt.now+10_000)
				}
			}
			if tt.name == "duplicate settles once" && after[0].DeliveryCount != 1 {
				t.Errorf("delivery count %d after a duplicate abandon, want 1", after[0].DeliveryCount)
			}
		})
	}
}

func equalMessages(a, b []*partitionpb.StoredMessage) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !proto.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

// TestDispositions checks where each disposition leaves a message, in both
// sub-queues.
func TestDispositions(t *testing.T) {
	tests := []struct {
		disp      partitionpb.Disposition
		sub       partitionpb.SubQueue
		want      string // where the message is after: gone, main, dlq, deferred
		count     uint32
		available bool
	}{
		{complete, main, "gone", 0, false},
		{abandon, main, "main", 1, true},
		{release, main, "main", 0, true},
		{deadLetter, main, "dlq", 0, true},
		{deferD, main, "deferred", 0, false},
		{complete, dlq, "gone", 0, false},
		{abandon, dlq, "dlq", 1, true},
		{release, dlq, "dlq", 0, true},
		{deferD, dlq, "deferred", 0, false},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%v/%v", tt.disp, tt.sub), func(t *testing.T) {
			d := pt.NewDriver(t, 1000)
			d.OK(pt.Upsert(pt.Queue(1, 0, "q")))
			d.OK(pt.Enqueue(1, 0, pt.Msg("x")))
			if tt.sub == dlq {
				d.OK(pt.Settle(1, 0, main, deadLetter, pt.Tokens(d.OK(pt.Lock(1, 0, main, 1, 1)))...))
			}
			r := d.OK(pt.Lock(1, 0, tt.sub, 1, 2))
			if len(r.Messages) != 1 {
				t.Fatalf("locked %d messages, want 1", len(r.Messages))
			}
			count := r.Messages[0].DeliveryCount
			d.OK(pt.Settle(1, 0, tt.sub, tt.disp, pt.Tokens(r)...))
			where := "gone"
			var got *partitionpb.StoredMessage
			for _, q := range []partitionpb.SubQueue{main, dlq} {
				ms, err := partition.Messages(d.M, 1, 0, q)
				if err != nil {
					t.Fatal(err)
				}
				if len(ms) > 0 {
					got, where = ms[0], map[partitionpb.SubQueue]string{main: "main", dlq: "dlq"}[q]
				}
			}
			if got != nil && got.State == partitionpb.MessageState_MESSAGE_STATE_DEFERRED {
				where = "deferred"
			}
			if where != tt.want {
				t.Fatalf("message is %s, want %s", where, tt.want)
			}
			if got != nil {
				if got.DeliveryCount-count != tt.count {
					t.Errorf("delivery count went from %d to %d, want +%d", count, got.DeliveryCount, tt.count)
				}
				if len(got.LockToken) != 0 || got.LockedUntilMs != 0 {
					t.Errorf("still locked: %x until %d", got.LockToken, got.LockedUntilMs)
				}
			}
			if a := d.M.Available(1, 0, map[bool]partitionpb.SubQueue{false: main, true: dlq}[where == "dlq" || tt.sub == dlq]); a != tt.available {
				t.Errorf("available %v, want %v", a, tt.available)
			}
			if s := d.Stats(1, 0); s.LockedMessages != 0 {
				t.Errorf("stats: %d locked, want 0", s.LockedMessages)
			}
		})
	}
}

func TestLockBounds(t *testing.T) {
	d := pt.NewDriverLimits(t, 1000, partition.Limits{LockCount: 50, ExpiredPerLock: 100, ExpiredLocks: 100, LockBytes: 8 << 10})
	d.OK(pt.Upsert(pt.Queue(1, 0, "q")))
	// 100 messages that expire at 1001, then one that does not.
	expiring := msgs(100)
	for _, m := range expiring {
		m.TtlMs = 1
	}
	d.OK(pt.Enqueue(1, 0, expiring...))
	d.OK(pt.Enqueue(1, 0, pt.Msg("live")))
	d.Now = 2000
	if r := d.OK(pt.Lock(1, 0, main, 10, 1)); len(r.Messages) != 0 {
		t.Fatalf("the first lock took %d messages; it should stop after dropping 100", len(r.Messages))
	}
	if s := d.Stats(1, 0); s.ActiveMessages != 1 {
		t.Fatalf("%d active after the first lock, want 1", s.ActiveMessages)
	}
	if r := d.OK(pt.Lock(1, 0, main, 10, 1)); len(r.Messages) != 1 || string(r.Messages[0].Bare) != "live" {
		t.Fatalf("second lock: %v, want the live message", pt.Seqs(r))
	}

	// max_count is capped.
	d.OK(pt.Enqueue(1, 0, msgs(51)...))
	if r := d.OK(pt.Lock(1, 0, main, 1<<31, 1)); len(r.Messages) != 50 {
		t.Fatalf("locked %d, want the cap 50", len(r.Messages))
	}
	if r := d.OK(pt.Lock(1, 0, main, 0, 1)); len(r.Messages) != 0 {
		t.Fatalf("max_count 0 locked %d", len(r.Messages))
	}

	// So are the bytes one Lock takes, but it always takes one message.
	d.OK(pt.Upsert(pt.Queue(2, 0, "big")))
	big := bytes.Repeat([]byte("x"), 3<<10)
	d.OK(pt.Enqueue(2, 0, &partitionpb.NewMessage{Bare: big}, &partitionpb.NewMessage{Bare: big}, &partitionpb.NewMessage{Bare: big}))
	d.OK(pt.Enqueue(2, 0, &partitionpb.NewMessage{Bare: bytes.Repeat(big, 3)}))
	if r := d.OK(pt.Lock(2, 0, main, 10, 1)); len(r.Messages) != 3 {
		t.Fatalf("locked %d messages of 3 KiB, want 3 (the bound is 8 KiB)", len(r.Messages))
	}
	if r := d.OK(pt.Lock(2, 0, main, 10, 1)); len(r.Messages) != 1 {
		t.Fatalf("locked %d messages of 9 KiB, want 1", len(r.Messages))
	}
}

func TestExpireLocksBound(t *testing.T) {
	d := pt.NewDriverLimits(t, 1000, partition.Limits{LockCount: 100, ExpiredPerLock: 100, ExpiredLocks: 100, LockBytes: 1 << 20})
	d.OK(pt.Upsert(pt.Queue(1, 0, "q")))
	d.OK(pt.Upsert(pt.Queue(2, 0, "q2")))
	d.OK(pt.Enqueue(1, 0, msgs(60)...))
	d.OK(pt.Enqueue(2, 0, msgs(41)...))
	d.OK(pt.Lock(1, 0, main, 60, 1))
	d.OK(pt.Lock(2, 0, main, 41, 1))
	d.Now = 1_000_000
	d.OK(pt.ExpireLocks())
	if s := d.Stats(1, 0); s.LockedMessages != 0 {
		t.Fatalf("%d locked in the first entity after one ExpireLocks, want 0", s.LockedMessages)
	}
	if s := d.Stats(2, 0); s.LockedMessages != 1 {
		t.Fatalf("%d locked in the second entity after one ExpireLocks, want 1 (it ends at most 100)", s.LockedMessages)
	}
	if ms, ok := d.M.NextLockExpiry(); !ok || ms > d.Now {
		t.Fatalf("NextLockExpiry = %d, %v: want one due", ms, ok)
	}
	d.OK(pt.ExpireLocks())
	if _, ok := d.M.NextLockExpiry(); ok {
		t.Fatal("a lock is left after the second ExpireLocks")
	}
}

func TestChanged(t *testing.T) {
	d := pt.NewDriver(t, 1000)
	closed := func(c <-chan struct{}) bool {
		select {
		case <-c:
			return true
		default:
			return false
		}
	}
	steps := []struct {
		name    string
		cmd     func() *partitionpb.Command
		changed bool
	}{
		{"upsert", func() *partitionpb.Command { return pt.Upsert(pt.Queue(1, 0, "q")) }, true},
		{"enqueue", func() *partitionpb.Command { return pt.Enqueue(1, 0, msgs(2)...) }, true},
		{"enqueue scheduled", func() *partitionpb.Command {
			return pt.Enqueue(1, 0, &partitionpb.NewMessage{ScheduledEnqueueTimeMs: 5000})
		}, false},
		{"lock", func() *partitionpb.Command { return pt.Lock(1, 0, main, 1, 1) }, false},
		{"abandon", func() *partitionpb.Command {
			return pt.Settle(1, 0, main, abandon, append(binary.BigEndian.AppendUint64(nil, 1), pt.Seed(1)...))
		}, true},
		{"lock again", func() *partitionpb.Command { return pt.Lock(1, 0, main, 1, 2) }, false},
		{"lock lost", func() *partitionpb.Command { return pt.Settle(1, 0, main, abandon, []byte("x")) }, false},
		{"expire early", func() *partitionpb.Command { return pt.ExpireLocks() }, false},
		{"expire", func() *partitionpb.Command { d.Now += 60_000; return pt.ExpireLocks() }, true},
		{"delete", func() *partitionpb.Command { return pt.Delete(1, 0) }, true},
	}
	other := d.M.Changed(2, 0, main) // an entity nobody touches
	for _, s := range steps {
		c := d.M.Changed(1, 0, main)
		d.Do(s.cmd())
		if got := closed(c); got != s.changed {
			t.Errorf("%s: changed %v, want %v", s.name, got, s.changed)
		}
		if closed(other) {
			t.Fatalf("%s woke the receivers of another entity", s.name)
		}
	}
	c := d.M.Changed(1, 0, main)
	if err := d.M.Close(); err != nil {
		t.Fatal(err)
	}
	if !closed(c) {
		t.Error("Close left Changed open")
	}
}

func TestReads(t *testing.T) {
	d := pt.NewDriver(t, 1000)
	if d.M.HasEntity(1, 0) || d.M.Available(1, 0, main) {
		t.Fatal("an empty machine has an entity")
	}
	if _, err := d.M.Stats(1, 0); !errors.Is(err, partition.ErrEntityNotFound) {
		t.Fatalf("Stats of an unknown entity: %v", err)
	}
	d.OK(pt.Upsert(&partitionpb.EntityConfig{EntityId: 1, Partition: 0, LockDurationMs: 1000}))
	d.OK(pt.Upsert(&partitionpb.EntityConfig{EntityId: 2, Partition: 0, LockDurationMs: 500}))
	if !d.M.HasEntity(1, 0) || d.M.HasEntity(1, 1) {
		t.Fatal("HasEntity")
	}
	d.OK(pt.Enqueue(1, 0, msgs(1)...))
	d.OK(pt.Enqueue(2, 0, msgs(1)...))
	if !d.M.Available(1, 0, main) || d.M.Available(1, 0, dlq) || d.M.Available(1, 0, 9) {
		t.Fatal("Available")
	}
	d.OK(pt.Lock(1, 0, main, 1, 1))
	if d.M.Available(1, 0, main) {
		t.Fatal("available while its only message is locked")
	}
	d.Now = 1100
	d.OK(pt.Lock(2, 0, main, 1, 1))
	if ms, ok := d.M.NextLockExpiry(); !ok || ms != 1600 {
		t.Fatalf("NextLockExpiry = %d, %v; want 1600", ms, ok)
	}
}

func TestResultCodes(t *testing.T) {
	for _, err := range []error{partition.ErrEntityNotFound, partition.ErrLockLost, partition.ErrQuotaExceeded, partition.ErrEntityDisabled, partition.ErrInvalid} {
		code, ok := partition.Code(fmt.Errorf("context: %w", err))
		if !ok || code == codeOK {
			t.Errorf("Code(%v) = %v, %v", err, code, ok)
		}
		if back := partition.Err(code); back != err {
			t.Errorf("Err(%v) = %v, want %v", code, back, err)
		}
		r := &partitionpb.Result{Code: code, Description: "partition: something: detail"}
		if rerr := partition.ResultErr(r); !errors.Is(rerr, err) || rerr.Error() != r.Description {
			t.Errorf("ResultErr(%v) = %v", r, rerr)
		}
	}
	if code, ok := partition.Code(nil); !ok || code != codeOK {
		t.Errorf("Code(nil) = %v, %v", code, ok)
	}
	for _, err := range []error{partition.ErrCorrupt, partition.ErrUnknownCommand, errors.New("disk on fire")} {
		if _, ok := partition.Code(err); ok {
			t.Errorf("Code(%v) calls a failure a rejection", err)
		}
	}
	if partition.ResultErr(&partitionpb.Result{}) != nil {
		t.Error("ResultErr(OK) != nil")
	}
}

func TestPropertiesToModify(t *testing.T) {
	d := pt.NewDriver(t, 1000)
	d.OK(pt.Upsert(pt.Queue(1, 0, "q")))
	d.OK(pt.Enqueue(1, 0, pt.Msg("x")))
	for i, disp := range []partitionpb.Disposition{abandon, release, abandon, deadLetter} {
		sub := main
		r := d.OK(pt.Lock(1, 0, sub, 1, uint64(i)))
		d.OK(pt.SettleCmd(&partitionpb.Settle{EntityId: 1, SubQueue: sub, Disposition: disp,
			LockTokens: pt.Tokens(r), PropertiesToModify: []byte(fmt.Sprint(i))}))
	}
	ms, err := partition.Messages(d.M, 1, 0, dlq)
	if err != nil || len(ms) != 1 {
		t.Fatalf("dead-letter sub-queue: %v, %v", ms, err)
	}
	// Release carries no modification (AMQP released has none).
	if got := fmt.Sprintf("%q", ms[0].ModifiedProperties); got != `["0" "2" "3"]` {
		t.Errorf("modified properties %s, want [0 2 3]", got)
	}
}

// TestUpsertVersion: an upsert older than the configuration in place (a
// former catalog leader's call arriving late) changes nothing; a newer one,
// or an unversioned one, applies.
func TestUpsertVersion(t *testing.T) {
	lockFor := func(d *pt.Driver) int64 {
		t.Helper()
		d.OK(pt.Enqueue(1, 0, msgs(1)...))
		r := d.OK(pt.Lock(1, 0, main, 1, 1))
		if len(r.Messages) != 1 {
			t.Fatalf("locked %d messages", len(r.Messages))
		}
		return r.Messages[0].LockedUntilMs - d.Now
	}
	d := pt.NewDriver(t, 1000)
	d.OK(pt.Upsert(&partitionpb.EntityConfig{EntityId: 1, Name: "q", LockDurationMs: 10_000, Version: 5}))
	d.OK(pt.Upsert(&partitionpb.EntityConfig{EntityId: 1, Name: "q", LockDurationMs: 20_000, Version: 3}))
	if got := lockFor(d); got != 10_000 {
		t.Fatalf("after a stale upsert the lock lasts %d ms, want 10000", got)
	}
	d.OK(pt.Upsert(&partitionpb.EntityConfig{EntityId: 1, Name: "q", LockDurationMs: 30_000, Version: 7}))
	if got := lockFor(d); got != 30_000 {
		t.Fatalf("after a newer upsert the lock lasts %d ms, want 30000", got)
	}
	d.OK(pt.Upsert(&partitionpb.EntityConfig{EntityId: 1, Name: "q", LockDurationMs: 40_000}))
	if got := lockFor(d); got != 40_000 {
		t.Fatalf("after an unversioned upsert the lock lasts %d ms, want 40000", got)
	}
}

// TestDeleteVersion: a versioned delete leaves a tombstone that keeps an
// older upsert arriving late from re-creating the entity, even when the
// delete came first; a newer upsert re-creates it; a delete older than
// the entity's configuration is ignored; unversioned commands behave as
// before.
func TestDeleteVersion(t *testing.T) {
	d := pt.NewDriver(t, 1000)
	upsert := func(id, version uint64) {
		t.Helper()
		d.OK(pt.Upsert(&partitionpb.EntityConfig{EntityId: id, Name: fmt.Sprint("q", id), Version: version}))
	}
	del := func(id, version uint64) *partitionpb.Result {
		t.Helper()
		return d.Do(pt.DeleteCmd(&partitionpb.DeleteEntity{EntityId: id, Version: version}))
	}
	exists := func(id uint64, want bool) {
		t.Helper()
		_, err := d.M.Stats(id, 0)
		if got := err == nil; got != want {
			t.Fatalf("entity %d exists: %v, want %v (%v)", id, got, want, err)
		}
	}
	upsert(1, 5)
	d.OK(pt.Enqueue(1, 0, msgs(3)...))
	if r := del(1, 7); r.Code != partitionpb.ResultCode_RESULT_OK {
		t.Fatalf("delete: %v", r)
	}
	exists(1, false)
	upsert(1, 5) // late, from before the delete
	upsert(1, 6)
	exists(1, false)
	upsert(1, 8) // a newer configuration: re-created, empty
	exists(1, true)
	if st := d.Stats(1, 0); st.ActiveMessages != 0 {
		t.Fatalf("re-created with %d messages", st.ActiveMessages)
	}
	if r := del(1, 3); r.Code != partitionpb.ResultCode_RESULT_OK {
		t.Fatalf("stale delete: %v", r)
	}
	exists(1, true) // the stale delete was ignored

	// The delete arrives before the upsert it supersedes.
	if r := del(2, 10); r.Code != partitionpb.ResultCode_RESULT_OK {
		t.Fatalf("delete of an entity not yet seen: %v", r)
	}
	upsert(2, 9)
	exists(2, false)
	upsert(2, 11)
	exists(2, true)

	// Unversioned: not found as before, and an unversioned upsert always
	// applies.
	if r := del(3, 0); r.Code != partitionpb.ResultCode_RESULT_ENTITY_NOT_FOUND {
		t.Fatalf("unversioned delete of a missing entity: %v", r)
	}
	del(2, 20)
	upsert(2, 0)
	exists(2, true)
}

// TestFreshMessages: messages never handed out have no available-index
// entry (entity.fresh); Lock takes indexed ones first, then fresh ones, in
// sequence order, passing over scheduled ones, and the indexes stay exact.
func TestFreshMessages(t *testing.T) {
	d := pt.NewDriver(t, 1000)
	d.OK(pt.Upsert(pt.Queue(1, 0, "q")))
	check := func(step string) {
		t.Helper()
		if err := partition.CheckIndexes(d.M, 1, 0); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
	}
	later := &partitionpb.NewMessage{Bare: []byte("later"), ScheduledEnqueueTimeMs: 5000}
	d.OK(pt.Enqueue(1, 0, pt.Msg("a"), pt.Msg("b"), later, pt.Msg("d"), pt.Msg("e")))
	check("enqueued")
	bodies := func(r *partitionpb.Result) string {
		var s []string
		for _, m := range r.Messages {
			s = append(s, string(m.Bare))
		}
		return strings.Join(s, ",")
	}
	r := d.OK(pt.Lock(1, 0, main, 2, 1))
	if got := bodies(r); got != "a,b" {
		t.Fatalf("first lock took %s", got)
	}
	check("locked a, b")
	d.OK(pt.Settle(1, 0, main, partitionpb.Disposition_DISPOSITION_ABANDON, pt.Tokens(r)[0]))
	check("abandoned a")
	if !d.M.Available(1, 0, main) {
		t.Fatal("not available with a abandoned and d, e fresh")
	}
	r = d.OK(pt.Lock(1, 0, main, 10, 2))
	if got := bodies(r); got != "a,d,e" {
		t.Fatalf("second lock took %s, want the abandoned a, then d and e past the scheduled one", got)
	}
	check("locked a, d, e")
	if d.M.Available(1, 0, main) {
		t.Fatal("available with only a scheduled message left")
	}
	d.Now = 6000
	d.OK(pt.ActivateScheduled())
	check("activated")
	if !d.M.Available(1, 0, main) {
		t.Fatal("the activated message is not available")
	}
	r = d.OK(pt.Lock(1, 0, main, 10, 3))
	if got := bodies(r); got != "later" {
		t.Fatalf("third lock took %s", got)
	}
	check("locked the activated one")
	if s := d.Stats(1, 0); s.ActiveMessages != 5 || s.LockedMessages != 5 {
		t.Fatalf("stats %v", s)
	}
}

// TestAvailableAfterPartialLock: a Lock that stops at its count with fresh
// messages left lets Available say yes without reading them
// (entity.freshLeft), and whatever changes or removes those messages
// since (a Lock taking the rest, expiry, purge, a scheduled one next) makes
// it read again, so that it never says yes with nothing to take.
func TestAvailableAfterPartialLock(t *testing.T) {
	d := pt.NewDriver(t, 1000)
	d.OK(pt.Upsert(pt.Queue(1, 0, "q")))
	available := func(step string, want bool) {
		t.Helper()
		if got := d.M.Available(1, 0, main); got != want {
			t.Fatalf("%s: Available %v, want %v", step, got, want)
		}
	}
	lock := func(max uint32, want int) {
		t.Helper()
		if r := d.OK(pt.Lock(1, 0, main, max, uint64(d.Now))); len(r.Messages) != want {
			t.Fatalf("locked %d, want %d", len(r.Messages), want)
		}
	}
	d.OK(pt.Enqueue(1, 0, pt.Msg("a"), pt.Msg("b"), pt.Msg("c")))
	lock(1, 1)
	available("b and c left", true)
	lock(5, 2)
	available("all taken", false)

	short := func(body string) *partitionpb.NewMessage {
		m := pt.Msg(body)
		m.TtlMs = 100
		return m
	}
	d.OK(pt.Enqueue(1, 0, pt.Msg("d"), short("e")))
	lock(1, 1)
	available("e left", true)
	d.Now += 1000
	d.OK(pt.ExpireMessages())
	available("e expired", false)

	d.OK(pt.Enqueue(1, 0, pt.Msg("f"), pt.Msg("g")))
	lock(1, 1)
	available("g left", true)
	d.OK(pt.Purge(1, 0, main, 0, 100))
	available("purged", false)

	d.OK(pt.Enqueue(1, 0, pt.Msg("h"), &partitionpb.NewMessage{Bare: []byte("later"), ScheduledEnqueueTimeMs: d.Now + 60_000}))
	lock(1, 1)
	available("only a scheduled one left", false)
}
