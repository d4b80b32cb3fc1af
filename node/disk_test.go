package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

var quietLog = slog.New(slog.NewTextHandler(io.Discard, nil))

// soloNode starts a node that is the only replica of group 1, which
// holds entity 5.
func soloNode(t *testing.T, cfg Config) (*Node, *service) {
	t.Helper()
	cfg.ID, cfg.Addr = "solo", "127.0.0.1:0"
	if cfg.DataDir == "" {
		cfg.DataDir = t.TempDir()
	}
	cfg.ElectionTimeout, cfg.CacheBytes, cfg.Logger = 100*time.Millisecond, 4<<20, quietLog
	n, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	if err := n.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	return n, &service{n: n}
}

func waitServing(t *testing.T, n *Node, id uint64) {
	t.Helper()
	waitUntil(t, fmt.Sprintf("group %d to serve", id), func() bool {
		st, err := n.Group(id)
		return err == nil && st.Serving
	})
}

// groupErr is why group id does not serve: it failed to open, or it
// stopped; nil if it is open and well.
func groupErr(n *Node, id uint64) error {
	if err := n.OpenFailures()[id]; err != nil {
		return err
	}
	st, err := n.Group(id)
	if err != nil {
		return err
	}
	return st.Err
}

// closeWithin fails the test if n.Close does not return by the polling
// deadline, rather than hanging it.
func closeWithin(t *testing.T, n *Node) {
	t.Helper()
	var done atomic.Bool
	go func() {
		n.Close()
		done.Store(true)
	}()
	waitUntil(t, "Close to return", done.Load)
}

// TestDataDirInUse: a second node on a data directory in use is refused,
// with a message naming the directory; once the first closes, it starts.
func TestDataDirInUse(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{ID: "a", DataDir: dir, Addr: "127.0.0.1:0", Logger: quietLog}
	first, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	second, err := New(cfg)
	if err == nil {
		second.Close()
		t.Fatal("a second node opened a data directory in use")
	}
	if want := fmt.Sprintf("data directory %s is in use by another process", dir); !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not say %q", err, want)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	second, err = New(cfg)
	if err != nil {
		t.Fatalf("after the first node closed: %v", err)
	}
	second.Close()
}

// TestWALOpenFailureReleasesLocks: raft-wal's Open failing on a full disk
// must not leave its metadata file locked, or the next open blocks on the
// lock forever.
func TestWALOpenFailureReleasesLocks(t *testing.T) {
	dir := t.TempDir()
	faults := &simHost{} // its disk can look full
	faults.full.Store(true)
	open := func() (*aheadLog, error) {
		return openAheadLog(dir, newHCLogger(quietLog, "wal"), func(err error) {}, walOptions{segmentBytes: 64 << 10, host: faults})
	}
	if l, err := open(); err == nil {
		l.Close()
		t.Fatal("raft-wal opened without space for its first segment")
	}
	faults.full.Store(false)
	var (
		l    atomic.Pointer[aheadLog]
		oerr atomic.Pointer[error]
	)
	go func() {
		got, err := open()
		oerr.Store(&err)
		l.Store(got)
	}()
	waitUntil(t, "the second open to return", func() bool { return oerr.Load() != nil })
	if err := *oerr.Load(); err != nil {
		t.Fatalf("open after space returned: %v", err)
	}
	defer l.Load().Close()
	if err := l.Load().StoreLog(&raft.Log{Index: 1, Term: 1, Data: []byte("x")}); err != nil {
		t.Fatal(err)
	}
}

// TestGroupOpenFailureVisible: a group that fails to open is reported,
// refuses requests as unavailable rather than unknown, is opened by the
// node once it can be, and does not hold up Close.
func TestGroupOpenFailureVisible(t *testing.T) {
	var broken atomic.Bool
	broken.Store(true)
	n, s := soloNode(t, Config{})
	open := n.openMachine
	n.openMachine = func(dir string, logs raft.LogStore) (StateMachine, error) {
		if broken.Load() {
			return nil, errDisk
		}
		return open(dir, logs)
	}
	self := []Peer{{ID: "solo", Addr: n.Addr()}}
	if err := n.EnsureGroup(1, self); !errors.Is(err, errDisk) {
		t.Fatalf("EnsureGroup on a broken disk: %v", err)
	}
	if err := n.OpenFailures()[1]; !errors.Is(err, errDisk) {
		t.Errorf("OpenFailures()[1] = %v", err)
	}
	_, err := s.Send(context.Background(), &partitionpb.SendRequest{GroupId: 1, EntityId: 5})
	if status.Code(err) != codes.Unavailable {
		t.Errorf("send to the group that failed to open: %v, want Unavailable", err)
	}
	// The placement agent asks again at once: refused without an
	// attempt until the backoff passes, with the same reason.
	if err := n.EnsureGroup(1, self); !errors.Is(err, errDisk) {
		t.Errorf("EnsureGroup again: %v", err)
	}

	broken.Store(false) // the disk is repaired: the node opens the group by itself
	waitServing(t, n, 1)
	if errs := n.OpenFailures(); len(errs) != 0 {
		t.Errorf("OpenFailures after the group opened: %v", errs)
	}
	broken.Store(true)
	closeWithin(t, n)
}

