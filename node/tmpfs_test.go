package node

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// mountTmpfs mounts a tmpfs of sizeMB on a new directory and returns it
// with a function that resizes it. It needs root (CI runs as root); where
// the mount fails the test is skipped, loudly.
func mountTmpfs(t *testing.T, sizeMB int) (dir string, resize func(sizeMB int)) {
	t.Helper()
	dir = t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%dm", sizeMB), "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("SKIP: this test needs to mount a tmpfs (root); mount failed: %v: %s", err, strings.TrimSpace(string(out)))
	}
	// Registered before the node's Close, so it runs after it.
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir, func(sizeMB int) {
		t.Helper()
		if out, err := exec.Command("mount", "-o", fmt.Sprintf("remount,size=%dm", sizeMB), dir).CombinedOutput(); err != nil {
			t.Fatalf("resize the tmpfs: %v: %s", err, out)
		}
	}
}

// TestDiskFullTmpfs fills a real file system under a group, with the
// node's reserve and without it (the disk then fills up under the log:
// issue 18's reproduction). Either way sends are refused with an error
// rather than left to time out, nothing acknowledged is lost, and once
// the file system grows the group takes sends again without a restart.
func TestDiskFullTmpfs(t *testing.T) {
	if raceOn {
		// 48 MiB of 64 KiB sends: 2.4 s without the detector, 30-68 s
		// with it (it checks every byte a copy moves).
		t.Skip("moves hundreds of MiB: run without -race (make test does)")
	}
	for _, tc := range []struct {
		name    string
		reserve int64
	}{
		{"reserve", 8 << 20},
		{"no reserve", -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, resize := mountTmpfs(t, 48)
			n, s := soloNode(t, Config{DataDir: dir, WALSegmentBytes: 1 << 20, DiskReserveBytes: tc.reserve})
			ctx := context.Background()
			if err := n.EnsureGroup(1, []Peer{{ID: "solo", Addr: n.Addr()}}); err != nil {
				t.Fatal(err)
			}
			waitServing(t, n, 1)
			if _, err := s.UpsertEntity(ctx, &partitionpb.UpsertEntityRequest{GroupId: 1, Config: &partitionpb.EntityConfig{
				EntityId: 5, Name: "q", LockDurationMs: 60_000, MaxDeliveryCount: 10}}); err != nil {
				t.Fatal(err)
			}
			body := make([]byte, 64<<10)
			acked := map[uint64]bool{}
			var refused error
			for i := 0; i < 2000 && refused == nil; i++ {
				resp, err := s.Send(ctx, &partitionpb.SendRequest{GroupId: 1, EntityId: 5, Messages: []*partitionpb.NewMessage{{Bare: body}}})
				if err != nil {
					refused = err
					break
				}
				acked[resp.Result.SequenceNumbers[0]] = true
			}
			if status.Code(refused) != codes.ResourceExhausted {
				t.Fatalf("after %d sends of 64 KiB on 48 MiB: %v, want ResourceExhausted", len(acked), refused)
			}

			resize(200)
			waitServing(t, n, 1)
			waitUntil(t, "a send to be accepted again", func() bool {
				resp, err := s.Send(ctx, &partitionpb.SendRequest{GroupId: 1, EntityId: 5, Messages: []*partitionpb.NewMessage{{Bare: body}}})
				if err == nil {
					acked[resp.Result.SequenceNumbers[0]] = true
				}
				return err == nil
			})
			got := 0
			for {
				res, err := s.Receive(ctx, &partitionpb.ReceiveRequest{GroupId: 1, EntityId: 5, MaxCount: 100, ReceiveAndDelete: true})
				if err != nil {
					t.Fatal(err)
				}
				if len(res.Result.Messages) == 0 {
					break
				}
				for _, m := range res.Result.Messages {
					if !acked[m.SequenceNumber] {
						t.Errorf("received %d, which was not acknowledged", m.SequenceNumber)
					}
					delete(acked, m.SequenceNumber)
					got++
				}
			}
			if len(acked) > 0 {
				t.Errorf("%d acknowledged messages lost (received %d)", len(acked), got)
			}
		})
	}
}
