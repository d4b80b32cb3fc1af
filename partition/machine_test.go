package partition_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/quorumbus/quorumbus/partition"
	pt "github.com/quorumbus/quorumbus/partition/partitiontest"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

func TestSequenceWraps(t *testing.T) {
	d := pt.NewDriver(t, 1000)
	d.OK(pt.Upsert(pt.Queue(1, 7, "q")))
	partition.SetNextSequence(d.M, 1, 7, 1<<48-1)
	got := d.OK(pt.Enqueue(1, 7, msgs(3)...)).SequenceNumbers
	want := []uint64{7<<48 | (1<<48 - 1), 7 << 48, 7<<48 | 1}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("sequence numbers %#x, want %#x", got, want)
		}
	}
}

// snapshotBytes returns the machine's snapshot stream.
func snapshotBytes(t testing.TB, m *partition.Machine) []byte {
	t.Helper()
	s, err := m.Snapshot()
	if err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	defer s.Release()
	var buf bytes.Buffer
	n, err := s.WriteTo(&buf)
	if err != nil {
		t.Fatalf("WriteTo: %v", err)
	}
	if n != int64(buf.Len()) {
		t.Fatalf("WriteTo returned %d, wrote %d", n, buf.Len())
	}
	return buf.Bytes()
}

// workload applies a little of everything and returns the driver.
func workload(t testing.TB) *pt.Driver {
	d := pt.NewDriver(t, 1000)
	d.OK(pt.Upsert(&partitionpb.EntityConfig{EntityId: 1, Name: "q", LockDurationMs: 10_000, MaxDeliveryCount: 2}))
	d.OK(pt.Enqueue(1, 0, msgs(5)...))
	r := d.OK(pt.Lock(1, 0, main, 3, 1))
	d.OK(pt.Settle(1, 0, main, abandon, pt.Tokens(r)[0]))
	d.OK(pt.Settle(1, 0, main, complete, pt.Tokens(r)[1]))
	d.Now += 20_000
	d.OK(pt.ExpireLocks())
	return d
}

func TestApplySkipsAppliedEntries(t *testing.T) {
	d := workload(t)
	before := snapshotBytes(t, d.M)
	applied := d.M.AppliedIndex()
	if applied != d.Log.Last {
		t.Fatalf("AppliedIndex %d, want %d", applied, d.Log.Last)
	}
	// Every entry again, then a new one in the same call.
	next := d.Log.Entry(t, d.Now, pt.Enqueue(1, 0, msgs(1)...))
	res, err := d.M.Apply(append(append([]partition.Entry(nil), d.Entries...), next))
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res[:len(d.Entries)] {
		if r != nil {
			t.Fatalf("entry %d was applied again: %v", i+1, r)
		}
	}
	if got := res[len(res)-1]; len(got) != 1 || got[0].SequenceNumbers[0] != 6 {
		t.Fatalf("the new entry: %v", got)
	}
	// Applying old entries alone changes nothing at all.
	after := snapshotBytes(t, d.M)
	if _, err := d.M.Apply(d.Entries); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(after, snapshotBytes(t, d.M)) {
		t.Fatal("re-applying old entries changed the store")
	}
	if bytes.Equal(before, after) {
		t.Fatal("the new entry changed nothing")
	}
}

