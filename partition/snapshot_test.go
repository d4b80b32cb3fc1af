package partition_test

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/quorumbus/quorumbus/partition"
	pt "github.com/quorumbus/quorumbus/partition/partitiontest"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

func TestSnapshotRestore(t *testing.T) {
	a, _ := randomLog(t, 7, 300)
	snap := snapshotBytes(t, a.M)

	b := pt.Open(t)
	// b holds other state first, which the restore replaces entirely.
	db := &pt.Driver{T: t, M: b, Now: 5}
	db.OK(pt.Upsert(pt.Queue(99, 0, "other")))
	db.OK(pt.Enqueue(99, 0, msgs(3)...))
	if err := b.Restore(bytes.NewReader(snap)); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	if b.HasEntity(99, 0) {
		t.Fatal("an entity the snapshot does not hold survived the restore")
	}
	if b.AppliedIndex() != a.M.AppliedIndex() {
		t.Fatalf("AppliedIndex %d after restore, want %d", b.AppliedIndex(), a.M.AppliedIndex())
	}
	if !bytes.Equal(snap, snapshotBytes(t, b)) {
		t.Fatal("the restored machine's snapshot differs")
	}
	for _, e := range workloadEntities {
		sa, erra := a.M.Stats(e.id, e.part)
		sb, errb := b.Stats(e.id, e.part)
		if !proto.Equal(sa, sb) || (erra == nil) != (errb == nil) {
			t.Errorf("%d/%d: stats %v (%v), restored %v (%v)", e.id, e.part, sa, erra, sb, errb)
		}
	}
	na, oka := a.M.NextLockExpiry()
	nb, okb := b.NextLockExpiry()
	if na != nb || oka != okb {
		t.Errorf("NextLockExpiry %d %v, restored %d %v", na, oka, nb, okb)
	}

	// Both go on identically.
	a.Now += 100_000
	next := a.Log.Entry(t, a.Now, pt.ExpireLocks(), pt.Enqueue(1, 0, msgs(2)...), pt.Lock(1, 0, main, 5, 3))
	ra, err := a.M.Apply([]partition.Entry{next})
	if err != nil {
		t.Fatal(err)
	}
	rb, err := b.Apply([]partition.Entry{next})
	if err != nil {
		t.Fatal(err)
	}
	for i := range ra[0] {
		if !proto.Equal(ra[0][i], rb[0][i]) {
			t.Fatalf("after restore, command %d: %v, restored %v", i, ra[0][i], rb[0][i])
		}
	}
	if !bytes.Equal(snapshotBytes(t, a.M), snapshotBytes(t, b)) {
		t.Fatal("snapshots differ after one more entry")
	}
}

func TestRestoreRejectsBadSnapshots(t *testing.T) {
	a, _ := randomLog(t, 8, 100)
	snap := snapshotBytes(t, a.M)
	if len(snap) < 1000 {
		t.Fatalf("snapshot of %d bytes is too small for this test", len(snap))
	}
	flip := func(i int) []byte {
		c := bytes.Clone(snap)
		c[i] ^= 0x20
		return c
	}
	tests := []struct {
		name string
		data []byte
		want error // besides ErrBadSnapshot
	}{
		{"empty", nil, nil},
		{"magic", flip(2), nil},
		{"first record length", flip(8), nil},
		{"a value", flip(len(snap) / 2), partition.ErrCorrupt},
		{"near the end", flip(len(snap) - 40), nil},
		{"trailer", flip(len(snap) - 10), partition.ErrCorrupt},
		{"trailer checksum", flip(len(snap) - 1), partition.ErrCorrupt},
		{"truncated", snap[:len(snap)-1], nil},
		{"truncated to a record", snap[:len(snap)/3], nil},
		{"trailing bytes", append(bytes.Clone(snap), 0), nil},
	}
	b := pt.Open(t)
	d := &pt.Driver{T: t, M: b, Now: 5}
	d.OK(pt.Upsert(pt.Queue(99, 0, "other")))
	d.OK(pt.Enqueue(99, 0, msgs(3)...))
	before := snapshotBytes(t, b)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := b.Restore(bytes.NewReader(tt.data))
			if !errors.Is(err, partition.ErrBadSnapshot) {
				t.Fatalf("Restore: %v, want ErrBadSnapshot", err)
			}
			if tt.want != nil && !errors.Is(err, tt.want) {
				t.Fatalf("Restore: %v, want %v", err, tt.want)
			}
			if !bytes.Equal(before, snapshotBytes(t, b)) {
				t.Fatal("a failed Restore changed the state")
			}
		})
	}
	// Every single-byte flip fails, somewhere.
	for i := 0; i < len(snap); i += 1 + len(snap)/41 {
		if err := b.Restore(bytes.NewReader(flip(i))); err == nil {
			t.Fatalf("a flip at byte %d of %d went unnoticed", i, len(snap))
		}
	}
}

