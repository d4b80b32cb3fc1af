package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	goamqp "github.com/Azure/go-amqp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/quorumbus/quorumbus/cmd/quorumbus/cluster"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// TestMoveBacklogReplica is `make move-backlog`: a group whose queue holds
// a backlog of QUORUMBUS_BACKLOG_MB (default 1024) MiB has one replica
// moved to a new node (the old one drained), while a client sends and
// receives on another queue of the same group. It reports how long the move
// took, the client's send latency before and during it, and checks that
// the backlog is whole afterwards. It runs only with QUORUMBUS_BACKLOG_MB
// set.
func TestMoveBacklogReplica(t *testing.T) {
	mb, _ := strconv.Atoi(os.Getenv("QUORUMBUS_BACKLOG_MB"))
	if mb <= 0 {
		t.Skip("QUORUMBUS_BACKLOG_MB=1024 (make move-backlog) runs it")
	}
	const msgSize = 64 << 10
	total := mb << 20 / msgSize

	bin := buildBinary(t)
	dir := t.TempDir()
	grpcAddrs, gossipAddrs, httpAddrs := freeAddrs(t, 4), freeAddrs(t, 4), freeAddrs(t, 4)
	var boot []string
	for i := range 3 {
		boot = append(boot, fmt.Sprintf("n%d=%s", i+1, grpcAddrs[i]))
	}
	nodeArgs := func(i int) []string {
		args := []string{"node", "-plain-cluster", "-id", fmt.Sprintf("n%d", i+1), "-data", filepath.Join(dir, fmt.Sprintf("n%d", i+1)),
			"-grpc-addr", grpcAddrs[i], "-gossip-addr", gossipAddrs[i], "-join", strings.Join(gossipAddrs[:3], ","),
			"-http-addr", httpAddrs[i], "-groups", "1", "-log-level", cmp.Or(os.Getenv("QUORUMBUS_TEST_NODE_LOG"), "error")}
		if i < 3 {
			args = append(args, "-bootstrap", strings.Join(boot, ","))
		}
		return args
	}
	for i := range 3 {
		startProcess(t, bin, nodeArgs(i)...)
	}
	amqpAddr := freeAddrs(t, 1)[0]
	startFrontendProcess(t, bin, dir, amqpAddr, grpcAddrs[:3])

	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	if err := cluster.CreateQueues(ctx, grpcAddrs[:3], nil, []cluster.QueueSpec{
		{Name: "backlog", Props: &placementpb.QueueProperties{MaxSizeInMegabytes: int64(2*mb + 1024)}},
		{Name: "live", Props: &placementpb.QueueProperties{LockDurationMs: 30_000}},
	}, quiet); err != nil {
		t.Fatal(err)
	}
	placement, closePlacement, err := cluster.DialPlacement(grpcAddrs[0], nil)
	if err != nil {
		t.Fatal(err)
	}
	defer closePlacement()
	conn := dialUntil(t, ctx, amqpAddr)

	// The backlog: pipelined sends on a few links.
	began := time.Now()
	var sent atomic.Int64
	var wg sync.WaitGroup
	const links, inflight = 4, 32
	for l := range links {
		sess, err := conn.NewSession(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		snd := senderUntil(t, ctx, sess, "backlog")
		slots := make(chan struct{}, inflight)
		for i := l; i < total; i += links {
			slots <- struct{}{}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-slots }()
				body := make([]byte, msgSize)
				copy(body, strconv.Itoa(i))
				if err := snd.Send(ctx, goamqp.NewMessage(body), nil); err != nil {
					t.Errorf("backlog send %d: %v", i, err)
					return
				}
				sent.Add(1)
			}()
		}
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	fill := time.Since(began)
	t.Logf("backlog: %d messages of %d KiB (%d MiB) in %v", total, msgSize>>10, mb, fill.Round(time.Second))

	// The live client: one send then one receive+complete at a time, each
	// send's latency recorded with its start time.
	type sample struct {
		at  time.Time
		dur time.Duration
	}
	var (
		mu      sync.Mutex
		samples []sample
		failure atomic.Value
		stop    = make(chan struct{})
	)
	// The live client is the Go SDK, which retries what the broker says
	// may be retried (a timeout while a partition elects a leader): the
	// latency it reports is what an application sees.
	client, err := azservicebus.NewClientFromConnectionString(cluster.ConnectionString(amqpAddr), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close(context.Background())
	liveSnd, err := client.NewSender("live", nil)
	if err != nil {
		t.Fatal(err)
	}
	liveRcv, err := client.NewReceiverForQueue("live", nil)
	if err != nil {
		t.Fatal(err)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
			start := time.Now()
			if err := liveSnd.SendMessage(ctx, &azservicebus.Message{Body: []byte(strconv.Itoa(i))}, nil); err != nil {
				failure.CompareAndSwap(nil, fmt.Errorf("live send: %w", err))
				return
			}
			d := time.Since(start)
			msgs, err := liveRcv.ReceiveMessages(ctx, 1, nil)
			if err == nil && len(msgs) == 1 {
				err = liveRcv.CompleteMessage(ctx, msgs[0], nil)
			}
			if err != nil {
				failure.CompareAndSwap(nil, fmt.Errorf("live receive: %w", err))
				return
			}
			mu.Lock()
			samples = append(samples, sample{start, d})
			mu.Unlock()
		}
	}()
	// The "before" window starts once the live client runs steadily: the
	// store may still be flushing the backlog it just took.
	for settle := time.Now(); ; time.Sleep(100 * time.Millisecond) {
		mu.Lock()
		n := len(samples)
		mu.Unlock()
		if n >= 20 {
			t.Logf("live client steady after %v", time.Since(settle).Round(100*time.Millisecond))
			break
		}
		if err, _ := failure.Load().(error); err != nil {
			t.Fatal(err)
		}
		if time.Since(settle) > 3*time.Minute {
			t.Fatal("the live client did not complete 20 sends and receives in 3 minutes")
		}
	}
	time.Sleep(15 * time.Second) // the "before" window

	// n4 joins; n3 is drained, so its replica moves to n4 (one group of
	// three replicas on four nodes is already balanced otherwise).
	startProcess(t, bin, nodeArgs(3)...)
	time.Sleep(3 * time.Second)
	for drainAsked := time.Now(); ; {
		_, err := placement.DrainNode(ctx, &placementpb.DrainNodeRequest{NodeId: "n3", Draining: true})
		if err == nil {
			break
		}
		if status.Code(err) != codes.Unavailable || time.Since(drainAsked) > 2*time.Minute {
			t.Fatal(err)
		}
		t.Logf("drain: %v; asking again", err)
		time.Sleep(time.Second)
	}
	var moveStart, moveEnd time.Time
	for {
		if err, _ := failure.Load().(error); err != nil {
			t.Fatal(err)
		}
		// The meta group may be electing (a drained voter is replaced):
		// ask again, as a client would.
		st, err := placement.WatchRoutes(ctx, &placementpb.WatchRoutesRequest{})
		var tb *placementpb.RoutingTable
		if err == nil {
			tb, err = st.Recv()
		}
		if err != nil {
			if ctx.Err() != nil {
				t.Fatal(err)
			}
			time.Sleep(100 * time.Millisecond)
			continue
		}
		g := tb.Groups[0] // the cluster has one group
		onN3, onN4 := false, false
		for _, r := range g.Replicas {
			onN3 = onN3 || r.NodeId == "n3"
			onN4 = onN4 || r.NodeId == "n4"
		}
		if g.MovingFrom != "" && moveStart.IsZero() {
			moveStart = time.Now()
		}
		if !onN3 && onN4 && g.MovingFrom == "" {
			moveEnd = time.Now()
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the move did not finish")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if moveStart.IsZero() {
		t.Fatal("never saw the group moving")
	}
	time.Sleep(10 * time.Second) // an "after" window
	close(stop)
	wg.Wait()
	if err, _ := failure.Load().(error); err != nil {
		t.Fatal(err)
	}

	window := func(from, to time.Time) string {
		mu.Lock()
		defer mu.Unlock()
		var ds []time.Duration
		for _, s := range samples {
			if !s.at.Before(from) && s.at.Before(to) {
				ds = append(ds, s.dur)
			}
		}
		if len(ds) == 0 {
			return "no sends"
		}
		slices.Sort(ds)
		q := func(p float64) time.Duration {
			return ds[min(len(ds)-1, int(p*float64(len(ds))))].Round(100 * time.Microsecond)
		}
		return fmt.Sprintf("%d sends, p50 %v, p99 %v, max %v", len(ds), q(0.5), q(0.99), ds[len(ds)-1].Round(100*time.Microsecond))
	}
	t.Logf("move of a replica holding %d MiB: %v", mb, moveEnd.Sub(moveStart).Round(100*time.Millisecond))
	t.Logf("live sends before the move: %s", window(moveStart.Add(-15*time.Second), moveStart))
	t.Logf("live sends during the move: %s", window(moveStart, moveEnd))
	t.Logf("live sends after the move:  %s", window(moveEnd, moveEnd.Add(10*time.Second)))

	// The backlog is whole, as the group's leader counts it.
	group := queueGroup(t, ctx, grpcAddrs[0], "backlog")
	e, err := placement.GetEntity(ctx, &placementpb.GetEntityRequest{Name: "backlog"})
	if err != nil {
		t.Fatal(err)
	}
	addrs := []string{grpcAddrs[0], grpcAddrs[1], grpcAddrs[3]}
	leader := addrs[leaderIndex(t, ctx, addrs, group)]
	cc, err := grpc.NewClient(leader, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	stats, err := partitionpb.NewPartitionServiceClient(cc).Stats(ctx, &partitionpb.StatsRequest{GroupId: group, EntityId: e.Id})
	if err != nil {
		t.Fatal(err)
	}
	if stats.ActiveMessages != uint64(sent.Load()) {
		t.Fatalf("after the move the backlog holds %d messages; %d were acknowledged", stats.ActiveMessages, sent.Load())
	}
}