func TestEmptyEntryAdvancesAppliedIndex(t *testing.T) {
	m := pt.Open(t)
	res, err := m.Apply([]partition.Entry{{Index: 3}, {Index: 9}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 2 || res[0] != nil || res[1] != nil || m.AppliedIndex() != 9 {
		t.Fatalf("results %v, applied %d; want none and 9", res, m.AppliedIndex())
	}
}

// TestFailStop: an entry this version cannot apply, or a record that fails
// its checksum, stops the machine with nothing of the call applied.
func TestFailStop(t *testing.T) {
	unknown, err := partition.EncodeBatch(&partitionpb.Batch{Commands: []*partitionpb.Command{{}}})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		entry   func(d *pt.Driver) partition.Entry
		corrupt bool
		want    error
	}{
		{"unknown command", func(d *pt.Driver) partition.Entry {
			d.Log.Last++
			return partition.Entry{Index: d.Log.Last, Data: unknown}
		}, false, partition.ErrUnknownCommand},
		{"unknown format", func(d *pt.Driver) partition.Entry {
			d.Log.Last++
			return partition.Entry{Index: d.Log.Last, Data: append([]byte{partition.LastFormat + 1}, unknown[1:]...)}
		}, false, partition.ErrUnknownFormat},
		{"malformed", func(d *pt.Driver) partition.Entry {
			d.Log.Last++
			return partition.Entry{Index: d.Log.Last, Data: []byte{1, 0xff, 0xff}}
		}, false, partition.ErrMalformed},
		{"corrupt message", func(d *pt.Driver) partition.Entry { return d.Log.Entry(t, d.Now, pt.Lock(1, 0, main, 10, 1)) }, true, partition.ErrCorrupt},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			d := &pt.Driver{T: t, M: pt.OpenDir(t, dir), Now: 1000}
			d.OK(pt.Upsert(pt.Queue(1, 0, "q")))
			d.OK(pt.Enqueue(1, 0, msgs(3)...))
			if tt.corrupt {
				if err := partition.Corrupt(d.M, 1, 0, main, 2); err != nil {
					t.Fatal(err)
				}
			}
			applied := d.M.AppliedIndex()
			// A good entry first: it must not be applied either.
			good := d.Log.Entry(t, d.Now, pt.Enqueue(1, 0, msgs(1)...))
			_, err := d.M.Apply([]partition.Entry{good, tt.entry(d)})
			if !errors.Is(err, tt.want) {
				t.Fatalf("Apply: %v, want %v", err, tt.want)
			}
			if d.M.AppliedIndex() != applied {
				t.Fatalf("AppliedIndex %d after a failed Apply, want %d", d.M.AppliedIndex(), applied)
			}
			if _, err := d.M.Apply([]partition.Entry{d.Log.Entry(t, d.Now, pt.Enqueue(1, 0))}); err == nil {
				t.Fatal("the machine applied after it stopped")
			}
			if _, err := d.M.Stats(1, 0); err == nil {
				t.Fatal("Stats served after the machine stopped")
			}
			if _, err := d.M.Snapshot(); err == nil {
				t.Fatal("Snapshot served after the machine stopped")
			}
			// Reopening finds the state before the failed call.
			if err := d.M.Close(); err != nil {
				t.Fatal(err)
			}
			m := pt.OpenDir(t, dir)
			if m.AppliedIndex() != applied {
				t.Fatalf("reopened at %d, want %d", m.AppliedIndex(), applied)
			}
			if s, err := m.Stats(1, 0); err != nil || s.ActiveMessages != 3 {
				t.Fatalf("reopened stats %v, %v; want 3 active", s, err)
			}
		})
	}
}

func TestReopen(t *testing.T) {
	dir := t.TempDir()
	d := &pt.Driver{T: t, M: pt.OpenDir(t, dir), Now: 1000}
	d.OK(pt.Upsert(pt.Queue(1, 0, "q")))
	d.OK(pt.Enqueue(1, 0, msgs(4)...))
	d.OK(pt.Lock(1, 0, main, 2, 1))
	before := snapshotBytes(t, d.M)
	stats := d.Stats(1, 0)
	next, _ := d.M.NextLockExpiry()
	if err := d.M.Close(); err != nil {
		t.Fatal(err)
	}
	if err := d.M.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := d.M.Apply(nil); !errors.Is(err, partition.ErrClosed) {
		t.Fatalf("Apply after Close: %v", err)
	}
	d.M = pt.OpenDir(t, dir)
	if d.M.AppliedIndex() != d.Log.Last {
		t.Fatalf("AppliedIndex %d after reopening, want %d", d.M.AppliedIndex(), d.Log.Last)
	}
	if !proto.Equal(stats, d.Stats(1, 0)) {
		t.Fatalf("stats %v after reopening, want %v", d.Stats(1, 0), stats)
	}
	if got, ok := d.M.NextLockExpiry(); !ok || got != next {
		t.Fatalf("NextLockExpiry %d after reopening, want %d", got, next)
	}
	if !bytes.Equal(before, snapshotBytes(t, d.M)) {
		t.Fatal("the store changed across Close and Open")
	}
	if r := d.OK(pt.Enqueue(1, 0, msgs(1)...)); r.SequenceNumbers[0] != 5 {
		t.Fatalf("sequence %d after reopening, want 5", r.SequenceNumbers[0])
	}
}

