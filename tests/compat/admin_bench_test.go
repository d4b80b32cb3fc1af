package compat

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"

	"github.com/quorumbus/quorumbus/cmd/quorumbus/cluster"
	"github.com/quorumbus/quorumbus/cmd/quorumbus/loadtool"
	"github.com/quorumbus/quorumbus/placement/sas"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// BenchmarkAdminListAndScrape creates QUORUMBUS_BENCH_ENTITIES queues
// (default 1,000; the namespace allows 10,000) in a dev cluster, then
// measures listing them all with their runtime properties through the Go
// admin client (pages of 100, as it asks by default) and scraping
// /metrics. Figures go to docs/performance.md.
func BenchmarkAdminListAndScrape(b *testing.B) {
	n := 1000
	if v := os.Getenv("QUORUMBUS_BENCH_ENTITIES"); v != "" {
		n, _ = strconv.Atoi(v)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, err := cluster.StartDev(ctx, cluster.DevOptions{
		DataDir: b.TempDir(), AMQPAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0",
		Nodes: 3, Groups: 3, CacheMB: 16, LogLevel: "error",
	})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	queues := make([]cluster.QueueSpec, n)
	for i := range queues {
		queues[i] = cluster.QueueSpec{Name: fmt.Sprintf("bench-%05d", i), Props: &placementpb.QueueProperties{}}
	}
	// Creators at once: each creation waits for its partition to be
	// configured, and one at a time 10,000 took about half an hour. The
	// queues go in chunks of 1,000, each timed, so the log shows whether a
	// creation costs more as the catalog grows.
	meta := watchMetaLeader(ctx, c)
	start := time.Now()
	const creators, chunk = 32, 1000
	for lo := 0; lo < len(queues); lo += chunk {
		part := queues[lo:min(lo+chunk, len(queues))]
		chunkStart := time.Now()
		errs := make(chan error, creators)
		for i := range creators {
			go func() {
				var mine []cluster.QueueSpec
				for j := i; j < len(part); j += creators {
					mine = append(mine, part[j])
				}
				errs <- cluster.CreateQueues(ctx, c.NodeAddrs, c.Creds, mine, slog.New(slog.NewTextHandler(io.Discard, nil)))
			}()
		}
		for range creators {
			if err := <-errs; err != nil {
				b.Fatal(err)
			}
		}
		b.Logf("queues %d-%d created in %v (%s)", lo, lo+len(part)-1, time.Since(chunkStart).Round(time.Millisecond), meta())
	}
	b.Logf("created %d queues in %v", n, time.Since(start).Round(time.Millisecond))
	ac := adminClient(b, c, sas.DevKeyName, sas.DevKey)
	b.Run("list-runtime", func(b *testing.B) {
		defer costPerOp(b)()
		for range b.N {
			got := 0
			p := ac.NewListQueuesRuntimePropertiesPager(nil)
			for p.More() {
				page, err := p.NextPage(ctx)
				if err != nil {
					b.Fatal(err)
				}
				got += len(page.QueueRuntimeProperties)
			}
			if got != n {
				b.Fatalf("listed %d queues, want %d", got, n)
			}
		}
	})
	// The same list from a process of its own (adminlistclient_test.go),
	// as a user's client runs: client-wall-ms/op is the time a user
	// waits, client-cpu-ms/op what the client spends, and cpu-ms/op here
	// what the cluster and gateway spend (this process). ns/op also
	// counts the client process's start and its first, unmeasured list.
	b.Run("list-runtime-client-process", func(b *testing.B) {
		res := listFromOwnProcess(b, c, n, 100, b.N, func() func() { return costPerOp(b) })
		b.ReportMetric(float64(res.Wall.Microseconds())/1000/float64(b.N), "client-wall-ms/op")
		b.ReportMetric(float64(res.CPU.Microseconds())/1000/float64(b.N), "client-cpu-ms/op")
	})
	b.Run("list-one-page", func(b *testing.B) {
		defer costPerOp(b)()
		for range b.N {
			got := 0
			p := ac.NewListQueuesPager(&admin.ListQueuesOptions{MaxPageSize: int32(n)})
			for p.More() {
				page, err := p.NextPage(ctx)
				if err != nil {
					b.Fatal(err)
				}
				got += len(page.Queues)
			}
			if got != n {
				b.Fatalf("listed %d queues, want %d", got, n)
			}
		}
	})
	// The same one-page list read off the wire over plain HTTP, not
	// decoded: what the gateway and the cluster take, without the Go
	// client's encoding/xml decoding (most of list-one-page).
	b.Run("list-one-page-wire", func(b *testing.B) {
		u := fmt.Sprintf("http://%s/$Resources/Queues?$top=%d&api-version=2021-05", c.Admin.Addr(), n)
		defer costPerOp(b)()
		for range b.N {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
			req.Header.Set("Authorization", signSAS(u, sas.DevKeyName, sas.DevKey, time.Now().Add(time.Hour)))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			size, _ := io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b.Fatalf("list: %d", resp.StatusCode)
			}
			b.SetBytes(size)
		}
	})
	b.Run("scrape", func(b *testing.B) {
		defer costPerOp(b)()
		for range b.N {
			resp, err := http.Get("http://" + c.Admin.Addr() + "/metrics")
			if err != nil {
				b.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	})
}

// costPerOp starts measuring a sub-benchmark: the returned func reports
// the process's CPU (cluster and client together) per op, which the
// machine's other load changes less than the wall time, and with
// QUORUMBUS_BENCH_PROFILE naming a directory writes the sub-benchmark's
// CPU profile there as <name>.pprof.
func costPerOp(b *testing.B) func() {
	var stopProfile func()
	if dir := os.Getenv("QUORUMBUS_BENCH_PROFILE"); dir != "" {
		f, err := os.Create(filepath.Join(dir, strings.ReplaceAll(b.Name(), "/", "_")+".pprof"))
		if err != nil {
			b.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			b.Fatal(err)
		}
		stopProfile = func() { pprof.StopCPUProfile(); f.Close() }
	}
	before := loadtool.SelfCPU()
	return func() {
		cpu := loadtool.SelfCPU() - before
		if stopProfile != nil {
			stopProfile()
		}
		b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N), "cpu-ms/op")
	}
}