// TestWALSegmentSize: a group's log preallocates segments of the
// configured size, which is what an idle group takes on disk.
func TestWALSegmentSize(t *testing.T) {
	dir := t.TempDir()
	n, _ := soloNode(t, Config{DataDir: dir, WALSegmentBytes: 1 << 20})
	if err := n.EnsureGroup(1, []Peer{{ID: "solo", Addr: n.Addr()}}); err != nil {
		t.Fatal(err)
	}
	waitServing(t, n, 1)
	segs, err := filepath.Glob(filepath.Join(dir, "groups", "1", "raft", "wal", "*.wal"))
	if err != nil || len(segs) != 1 {
		t.Fatalf("segments %v, %v; want one", segs, err)
	}
	fi, err := os.Stat(segs[0])
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() != 1<<20 {
		t.Errorf("segment of %d bytes, want %d", fi.Size(), 1<<20)
	}
}

// TestDiskFull fills the disk under a group: sends are refused at once
// with ErrNoSpace (ResourceExhausted), settles go on until the log cannot
// create its next segment, the group then stops and cannot reopen while
// the disk is full, and once space returns it is reopened by the node and
// takes sends again, with every acknowledged message still there.
func TestDiskFull(t *testing.T) {
	faults := &simHost{} // its disk can look full
	n, s := soloNode(t, Config{WALSegmentBytes: 64 << 10, host: faults})
	ctx := context.Background()
	if err := n.EnsureGroup(1, []Peer{{ID: "solo", Addr: n.Addr()}}); err != nil {
		t.Fatal(err)
	}
	waitServing(t, n, 1)
	if _, err := s.UpsertEntity(ctx, &partitionpb.UpsertEntityRequest{GroupId: 1, Config: &partitionpb.EntityConfig{
		EntityId: 5, Name: "q", LockDurationMs: 500, MaxDeliveryCount: 1000}}); err != nil {
		t.Fatal(err)
	}
	sendOne := func(body string) error {
		_, err := s.Send(ctx, &partitionpb.SendRequest{GroupId: 1, EntityId: 5, Messages: []*partitionpb.NewMessage{{Bare: []byte(body)}}})
		return err
	}
	acked := map[string]bool{}
	for i := range 20 {
		body := fmt.Sprintf("m%d", i)
		if err := sendOne(body); err != nil {
			t.Fatal(err)
		}
		acked[body] = true
	}
	lockRelease := func() error {
		res, err := s.Receive(ctx, &partitionpb.ReceiveRequest{GroupId: 1, EntityId: 5, MaxCount: 1})
		if err != nil {
			return err
		}
		if len(res.Result.Messages) == 0 {
			return nil // locked by an attempt whose release failed; it expires
		}
		_, err = s.Settle(ctx, &partitionpb.SettleRequest{GroupId: 1, Settle: &partitionpb.Settle{
			EntityId: 5, LockTokens: [][]byte{res.Result.Messages[0].LockToken}, Disposition: partitionpb.Disposition_DISPOSITION_RELEASE}})
		return err
	}

	faults.full.Store(true)
	err := sendOne("refused")
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(status.Convert(err).Message(), "no space left") {
		t.Fatalf("send on a full disk: %v, want ResourceExhausted saying no space is left", err)
	}
	if err := lockRelease(); err != nil {
		t.Fatalf("lock and release on a full disk, within the reserve: %v", err)
	}
	// Keep settling until the log fills its segment and cannot create
	// the next one.
	for i := 0; i < 20000 && groupErr(n, 1) == nil; i++ {
		if err := lockRelease(); err != nil {
			// The request whose write failed learns that the disk is
			// full; one that comes after the group stopped, that it
			// is unavailable. Neither is an internal error.
			if c := status.Code(err); c != codes.ResourceExhausted && c != codes.Unavailable {
				t.Errorf("settle when the log could not rotate: %v, want ResourceExhausted or Unavailable", err)
			}
			break
		}
	}
	waitUntil(t, "the group to stop on the full disk and fail to reopen", func() bool {
		return errors.Is(n.OpenFailures()[1], ErrNoSpace)
	})
	if err := sendOne("refused"); status.Code(err) != codes.Unavailable {
		t.Errorf("send to the stopped group: %v, want Unavailable", err)
	}

	faults.full.Store(false)
	waitServing(t, n, 1)
	if err := sendOne("after"); err != nil {
		t.Fatalf("send after space returned: %v", err)
	}
	acked["after"] = true
	got := map[string]bool{}
	waitUntil(t, "every acknowledged message to be received", func() bool {
		res, err := s.Receive(ctx, &partitionpb.ReceiveRequest{GroupId: 1, EntityId: 5, MaxCount: 100, ReceiveAndDelete: true})
		if err != nil {
			return false
		}
		for _, m := range res.Result.Messages {
			got[string(m.Bare)] = true
		}
		return len(got) >= len(acked)
	})
	for body := range acked {
		if !got[body] {
			t.Errorf("acknowledged message %q lost", body)
		}
	}
	if len(got) != len(acked) {
		t.Errorf("received %d messages, sent %d", len(got), len(acked))
	}
}

// TestDiskFullAtStart: a node whose disk is full starts, without a panic,
// and opens its groups once space returns.
func TestDiskFullAtStart(t *testing.T) {
	dir := t.TempDir()
	faults := &simHost{} // its disk can look full
	n, _ := soloNode(t, Config{DataDir: dir, WALSegmentBytes: 64 << 10, host: faults})
	if err := n.EnsureGroup(1, []Peer{{ID: "solo", Addr: n.Addr()}}); err != nil {
		t.Fatal(err)
	}
	waitServing(t, n, 1)
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	faults.full.Store(true)
	n, _ = soloNode(t, Config{DataDir: dir, WALSegmentBytes: 64 << 10, host: faults})
	if err := n.OpenFailures()[1]; !errors.Is(err, ErrNoSpace) {
		t.Fatalf("group 1 on a full disk at start: %v", err)
	}
	faults.full.Store(false)
	waitServing(t, n, 1)
}
