package partition_test

import (
	"testing"

	pt "github.com/quorumbus/quorumbus/partition/partitiontest"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// TestAccessedAt: an entity partition's access time is the now_ms of the
// last batch that sent to it or received from it; other commands, and a
// send the entity refuses, leave it; it survives a reopen.
func TestAccessedAt(t *testing.T) {
	dir := t.TempDir()
	d := &pt.Driver{T: t, M: pt.OpenDir(t, dir), Now: 1000}
	d.OK(pt.Upsert(pt.Queue(1, 0, "q")))
	at := func(want int64, after string) {
		t.Helper()
		if got := d.Stats(1, 0).AccessedAtMs; got != want {
			t.Fatalf("after %s: accessed at %d, want %d", after, got, want)
		}
	}
	at(0, "create")
	d.Now = 2000
	d.OK(pt.Enqueue(1, 0, msgs(2)...))
	at(2000, "a send")
	d.Now = 3000
	r := d.OK(pt.Lock(1, 0, main, 1, 1))
	at(3000, "a receive")
	d.Now = 4000
	d.OK(pt.Settle(1, 0, main, partitionpb.Disposition_DISPOSITION_COMPLETE, pt.Tokens(r)...))
	d.OK(pt.Upsert(pt.Queue(1, 0, "q")))
	at(3000, "a settle and an update")
	d.Now = 5000
	d.OK(pt.ReceiveAndDelete(1, 0, main, 1))
	at(5000, "a receive-and-delete")

	disabled := pt.Queue(1, 0, "q")
	disabled.Status = uint32(partitionpb.EntityStatus_ENTITY_STATUS_DISABLED)
	d.OK(pt.Upsert(disabled))
	d.Now = 6000
	if res := d.Do(pt.Enqueue(1, 0, msgs(1)...)); res.Code == partitionpb.ResultCode_RESULT_OK {
		t.Fatal("a disabled queue took a send")
	}
	at(5000, "a refused send")

	if err := d.M.Close(); err != nil {
		t.Fatal(err)
	}
	d.M = pt.OpenDir(t, dir)
	at(5000, "reopening")
}

// TestGroupStats: the counters of the entity partitions named, in the
// order named, without those the group does not hold; all of them, in key
// order, when none is named.
func TestGroupStats(t *testing.T) {
	d := pt.NewDriver(t, 1000)
	d.OK(pt.Upsert(pt.Queue(1, 0, "a")))
	d.OK(pt.Upsert(pt.Queue(2, 3, "b")))
	d.OK(pt.Enqueue(2, 3, msgs(3)...))
	d.OK(pt.Enqueue(1, 0, msgs(1)...))

	got, err := d.M.GroupStats([]*partitionpb.EntityPartitionRef{{EntityId: 2, Partition: 3}, {EntityId: 9}, {EntityId: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].EntityId != 2 || got[0].Partition != 3 || got[1].EntityId != 1 {
		t.Fatalf("named: %v", got)
	}
	if got[0].Stats.ActiveMessages != 3 || got[1].Stats.ActiveMessages != 1 || got[0].Stats.AccessedAtMs != 1000 {
		t.Fatalf("named: counts %v", got)
	}
	all, err := d.M.GroupStats(nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 2 || all[0].EntityId != 1 || all[1].EntityId != 2 {
		t.Fatalf("all: %v", all)
	}
	for _, s := range all {
		if one := d.Stats(s.EntityId, s.Partition); one.ActiveMessages != s.Stats.ActiveMessages || one.SizeBytes != s.Stats.SizeBytes {
			t.Fatalf("%d/%d: GroupStats %v, Stats %v", s.EntityId, s.Partition, s.Stats, one)
		}
	}
}
