package partition_test

import (
	"fmt"
	"testing"

	"github.com/quorumbus/quorumbus/partition"
	pt "github.com/quorumbus/quorumbus/partition/partitiontest"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// TestLockGrants locks more messages than one grant covers, at two times,
// renews, completes and abandons some, and lets the rest expire a budget
// at a time: after every step the grants hold exactly the locks, and none
// is left at the end.
func TestLockGrants(t *testing.T) {
	d := pt.NewDriverLimits(t, 1000, partition.Limits{LockCount: 5000, ExpiredPerLock: 10_000, ExpiredLocks: 300, LockBytes: 8 << 20})
	d.OK(pt.Upsert(pt.Queue(1, 0, "q")))
	check := func(step string) {
		t.Helper()
		if err := partition.CheckIndexes(d.M, 1, 0); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
	}
	for i := range 6 {
		msgs := make([]*partitionpb.NewMessage, 250)
		for j := range msgs {
			msgs[j] = pt.Msg(fmt.Sprint(i*250 + j))
		}
		d.OK(pt.Enqueue(1, 0, msgs...))
	}
	first := pt.Tokens(d.OK(pt.Lock(1, 0, pt.Main, 1200, 1)))
	if len(first) != 1200 {
		t.Fatalf("locked %d of 1200", len(first))
	}
	check("1200 locked: two grants")
	d.Now += 10
	second := pt.Tokens(d.OK(pt.Lock(1, 0, pt.Main, 200, 2)))
	check("200 more, 10 ms later")
	if n, err := partition.LockGrants(d.M, 1, 0); err != nil || n != 3 {
		t.Fatalf("%d lock grants (%v), want 3: two of the first lock, one of the second", n, err)
	}

	d.Now += 5
	var renewed, completed, abandoned [][]byte
	for i, tok := range first {
		switch {
		case i%10 == 1:
			renewed = append(renewed, tok)
		case i%2 == 0:
			completed = append(completed, tok)
		case i%3 == 0:
			abandoned = append(abandoned, tok)
		}
	}
	d.OK(pt.Renew(1, 0, pt.Main, renewed...))
	check("renewed")
	d.OK(pt.Settle(1, 0, pt.Main, complete, completed...))
	check("completed")
	d.OK(pt.Settle(1, 0, pt.Main, abandon, abandoned...))
	check("abandoned")

	locked := uint64(len(first) + len(second) - len(completed) - len(abandoned))
	if got := d.Stats(1, 0).LockedMessages; got != locked {
		t.Fatalf("%d locked, want %d", got, locked)
	}
	// The first lock's remaining messages expire first, 300 a command,
	// and then only they: the second lock and the renewed ones last longer.
	d.Now = 1000 + partition.DefaultLockDurationMs
	later := uint64(len(second) + len(renewed))
	for rest := locked - later; rest > 0; {
		d.OK(pt.ExpireLocks())
		check("expired some")
		rest -= min(rest, 300)
		if got := d.Stats(1, 0).LockedMessages; got != rest+later {
			t.Fatalf("%d locked after expiry, want %d", got, rest+later)
		}
	}
	if r := d.Do(pt.Settle(1, 0, pt.Main, complete, second...)); r.Code != partitionpb.ResultCode_RESULT_OK {
		t.Fatalf("the second lock's tokens: %v %s", r.Code, r.Description)
	}
	check("second completed")
	d.Now += 1000
	d.OK(pt.ExpireLocks())
	check("all expired")
	if got := d.Stats(1, 0).LockedMessages; got != 0 {
		t.Fatalf("%d locked at the end", got)
	}
	if n, err := partition.LockGrants(d.M, 1, 0); err != nil || n != 0 {
		t.Fatalf("%d lock grants left (%v)", n, err)
	}
	// Abandoned and expired messages come back once more, in order.
	again := d.OK(pt.Lock(1, 0, pt.Main, 5000, 3))
	want := len(first) - len(completed)
	if len(again.Messages) != want+100 { // and the 100 never locked
		t.Fatalf("relocked %d, want %d", len(again.Messages), want+100)
	}
	for _, m := range again.Messages[:want] {
		if m.DeliveryCount != 1 {
			t.Fatalf("message %d: delivery count %d, want 1", m.SequenceNumber, m.DeliveryCount)
		}
	}
	check("relocked")
}

// TestUpgradeLockIndex opens a store whose lock index has an entry per
// lock, as before grants: its locks become grants, settle and expire.
func TestUpgradeLockIndex(t *testing.T) {
	dir := t.TempDir()
	m, err := partition.Open(dir, pt.Options())
	if err != nil {
		t.Fatal(err)
	}
	d := &pt.Driver{T: t, M: m, Now: 1000}
	d.OK(pt.Upsert(pt.Queue(1, 0, "q")))
	d.OK(pt.Enqueue(1, 0, pt.Msg("a"), pt.Msg("b"), pt.Msg("c"), pt.Msg("d"), pt.Msg("e")))
	tokens := pt.Tokens(d.OK(pt.Lock(1, 0, pt.Main, 2, 1)))
	d.Now += 7
	tokens = append(tokens, pt.Tokens(d.OK(pt.Lock(1, 0, pt.Main, 2, 2)))...)
	if err := partition.DowngradeLockIndex(m); err != nil {
		t.Fatal(err)
	}
	if n, err := partition.LockGrants(m, 1, 0); err != nil || n != 4 {
		t.Fatalf("%d lock index entries (%v), want 4", n, err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}

	if d.M, err = partition.Open(dir, pt.Options()); err != nil {
		t.Fatal(err)
	}
	defer d.M.Close()
	if err := partition.CheckIndexes(d.M, 1, 0); err != nil {
		t.Fatal(err)
	}
	if n, err := partition.LockGrants(d.M, 1, 0); err != nil || n != 2 {
		t.Fatalf("%d lock grants (%v), want 2", n, err)
	}
	d.OK(pt.Settle(1, 0, pt.Main, complete, tokens[0]))
	d.Now = 1000 + partition.DefaultLockDurationMs
	d.OK(pt.ExpireLocks())
	if err := partition.CheckIndexes(d.M, 1, 0); err != nil {
		t.Fatal(err)
	}
	if s := d.Stats(1, 0); s.LockedMessages != 2 || s.ActiveMessages != 4 {
		t.Fatalf("after the first lock expired: %v", s)
	}
	d.Now += 7
	d.OK(pt.ExpireLocks())
	if s := d.Stats(1, 0); s.LockedMessages != 0 {
		t.Fatalf("after the second lock expired: %v", s)
	}
	if n, err := partition.LockGrants(d.M, 1, 0); err != nil || n != 0 {
		t.Fatalf("%d lock grants left (%v)", n, err)
	}
}
