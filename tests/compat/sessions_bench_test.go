package compat

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/quorumbus/quorumbus/cmd/quorumbus/cluster"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// The session benchmarks (figures in docs/performance.md,
// "Sessions"). They start a dev cluster of their own and drive it through
// the Go SDK; one iteration is a whole workload, so run them with
// -benchtime 1x. The environment scales them down for a quick look:
// QUORUMBUS_BENCH_SESSIONS (default 1,000 sessions of
// QUORUMBUS_BENCH_PER_SESSION = 100 messages) and
// QUORUMBUS_BENCH_IDLE_SESSIONS (default 100,000).

const (
	benchReceivers = 16
	benchBodyBytes = 1024
)

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// devCacheMB is `quorumbus dev`'s default block cache (-cache-mb), which
// the cluster figures of docs/performance.md use too. A smaller one
// handicaps whichever side holds more records: a topic's ten
// subscriptions hold ten times the plain queue's.
const devCacheMB = 32

func startBenchDev(b *testing.B, queues ...cluster.QueueSpec) (*cluster.Dev, *azservicebus.Client) {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	opts := cluster.DevOptions{
		DataDir: b.TempDir(), AMQPAddr: "127.0.0.1:0", Nodes: 3, Groups: 3, CacheMB: devCacheMB, LogLevel: "error",
		// What `quorumbus dev` does: a partitioned queue gets groups of its own.
		MaxReplicasPerNode: cluster.DefaultMaxReplicasPerNode,
	}
	if n := envInt("QUORUMBUS_BENCH_GROUPS", 0); n > 0 {
		// A floor: every entity, every partition, in n fixed groups.
		opts.Groups, opts.MaxReplicasPerNode = n, 0
	}
	c, err := cluster.StartDev(ctx, opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	if err := cluster.CreateQueues(ctx, c.NodeAddrs, c.Creds, queues, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		b.Fatal(err)
	}
	for _, q := range queues {
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if _, err := c.Router.Entity(q.Name); err == nil {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("queue %s never reached the routing table", q.Name)
			}
		}
	}
	client, err := azservicebus.NewClientFromConnectionString(cluster.ConnectionString(c.AMQPAddr), nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { client.Close(context.Background()) })
	return c, client
}

// sendBatches sends count messages of benchBodyBytes to queue in batches,
// each batch of one session when sid is not empty; it retries while the
// queue's partitions are still being configured.
func sendBatches(ctx context.Context, snd *azservicebus.Sender, sid string, count int) error {
	body := make([]byte, benchBodyBytes)
	for sent := 0; sent < count; {
		batch, err := snd.NewMessageBatch(ctx, nil)
		if err != nil {
			return err
		}
		n := 0
		for sent+n < count {
			m := &azservicebus.Message{Body: body}
			if sid != "" {
				m.SessionID = &sid
			}
			if err := batch.AddMessage(m, nil); errors.Is(err, azservicebus.ErrMessageTooLarge) {
				break
			} else if err != nil {
				return err
			}
			n++
		}
		for {
			err := snd.SendMessageBatch(ctx, batch, nil)
			if err == nil {
				break
			}
			if !strings.Contains(err.Error(), "entity not found") || ctx.Err() != nil {
				return err
			}
			time.Sleep(100 * time.Millisecond)
		}
		sent += n
	}
	return nil
}

// fill sends the workload: perSession messages to each of sessions
// sessions of sq, as many to plain, by 16 concurrent senders.
func fill(b *testing.B, ctx context.Context, client *azservicebus.Client, queue string, sessions, perSession int) {
	b.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, benchReceivers)
	for range benchReceivers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			snd, err := client.NewSender(queue, nil)
			if err != nil {
				errs <- err
				return
			}
			defer snd.Close(ctx)
			for {
				s := int(next.Add(1)) - 1
				if s >= sessions {
					return
				}
				sid := ""
				if queue != "plain" {
					sid = fmt.Sprintf("s%06d", s)
				}
				if err := sendBatches(ctx, snd, sid, perSession); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}

