package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quorumbus/quorumbus/partition"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// flakyMachine is a real machine whose Apply can be made to fail, as a
// broken disk would.
type flakyMachine struct {
	StateMachine
	broken *atomic.Bool
}

var errDisk = errors.New("test: disk on fire")

func (m flakyMachine) Apply(entries []partition.Entry) ([][]*partitionpb.Result, error) {
	if m.broken.Load() {
		return nil, errDisk
	}
	return m.StateMachine.Apply(entries)
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestFailStop breaks the state machine of one of two groups on a node:
// that group stops and refuses requests, the other goes on, and reopening
// the group replays the entry that failed.
func TestFailStop(t *testing.T) {
	n, err := New(Config{
		ID: "solo", DataDir: t.TempDir(), Addr: "127.0.0.1:0",
		ElectionTimeout: 100 * time.Millisecond, CacheBytes: 4 << 20,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	var broken atomic.Bool
	open := n.openMachine
	n.openMachine = func(dir string, logs raft.LogStore) (StateMachine, error) {
		m, err := open(dir, logs)
		if err != nil {
			return nil, err
		}
		if filepath.Base(filepath.Dir(dir)) != "1" { // only group 1's disk breaks
			return m, nil
		}
		return flakyMachine{StateMachine: m, broken: &broken}, nil
	}
	if err := n.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	self := []Peer{{ID: "solo", Addr: n.Addr()}}
	s := &service{n: n}
	ctx := context.Background()
	for _, id := range []uint64{1, 2} {
		if err := n.EnsureGroup(id, self); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, fmt.Sprintf("group %d to serve", id), func() bool {
			st, err := n.Group(id)
			return err == nil && st.Serving
		})
		if _, err := s.UpsertEntity(ctx, &partitionpb.UpsertEntityRequest{GroupId: id, Config: &partitionpb.EntityConfig{EntityId: 5, Name: "q"}}); err != nil {
			t.Fatal(err)
		}
	}
	sendOne := func(id uint64) error {
		_, err := s.Send(ctx, &partitionpb.SendRequest{GroupId: id, EntityId: 5, Messages: []*partitionpb.NewMessage{{Bare: []byte("x")}}})
		return err
	}
	if err := sendOne(1); err != nil {
		t.Fatal(err)
	}

	broken.Store(true)
	if err := sendOne(1); status.Code(err) != codes.Unavailable {
		t.Fatalf("send while the disk fails: %v, want Unavailable", err)
	}
	st, err := n.Group(1)
	if err != nil || !errors.Is(st.Err, ErrGroupFailed) {
		t.Fatalf("group 1 after the failure: %+v, %v", st, err)
	}
	waitUntil(t, "group 1's raft to shut down", func() bool {
		st, _ := n.Group(1)
		return st.State == raft.Shutdown
	})
	if err := sendOne(1); status.Code(err) != codes.Unavailable {
		t.Errorf("send to the failed group: %v, want Unavailable", err)
	}
	// Group 2 shares the process and goes on.
	if err := sendOne(2); err != nil {
		t.Errorf("group 2 after group 1 failed: %v", err)
	}
	broken.Store(false) // the disk is repaired

	// Reopening replays the log tail: the entry that failed to apply is
	// committed and is applied now.
	if err := n.EnsureGroup(1, self); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "group 1 to serve again", func() bool {
		st, err := n.Group(1)
		return err == nil && st.Serving
	})
	stats, err := s.Stats(ctx, &partitionpb.StatsRequest{GroupId: 1, EntityId: 5})
	if err != nil {
		t.Fatal(err)
	}
	if stats.ActiveMessages != 2 {
		t.Errorf("group 1 holds %d messages after replay, want 2", stats.ActiveMessages)
	}
}

// TestStatusTable checks the error mapping at the gRPC boundary.
func TestStatusTable(t *testing.T) {
	hint := &partitionpb.LeaderHint{GroupId: 3, LeaderId: "n2", LeaderAddr: "10.0.0.2:7000"}
	tests := []struct {
		err        error
		code       codes.Code
		wantHint   bool
		wantResult partitionpb.ResultCode
	}{
		{fmt.Errorf("%w: 9", ErrGroupNotFound), codes.NotFound, false, 0},
		{&notLeaderError{hint: hint}, codes.FailedPrecondition, true, 0},
		{raft.ErrLeadershipLost, codes.Unavailable, false, 0},
		{fmt.Errorf("%w: x", ErrGroupFailed), codes.Unavailable, false, 0},
		{fmt.Errorf("%w: x", ErrLeaderNotReady), codes.Unavailable, false, 0},
		{fmt.Errorf("%w: big", ErrTooLarge), codes.InvalidArgument, false, 0},
		{fmt.Errorf("%w: 0 bytes free", ErrNoSpace), codes.ResourceExhausted, false, 0},
		{fmt.Errorf("%w: 5/0", partition.ErrEntityNotFound), codes.NotFound, false, partitionpb.ResultCode_RESULT_ENTITY_NOT_FOUND},
		{partition.ErrQuotaExceeded, codes.ResourceExhausted, false, partitionpb.ResultCode_RESULT_QUOTA_EXCEEDED},
		{context.DeadlineExceeded, codes.DeadlineExceeded, false, 0},
		{errors.New("something else"), codes.Internal, false, 0},
	}
	for _, tt := range tests {
		st := status.Convert(toStatus(tt.err))
		if st.Code() != tt.code {
			t.Errorf("%v: code %v, want %v", tt.err, st.Code(), tt.code)
		}
		var gotHint *partitionpb.LeaderHint
		var gotResult *partitionpb.Result
		for _, d := range st.Details() {
			switch d := d.(type) {
			case *partitionpb.LeaderHint:
				gotHint = d
			case *partitionpb.Result:
				gotResult = d
			}
		}
		if tt.wantHint && (gotHint == nil || gotHint.LeaderAddr != hint.LeaderAddr) {
			t.Errorf("%v: hint %v", tt.err, gotHint)
		}
		if !tt.wantHint && gotHint != nil {
			t.Errorf("%v: unexpected hint %v", tt.err, gotHint)
		}
		if tt.wantResult != 0 && (gotResult == nil || gotResult.Code != tt.wantResult) {
			t.Errorf("%v: result detail %v, want code %v", tt.err, gotResult, tt.wantResult)
		}
		if tt.wantResult == 0 && gotResult != nil {
			t.Errorf("%v: unexpected result detail %v", tt.err, gotResult)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	good := Config{ID: "a", DataDir: "/tmp/x", Addr: ":0"}
	if err := good.Validate(); err != nil {
		t.Errorf("minimal config: %v", err)
	}
	for name, c := range map[string]Config{
		"no id":        {DataDir: "/tmp/x", Addr: ":0"},
		"no dir":       {ID: "a", Addr: ":0"},
		"no address":   {ID: "a", DataDir: "/tmp/x"},
		"bad store":    {ID: "a", DataDir: "/tmp/x", Addr: ":0", LogStore: "rocks"},
		"tiny timeout": {ID: "a", DataDir: "/tmp/x", Addr: ":0", ElectionTimeout: time.Millisecond},
		"tiny segment": {ID: "a", DataDir: "/tmp/x", Addr: ":0", WALSegmentBytes: 4096},
	} {
		if err := c.Validate(); err == nil {
			t.Errorf("%s: Validate accepted %+v", name, c)
		}
	}
}
