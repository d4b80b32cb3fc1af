package node_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/node/nodetest"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// BenchmarkSendPipelined measures Send on a 3-node cluster (one group, fsync
// on, 1 KiB messages, one message per request) through gRPC: with 256
// concurrent senders, then with one synchronous sender. It reports msgs/s,
// per-request latency percentiles, and how many requests group commit
// packed into each Raft entry.
//
//	go test -run '^$' -bench SendPipelined -benchtime 5s ./node/
func BenchmarkSendPipelined(b *testing.B) {
	c := nodetest.StartCluster(b, 3, group)
	cl := c.Client(group)
	upsertEntity(b, cl, 60_000)
	for _, senders := range []int{256, 1} {
		b.Run(fmt.Sprintf("senders=%d", senders), func(b *testing.B) {
			benchSend(b, c, cl, senders)
		})
	}
}

func benchSend(b *testing.B, c *nodetest.Cluster, cl partitionpb.PartitionServiceClient, senders int) {
	body := make([]byte, 1024)
	for i := range body {
		body[i] = byte('a' + i%26)
	}
	ctx := context.Background()
	lat := make([]time.Duration, b.N)
	var next atomic.Int64
	e0, r0 := groupCounters(b, c)
	var wg sync.WaitGroup
	b.ResetTimer()
	cpu0 := cpuTime()
	start := time.Now()
	for range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := &partitionpb.SendRequest{EntityId: entity, Messages: []*partitionpb.NewMessage{{Bare: body}}}
			for {
				k := next.Add(1) - 1
				if k >= int64(b.N) {
					return
				}
				t0 := time.Now()
				resp, err := cl.Send(ctx, req)
				lat[k] = time.Since(t0)
				if err != nil || resp.Result.Code != partitionpb.ResultCode_RESULT_OK {
					b.Errorf("send: %v %v", resp, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpu := cpuTime() - cpu0
	b.StopTimer()
	e1, r1 := groupCounters(b, c)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu_us/msg")
	reportLatencies(b, lat)
	if e1 > e0 {
		b.ReportMetric(float64(r1-r0)/float64(e1-e0), "msgs/entry")
	}
	b.ReportMetric(0, "ns/op") // per-op time is meaningless with concurrent senders
}

// reportLatencies reports the median and the tail of lat, which it sorts.
func reportLatencies(b *testing.B, lat []time.Duration) {
	slices.Sort(lat)
	pct := func(p float64) float64 {
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Microseconds()) / 1000
	}
	b.ReportMetric(pct(0.50), "p50_ms")
	b.ReportMetric(pct(0.99), "p99_ms")
}

// cpuTime is the CPU time (user and system) the process has used: all three
// nodes and the clients share the process.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