// consumePlain receives and completes total messages of queue with 16
// peek-lock receivers, each asking for up to batch at a time.
func consumePlain(ctx context.Context, client *azservicebus.Client, queue string, total, batch int) error {
	var left atomic.Int64
	left.Store(int64(total))
	var wg sync.WaitGroup
	errs := make(chan error, benchReceivers)
	for range benchReceivers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := client.NewReceiverForQueue(queue, nil)
			if err != nil {
				errs <- err
				return
			}
			defer r.Close(ctx)
			for left.Load() > 0 {
				rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				msgs, err := r.ReceiveMessages(rctx, batch, nil)
				cancel()
				if err != nil && !errors.Is(err, context.DeadlineExceeded) {
					errs <- err
					return
				}
				if err := completeAll(ctx, r, msgs); err != nil {
					errs <- err
					return
				}
				left.Add(-int64(len(msgs)))
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// consumeSessions accepts the next session until none is left, with 16
// session receivers, and receives and completes each session's
// perSession messages; it returns how long each accept-next that got a
// session took.
func consumeSessions(ctx context.Context, client *azservicebus.Client, queue string, sessions, perSession int) ([]time.Duration, error) {
	var mu sync.Mutex
	var accepts []time.Duration
	var done atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, benchReceivers)
	for range benchReceivers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for done.Load() < int64(sessions) {
				actx, cancel := context.WithTimeout(ctx, 5*time.Second)
				start := time.Now()
				r, err := client.AcceptNextSessionForQueue(actx, queue, nil)
				took := time.Since(start)
				cancel()
				var sbErr *azservicebus.Error
				if errors.As(err, &sbErr) && sbErr.Code == azservicebus.CodeTimeout {
					continue // the others hold the last sessions
				}
				if err != nil {
					errs <- fmt.Errorf("accept next: %w", err)
					return
				}
				mu.Lock()
				accepts = append(accepts, took)
				mu.Unlock()
				for got := 0; got < perSession; {
					msgs, err := r.ReceiveMessages(ctx, perSession-got, nil)
					if err != nil {
						errs <- fmt.Errorf("session %s: %w", r.SessionID(), err)
						return
					}
					if err := completeAll(ctx, r, msgs); err != nil {
						errs <- err
						return
					}
					got += len(msgs)
				}
				if err := r.Close(ctx); err != nil {
					errs <- err
					return
				}
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	close(errs)
	return accepts, <-errs
}

// completeAll completes msgs concurrently, as an application that
// processes a batch in parallel does: the rate is then bound by the
// broker rather than by one settlement round trip after another.
func completeAll(ctx context.Context, r interface {
	CompleteMessage(context.Context, *azservicebus.ReceivedMessage, *azservicebus.CompleteMessageOptions) error
}, msgs []*azservicebus.ReceivedMessage) error {
	var wg sync.WaitGroup
	errs := make(chan error, len(msgs))
	for _, m := range msgs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := r.CompleteMessage(ctx, m, nil); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// syncSends sends n messages one after another and returns each one's
// latency: one Raft commit each, the floor under an accept-next.
func syncSends(ctx context.Context, client *azservicebus.Client, queue string, n int) ([]time.Duration, error) {
	snd, err := client.NewSender(queue, nil)
	if err != nil {
		return nil, err
	}
	defer snd.Close(ctx)
	body := make([]byte, benchBodyBytes)
	var took []time.Duration
	for range n {
		start := time.Now()
		if err := snd.SendMessage(ctx, &azservicebus.Message{Body: body}, nil); err != nil {
			return nil, err
		}
		took = append(took, time.Since(start))
	}
	return took, nil
}

func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

// BenchmarkSessionsAgainstPlain consumes 1,000 sessions of 100 × 1 KiB
// messages with 16 session receivers (accept-next, peek-lock, complete,
// close) and, in the same cluster and iteration, as many messages of a
// plain queue with 16 peek-lock receivers; it reports both rates, their
// ratio (the target: at least half) and the accept-next latency
// while sessions are available (target: p99 under 10 ms).
//
//	go test ./tests/compat -run XXX -bench SessionsAgainstPlain -benchtime 1x
//
// QUORUMBUS_BENCH_PARTITIONS=16 makes both queues partitioned.
func BenchmarkSessionsAgainstPlain(b *testing.B) {
	sessions := envInt("QUORUMBUS_BENCH_SESSIONS", 1000)
	perSession := envInt("QUORUMBUS_BENCH_PER_SESSION", 100)
	parts := uint32(envInt("QUORUMBUS_BENCH_PARTITIONS", 1))
	props := func(s bool) *placementpb.QueueProperties {
		p := &placementpb.QueueProperties{RequiresSession: s}
		if parts > 1 {
			p.PartitionCount = parts
		}
		return p
	}
	c, client := startBenchDev(b,
		cluster.QueueSpec{Name: "sq", Props: props(true)},
		cluster.QueueSpec{Name: "plain", Props: props(false)})
	ctx := context.Background()
	total := sessions * perSession
	var plainRate, sessRate float64
	var accepts []time.Duration
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		fill(b, ctx, client, "plain", sessions, perSession)
		b.StartTimer()
		start := time.Now()
		if err := consumePlain(ctx, client, "plain", total, perSession); err != nil {
			b.Fatal(err)
		}
		plainRate = float64(total) / time.Since(start).Seconds()

		b.StopTimer()
		fill(b, ctx, client, "sq", sessions, perSession)
		b.StartTimer()
		start = time.Now()
		got, err := consumeSessions(ctx, client, "sq", sessions, perSession)
		if err != nil {
			b.Fatal(err)
		}
		sessRate = float64(total) / time.Since(start).Seconds()
		accepts = append(accepts, got...)
		b.Logf("plain %.0f msgs/s, sessions %.0f msgs/s (%.0f %%); accept-next p50 %v p99 %v max %v over %d",
			plainRate, sessRate, 100*sessRate/plainRate, percentile(got, 0.5), percentile(got, 0.99), slices.Max(got), len(got))
		b.StopTimer()
		// The floor under an accept-next in this cluster at this time.
		sends, err := syncSends(ctx, client, "plain", 500)
		if err != nil {
			b.Fatal(err)
		}
		b.Logf("one synchronous sender: p50 %v p99 %v", percentile(sends, 0.5), percentile(sends, 0.99))
		// An accept-next alone, sessions available, nothing else running.
		fill(b, ctx, client, "sq", 200, 1)
		var alone []time.Duration
		for range 200 {
			start := time.Now()
			r, err := client.AcceptNextSessionForQueue(ctx, "sq", &azservicebus.SessionReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
			if err != nil {
				b.Fatal(err)
			}
			alone = append(alone, time.Since(start))
			if _, err := r.ReceiveMessages(ctx, 1, nil); err != nil {
				b.Fatal(err)
			}
			r.Close(ctx)
		}
		b.Logf("accept-next alone: p50 %v p99 %v", percentile(alone, 0.5), percentile(alone, 0.99))
		// The broker's part of it: the front-end's call to the partition
		// (the accept's Raft commit), without the SDK's link set-up.
		fill(b, ctx, client, "sq", 200, 1)
		e, err := c.Router.Entity("sq")
		if err != nil {
			b.Fatal(err)
		}
		var broker []time.Duration
		for range 200 {
			start := time.Now()
			res, token, err := c.Router.AcceptSession(ctx, e, &partitionpb.AcceptSessionRequest{Next: true})
			if err != nil || res.GetSessionId() == "" {
				b.Fatalf("accept next at the router: %v %v", res, err)
			}
			broker = append(broker, time.Since(start))
			if _, err := c.Router.ReleaseSession(ctx, e, &partitionpb.ReleaseSession{SessionId: res.SessionId, Token: token}); err != nil {
				b.Fatal(err)
			}
		}
		b.Logf("accept-next at the router (partition 0): p50 %v p99 %v", percentile(broker, 0.5), percentile(broker, 0.99))
		b.ReportMetric(float64(percentile(broker, 0.99).Microseconds())/1000, "router-accept-p99-ms")
		b.StartTimer()
	}
	b.ReportMetric(plainRate, "plain-msgs/s")
	b.ReportMetric(sessRate, "session-msgs/s")
	b.ReportMetric(sessRate/plainRate, "ratio")
	b.ReportMetric(float64(percentile(accepts, 0.5).Microseconds())/1000, "accept-p50-ms")
	b.ReportMetric(float64(percentile(accepts, 0.99).Microseconds())/1000, "accept-p99-ms")
}

// rssBytes is the process's resident set (Linux).
func rssBytes() int64 {
	p, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(p), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

// BenchmarkSessionsIdle gives 100,000 sessions a state of 64 bytes each
// (accept by id, set the state, close: the sessions then have no messages
// and no lock) and reports the process's RSS and Go heap before and
// after, once the cluster settled: the memory those idle sessions cost.
// The whole dev cluster and the client run in this process.
//
//	go test ./tests/compat -run XXX -bench SessionsIdle -benchtime 1x
func BenchmarkSessionsIdle(b *testing.B) {
	n := envInt("QUORUMBUS_BENCH_IDLE_SESSIONS", 100_000)
	_, client := startBenchDev(b, cluster.QueueSpec{Name: "sq", Props: &placementpb.QueueProperties{RequiresSession: true}})
	ctx := context.Background()
	settle := func() (rss int64, heap uint64) {
		time.Sleep(2 * time.Second)
		runtime.GC()
		debug.FreeOSMemory()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return rssBytes(), ms.HeapInuse
	}
	rss0, heap0 := settle()
	state := make([]byte, 64)
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	start := time.Now()
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				s := int(next.Add(1)) - 1
				if s >= n {
					return
				}
				var r *azservicebus.SessionReceiver
				var err error
				sid := fmt.Sprintf("idle-%07d", s)
				for try := 0; ; try++ {
					// Bounded: an attach left unanswered fails the run
					// with its session instead of hanging it.
					actx, cancel := context.WithTimeout(ctx, time.Minute)
					r, err = client.AcceptSessionForQueue(actx, "sq", sid, nil)
					cancel()
					if err == nil || try == 50 {
						break
					}
					time.Sleep(100 * time.Millisecond) // the queue's partition may still be configuring
				}
				if err != nil {
					errs <- fmt.Errorf("accept session %s: %w", sid, err)
					return
				}
				if err := r.SetSessionState(ctx, state, nil); err != nil {
					errs <- err
					return
				}
				if err := r.Close(ctx); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	b.Logf("%d sessions given state in %v", n, time.Since(start).Round(time.Millisecond))
	rss1, heap1 := settle()
	b.Logf("RSS %d MiB -> %d MiB, Go heap in use %d MiB -> %d MiB", rss0>>20, rss1>>20, heap0>>20, heap1>>20)
	b.ReportMetric(float64(rss1)/(1<<20), "rss-MiB")
	b.ReportMetric(float64(rss1-rss0)/(1<<20), "rss-growth-MiB")
	b.ReportMetric(float64(int64(heap1)-int64(heap0))/(1<<20), "heap-growth-MiB")
}