// watchMetaLeader polls which storage process leads the meta group, every
// 50ms until ctx ends, and returns a summary so far: how many times the
// leader changed and the longest time no member led, from the first
// leader it saw. Creating entities must not cost the meta group its
// leader.
func watchMetaLeader(ctx context.Context, c *cluster.Dev) func() string {
	var mu sync.Mutex
	changes, leader := 0, -1
	var lostAt time.Time
	var longest time.Duration
	go func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			now := -1
			for i, s := range c.Storage {
				if s.Placement.IsLeader() {
					now = i
				}
			}
			mu.Lock()
			switch {
			case leader < 0: // none yet: the dev cluster is settling
			case now < 0 && lostAt.IsZero():
				lostAt = time.Now()
			case now >= 0 && !lostAt.IsZero():
				longest = max(longest, time.Since(lostAt))
				lostAt = time.Time{}
			}
			if now >= 0 && now != leader {
				if leader >= 0 {
					changes++
				}
				leader = now
			}
			mu.Unlock()
		}
	}()
	return func() string {
		mu.Lock()
		defer mu.Unlock()
		gap := longest
		if !lostAt.IsZero() {
			gap = max(gap, time.Since(lostAt))
		}
		return fmt.Sprintf("meta leader changes so far %d, longest without one %v", changes, gap.Round(time.Millisecond))
	}
}

// BenchmarkAdminListTopics reads the first page of topics (100) with
// their runtime properties through the Go admin client: 100 topics of 2
// subscriptions each, beside QUORUMBUS_BENCH_SUBSCRIPTIONS (default
// 2,000) subscriptions of topics that sort after them, 200 a topic.
func BenchmarkAdminListTopics(b *testing.B) {
	big := 2000
	if v := os.Getenv("QUORUMBUS_BENCH_SUBSCRIPTIONS"); v != "" {
		big, _ = strconv.Atoi(v)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := startAdminDev(b)
	var specs []cluster.QueueSpec
	topic, sub := placementpb.EntityKind_ENTITY_KIND_TOPIC, placementpb.EntityKind_ENTITY_KIND_SUBSCRIPTION
	for i := range 100 {
		name := fmt.Sprintf("t%03d", i)
		specs = append(specs, cluster.QueueSpec{Name: name, Kind: topic, Props: &placementpb.QueueProperties{}})
	}
	for i := range (big + 199) / 200 {
		specs = append(specs, cluster.QueueSpec{Name: fmt.Sprintf("z%03d", i), Kind: topic, Props: &placementpb.QueueProperties{}})
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	if err := cluster.CreateQueues(ctx, c.NodeAddrs, c.Creds, specs, quiet); err != nil {
		b.Fatal(err)
	}
	specs = specs[:0]
	for i := range 100 {
		for j := range 2 {
			specs = append(specs, cluster.QueueSpec{Name: fmt.Sprintf("t%03d/Subscriptions/s%d", i, j), Kind: sub, Props: &placementpb.QueueProperties{}})
		}
	}
	for j := range big {
		specs = append(specs, cluster.QueueSpec{Name: fmt.Sprintf("z%03d/Subscriptions/s%03d", j/200, j%200), Kind: sub, Props: &placementpb.QueueProperties{}})
	}
	const creators = 32
	errs := make(chan error, creators)
	for i := range creators {
		go func() {
			var mine []cluster.QueueSpec
			for j := i; j < len(specs); j += creators {
				mine = append(mine, specs[j])
			}
			errs <- cluster.CreateQueues(ctx, c.NodeAddrs, c.Creds, mine, quiet)
		}()
	}
	for range creators {
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
	}
	ac := adminClient(b, c, sas.DevKeyName, sas.DevKey)
	b.Run("first-page", func(b *testing.B) {
		for range b.N {
			p := ac.NewListTopicsRuntimePropertiesPager(&admin.ListTopicsRuntimePropertiesOptions{MaxPageSize: 100})
			page, err := p.NextPage(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if n := len(page.TopicRuntimeProperties); n != 100 || page.TopicRuntimeProperties[7].SubscriptionCount != 2 {
				b.Fatalf("%d topics, %+v", n, page.TopicRuntimeProperties[7])
			}
		}
	})
}