// TestSnapshotIsPointInTime: WriteTo streams the state at Snapshot, even
// while Apply goes on.
func TestSnapshotIsPointInTime(t *testing.T) {
	d := workload(t)
	want := snapshotBytes(t, d.M)
	s, err := d.M.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var buf bytes.Buffer
	var werr error
	wg.Go(func() { _, werr = s.WriteTo(&buf) })
	for i := range 50 {
		d.OK(pt.Enqueue(1, 0, pt.Msg(fmt.Sprint(i))))
	}
	wg.Wait()
	if werr != nil {
		t.Fatal(werr)
	}
	if !bytes.Equal(want, buf.Bytes()) {
		t.Fatal("the snapshot saw later applies")
	}
	var again bytes.Buffer
	if _, err := s.WriteTo(&again); err != nil || !bytes.Equal(want, again.Bytes()) {
		t.Fatalf("a second WriteTo differs (%v)", err)
	}
	s.Release()
	s.Release()
	if _, err := s.WriteTo(&again); !errors.Is(err, partition.ErrClosed) {
		t.Fatalf("WriteTo after Release: %v", err)
	}
	// Close releases snapshots still open.
	if _, err := d.M.Snapshot(); err != nil {
		t.Fatal(err)
	}
	if err := d.M.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestRestoreFinishedByOpen: a crash after the restored store is complete
// but before it replaced the old one is finished by the next Open.
func TestRestoreFinishedByOpen(t *testing.T) {
	a := workload(t)
	snap := snapshotBytes(t, a.M)
	dir := t.TempDir()
	b := pt.OpenDir(t, dir)
	if err := partition.StageRestore(b, bytes.NewReader(snap)); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b = pt.OpenDir(t, dir)
	if b.AppliedIndex() != a.M.AppliedIndex() || !bytes.Equal(snap, snapshotBytes(t, b)) {
		t.Fatal("Open did not finish the restore")
	}
}

// TestRestoreLarge restores a store of many batches' worth.
func TestRestoreLarge(t *testing.T) {
	d := pt.NewDriver(t, 1000)
	d.OK(pt.Upsert(pt.Queue(1, 0, "big")))
	body := bytes.Repeat([]byte("x"), 2048)
	for range 64 {
		var ms []*partitionpb.NewMessage
		for range 64 {
			ms = append(ms, &partitionpb.NewMessage{Bare: body})
		}
		d.OK(pt.Enqueue(1, 0, ms...))
	}
	snap := snapshotBytes(t, d.M)
	b := pt.Open(t)
	if err := b.Restore(bytes.NewReader(snap)); err != nil {
		t.Fatal(err)
	}
	if s, err := b.Stats(1, 0); err != nil || s.ActiveMessages != 64*64 {
		t.Fatalf("restored stats %v, %v", s, err)
	}
	if !bytes.Equal(snap, snapshotBytes(t, b)) {
		t.Fatal("restored snapshot differs")
	}
}
