package node_test

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"
)

// The benchmarks in this file measure the floor under the broker on the
// machine they run on: what the disk and the stock dependencies give with
// none of quorumbus's code in the way. docs/performance.md compares the
// synchronous send of `quorumbus bench` against them, alternating runs,
// because on a shared virtual machine the floor moves from hour to hour.
//
//	go test -run '^$' -bench Floor -benchtime 5000x ./node/

// BenchmarkFloorFsync writes 1 KiB to a preallocated file and fsyncs it,
// one at a time: the cost of making one log entry durable on one replica.
func BenchmarkFloorFsync(b *testing.B) {
	f, err := os.Create(filepath.Join(b.TempDir(), "floor"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(64 << 20); err != nil {
		b.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 1024)
	lat := make([]time.Duration, b.N)
	b.ResetTimer()
	for i := range b.N {
		t0 := time.Now()
		if _, err := f.WriteAt(buf, int64(i%(64<<10))*1024); err != nil {
			b.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
		lat[i] = time.Since(t0)
	}
	b.StopTimer()
	reportLatencies(b, lat)
}

// BenchmarkFloorRaftSync is one synchronous client of a stock three-voter
// hashicorp/raft group in one process: raft-wal logs with fsync, the stock
// TCP transport on loopback, default configuration, an FSM that does
// nothing, 1 KiB entries applied one at a time. A synchronous send through
// the broker cannot be faster than this on the same machine and disk unless
// the broker changes how Raft writes (see design-notes.md, "A leader fsyncs
// while its followers do").
func BenchmarkFloorRaftSync(b *testing.B) {
	leader := startFloorGroup(b)
	buf := make([]byte, 1024)
	for range 200 { // warm the connections and the segment files
		if err := leader.Apply(buf, 5*time.Second).Error(); err != nil {
			b.Fatal(err)
		}
	}
	lat := make([]time.Duration, b.N)
	b.ResetTimer()
	for i := range b.N {
		t0 := time.Now()
		if err := leader.Apply(buf, 5*time.Second).Error(); err != nil {
			b.Fatal(err)
		}
		lat[i] = time.Since(t0)
	}
	b.StopTimer()
	reportLatencies(b, lat)
}

// startFloorGroup starts three stock voters and returns the leader once
// one is elected; the group is shut down when the benchmark ends.
func startFloorGroup(b *testing.B) *raft.Raft {
	b.Helper()
	dir := b.TempDir()
	transports := make([]*raft.NetworkTransport, 3)
	servers := make([]raft.Server, 3)
	for i := range transports {
		t, err := raft.NewTCPTransport("127.0.0.1:0", nil, 3, 10*time.Second, io.Discard)
		if err != nil {
			b.Fatal(err)
		}
		transports[i] = t
		servers[i] = raft.Server{ID: raft.ServerID(fmt.Sprint(i)), Address: t.LocalAddr()}
	}
	var rafts []*raft.Raft
	var logs []*wal.WAL
	b.Cleanup(func() { // raft first: it writes to the logs until it stops
		for _, r := range rafts {
			r.Shutdown().Error()
		}
		for _, t := range transports {
			t.Close()
		}
		for _, l := range logs {
			l.Close()
		}
	})
	for i, t := range transports {
		logDir := filepath.Join(dir, fmt.Sprint(i))
		if err := os.MkdirAll(logDir, 0o755); err != nil {
			b.Fatal(err)
		}
		log, err := wal.Open(logDir)
		if err != nil {
			b.Fatal(err)
		}
		logs = append(logs, log)
		conf := raft.DefaultConfig()
		conf.LocalID = servers[i].ID
		conf.LogOutput = io.Discard
		conf.SnapshotThreshold = 1 << 40
		snaps := raft.NewInmemSnapshotStore()
		if i == 0 {
			if err := raft.BootstrapCluster(conf, log, log, snaps, t, raft.Configuration{Servers: servers}); err != nil {
				b.Fatal(err)
			}
		}
		r, err := raft.NewRaft(conf, floorFSM{}, log, log, snaps, t)
		if err != nil {
			b.Fatal(err)
		}
		rafts = append(rafts, r)
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		for _, r := range rafts {
			if r.State() == raft.Leader {
				return r
			}
		}
	}
	b.Fatal("no leader elected in 10 s")
	return nil
}

// floorFSM applies nothing: the floor is Raft and the disk alone.
type floorFSM struct{}

func (floorFSM) Apply(*raft.Log) any { return nil }
func (floorFSM) Snapshot() (raft.FSMSnapshot, error) {
	return nil, fmt.Errorf("floorFSM keeps no state")
}
func (floorFSM) Restore(rc io.ReadCloser) error { return rc.Close() }

// BenchmarkFloorGroups applies the same entries to one stock group (as
// startFloorGroup) and spread over eight, four in flight per group, 1 KiB
// each, and reports the process's CPU per entry: what a partitioned
// entity's requests cost when they reach eight groups that cannot pack
// them, against one group, entry for entry (docs/performance.md,
// partitioned queues).
//
//	go test -run '^$' -bench FloorGroups -benchtime 20000x ./node/
func BenchmarkFloorGroups(b *testing.B) {
	for _, groups := range []int{1, 8} {
		b.Run(fmt.Sprint("groups=", groups), func(b *testing.B) {
			leaders := make([]*raft.Raft, groups)
			for i := range leaders {
				leaders[i] = startFloorGroup(b)
			}
			buf := make([]byte, 1024)
			for _, l := range leaders { // warm the connections and the segment files
				for range 100 {
					if err := l.Apply(buf, 5*time.Second).Error(); err != nil {
						b.Fatal(err)
					}
				}
			}
			const inFlight = 4
			before := processCPU()
			b.ResetTimer()
			done := make(chan error, groups*inFlight)
			for g, l := range leaders {
				for w := range inFlight {
					go func() {
						for i := g*inFlight + w; i < b.N; i += groups * inFlight {
							if err := l.Apply(buf, 5*time.Second).Error(); err != nil {
								done <- err
								return
							}
						}
						done <- nil
					}()
				}
			}
			for range groups * inFlight {
				if err := <-done; err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64((processCPU()-before).Microseconds())/float64(b.N), "cpu-µs/entry")
		})
	}
}

// processCPU is the user and system CPU time the process used so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