// TestCrashReplaysTail: the store has no WAL, so a crash loses what was
// applied after the last flush (Snapshot or Close). A copy of the directory
// taken while the machine runs is what a crash leaves: it opens at the
// snapshot's index, and replaying the log from there yields the same state.
func TestCrashReplaysTail(t *testing.T) {
	dir := t.TempDir()
	d := &pt.Driver{T: t, M: pt.OpenDir(t, dir), Now: 1000}
	d.OK(pt.Upsert(pt.Queue(1, 0, "q")))
	d.OK(pt.Enqueue(1, 0, msgs(4)...))
	s, err := d.M.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	flushed := s.AppliedIndex()
	s.Release()
	r := d.OK(pt.Lock(1, 0, main, 2, 1))
	d.OK(pt.Settle(1, 0, main, complete, pt.Tokens(r)[0]))
	d.OK(pt.Enqueue(1, 0, msgs(2)...))

	crashed := filepath.Join(t.TempDir(), "crashed")
	copyDir(t, dir, crashed)
	m := pt.OpenDir(t, crashed)
	if m.AppliedIndex() != flushed {
		t.Fatalf("the crash image is at %d, want the flushed %d", m.AppliedIndex(), flushed)
	}
	if _, err := m.Apply(d.Entries); err != nil { // Raft replays from its last snapshot
		t.Fatal(err)
	}
	if !bytes.Equal(snapshotBytes(t, d.M), snapshotBytes(t, m)) {
		t.Fatal("replaying the tail did not reproduce the state")
	}
}

func copyDir(t *testing.T, from, to string) {
	t.Helper()
	err := filepath.WalkDir(from, func(path string, e os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, path)
		if e.IsDir() {
			return os.MkdirAll(filepath.Join(to, rel), 0o750)
		}
		src, err := os.Open(path)
		if err != nil {
			return err
		}
		defer src.Close()
		dst, err := os.Create(filepath.Join(to, rel))
		if err != nil {
			return err
		}
		_, err = io.Copy(dst, src)
		return errors.Join(err, dst.Close())
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestCursorLookups: a message cursor finds exactly the messages that
// exist, whatever the order of the lookups (ascending with gaps, repeated,
// descending, past the end), with their own bodies.
func TestCursorLookups(t *testing.T) {
	d := pt.NewDriver(t, 1000)
	d.OK(pt.Upsert(pt.Queue(1, 0, "q")))
	for seq := 1; seq <= 20; seq++ {
		d.OK(pt.Enqueue(1, 0, pt.Msg(fmt.Sprint("m", seq))))
	}
	// Lock them all and complete 5, 6, 12 and 20: gaps inside and at the
	// end.
	r := d.OK(pt.Lock(1, 0, pt.Main, 20, 1))
	var gone [][]byte
	for _, m := range r.Messages {
		if s := m.SequenceNumber; s == 5 || s == 6 || s == 12 || s == 20 {
			gone = append(gone, m.LockToken)
		}
	}
	d.OK(pt.Settle(1, 0, pt.Main, partitionpb.Disposition_DISPOSITION_COMPLETE, gone...))
	exists := func(s uint64) bool { return s >= 1 && s <= 19 && s != 5 && s != 6 && s != 12 }
	for _, order := range [][]uint64{
		{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21},
		{4, 5, 7, 12, 13, 19, 20, 25},
		{3, 3, 4, 4, 6, 6, 7},
		{19, 13, 12, 11, 6, 5, 4, 1, 0},
		{0, 20, 1, 21, 2, 6, 7, 5, 8},
		{11, 13, 12, 14},
	} {
		got, err := partition.CursorLookups(d.M, 1, 0, pt.Main, order)
		if err != nil {
			t.Fatal(err)
		}
		for i, s := range order {
			if got[i] != exists(s) {
				t.Fatalf("order %v: lookup %d found %v", order, s, got[i])
			}
		}
	}
}

// Every leader-clock command the machine lists applies, and each has a
// name of its own: the leader proposes them by the list alone.
func TestTimersApply(t *testing.T) {
	d := &pt.Driver{T: t, M: pt.Open(t), Now: 1000}
	seen := map[string]bool{}
	for _, tm := range d.M.Timers() {
		if seen[tm.Name] {
			t.Fatalf("two timers named %s", tm.Name)
		}
		seen[tm.Name] = true
		if _, ok := tm.Next(); ok {
			t.Errorf("%s is due on an empty machine", tm.Name)
		}
		d.OK(tm.Command)
	}
	if len(seen) != 4 {
		t.Fatalf("%d timers, want 4 (locks, scheduled, expiry, session locks)", len(seen))
	}
}
