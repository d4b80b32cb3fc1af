package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"

	"github.com/quorumbus/quorumbus/cmd/quorumbus/cluster"
	"github.com/quorumbus/quorumbus/placement/sas"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// TestGrowAndDrainUnderLoad starts three `quorumbus node` processes and a
// front-end, sends and receives continuously on a queue of three
// partitions, then starts two more nodes: placement moves replicas onto
// them online until every node holds as many as the others, give or take
// one. Then it drains one node (`quorumbus node drain`), whose replicas
// move off it, and the group leaderships spread over the others. No send
// or receive may fail meanwhile, and every acknowledged message must be
// received.
func TestGrowAndDrainUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	const total = 5
	bin := buildBinary(t)
	dir := t.TempDir()
	grpcAddrs := freeAddrs(t, total)
	gossipAddrs := freeAddrs(t, total)
	var boot []string
	for i := range 3 {
		boot = append(boot, fmt.Sprintf("n%d=%s", i+1, grpcAddrs[i]))
	}
	nodeArgs := func(i int) []string {
		args := []string{"node", "-id", fmt.Sprintf("n%d", i+1), "-data", filepath.Join(dir, fmt.Sprintf("n%d", i+1)),
			"-grpc-addr", grpcAddrs[i], "-gossip-addr", gossipAddrs[i], "-join", strings.Join(gossipAddrs[:3], ","),
			"-groups", "3", "-log-level", "error", "-cache-mb", "8", "-wal-segment-mb", "4"}
		if i < 3 {
			args = append(args, "-bootstrap", strings.Join(boot, ","))
		}
		return args
	}
	for i := range 3 {
		startProcess(t, bin, nodeArgs(i)...)
	}
	amqpAddr := freeAddrs(t, 1)[0]
	rules := filepath.Join(dir, "rules.json")
	if err := cluster.WriteRulesConfig(rules, sas.DevRule()); err != nil {
		t.Fatal(err)
	}
	startProcess(t, bin, "frontend", "-amqp-addr", amqpAddr, "-http-addr", "", "-placement", strings.Join(grpcAddrs[:3], ","), "-sas-rules", rules, "-throttle-credits", "0", "-log-level", "error")

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	props := &placementpb.QueueProperties{PartitionCount: 3, LockDurationMs: 30_000}
	if err := cluster.CreateQueues(ctx, grpcAddrs[:3], []cluster.QueueSpec{{Name: "grow", Props: props}}, quiet); err != nil {
		t.Fatal(err)
	}
	placement, closePlacement, err := cluster.DialPlacement(grpcAddrs[0])
	if err != nil {
		t.Fatal(err)
	}
	defer closePlacement()

	conn := dialUntil(t, ctx, amqpAddr)
	sess, err := conn.NewSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	snd := senderUntil(t, ctx, sess, "grow")
	rcv, err := sess.NewReceiver(ctx, "grow", &goamqp.ReceiverOptions{Credit: 200, SettlementMode: goamqp.ReceiverSettleModeSecond.Ptr()})
	if err != nil {
		t.Fatal(err)
	}

	var (
		mu       sync.Mutex
		acked    = map[int64]bool{}
		received = map[int64]bool{}
		next     atomic.Int64
		failure  atomic.Value
		stop     = make(chan struct{})
		wg       sync.WaitGroup
	)
	fail := func(err error) { failure.CompareAndSwap(nil, err) }
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				case <-time.After(5 * time.Millisecond):
				}
				id := next.Add(1)
				sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
				err := snd.Send(sctx, goamqp.NewMessage([]byte(strconv.FormatInt(id, 10))), nil)
				scancel()
				if err != nil {
					fail(fmt.Errorf("send %d: %w", id, err))
					return
				}
				mu.Lock()
				acked[id] = true
				mu.Unlock()
			}
		}()
	}
	receive := func(wait time.Duration) error {
		rctx, rcancel := context.WithTimeout(ctx, wait)
		defer rcancel()
		m, err := rcv.Receive(rctx, nil)
		if err != nil {
			return err
		}
		if err := rcv.AcceptMessage(ctx, m); err != nil {
			return fmt.Errorf("complete: %w", err)
		}
		id, _ := strconv.ParseInt(string(m.GetData()), 10, 64)
		mu.Lock()
		received[id] = true
		mu.Unlock()
		return nil
	}
	recvDone := make(chan struct{})
	go func() {
		defer close(recvDone)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := receive(2 * time.Second); err != nil && ctx.Err() == nil && !strings.Contains(err.Error(), "deadline") {
				fail(fmt.Errorf("receive: %w", err))
				return
			}
		}
	}()

	table := func() *placementpb.RoutingTable {
		st, err := placement.WatchRoutes(ctx, &placementpb.WatchRoutesRequest{})
		if err != nil {
			t.Fatal(err)
		}
		tb, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		return tb
	}
	// settled waits until no group is moving, every usable node holds
	// between lo and hi replicas and the drained ones none; it returns the
	// loads.
	settled := func(what string, usable, drained []string, lo, hi int) map[string]int {
		start := time.Now()
		for {
			if err, _ := failure.Load().(error); err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			tb := table()
			load := map[string]int{}
			moving := false
			for _, g := range tb.Groups {
				moving = moving || g.MovingFrom != ""
				for _, r := range g.Replicas {
					load[r.NodeId]++
				}
			}
			ok := !moving
			for _, id := range usable {
				ok = ok && load[id] >= lo && load[id] <= hi
			}
			for _, id := range drained {
				ok = ok && load[id] == 0
			}
			if ok {
				t.Logf("%s after %v: %v", what, time.Since(start).Round(100*time.Millisecond), load)
				return load
			}
			if time.Since(start) > 2*time.Minute {
				t.Fatalf("%s: not settled after 2 min: %v (moving %v)", what, load, moving)
			}
			time.Sleep(250 * time.Millisecond)
		}
	}

	time.Sleep(2 * time.Second)
	for i := 3; i < total; i++ {
		startProcess(t, bin, nodeArgs(i)...)
	}
	settled("grown to 5", []string{"n1", "n2", "n3", "n4", "n5"}, nil, 1, 2)

	if _, err := placement.DrainNode(ctx, &placementpb.DrainNodeRequest{NodeId: "n5", Draining: true}); err != nil {
		t.Fatal(err)
	}
	settled("n5 drained", []string{"n1", "n2", "n3", "n4"}, []string{"n5"}, 2, 3)

	// Leaderships spread too: three groups over four usable nodes, one
	// each at most (the bootstrap left them wherever elections put them).
	start := time.Now()
	for {
		leads := map[string]int{}
		for _, g := range table().Groups {
			leads[g.LeaderId]++
		}
		if leads[""] == 0 && leads["n5"] == 0 && leads["n1"] <= 1 && leads["n2"] <= 1 && leads["n3"] <= 1 && leads["n4"] <= 1 {
			t.Logf("leaders spread after %v: %v", time.Since(start).Round(100*time.Millisecond), leads)
			break
		}
		if time.Since(start) > time.Minute {
			t.Fatalf("leaders not spread after a minute: %v", leads)
		}
		time.Sleep(250 * time.Millisecond)
	}

	close(stop)
	wg.Wait()
	<-recvDone
	if err, _ := failure.Load().(error); err != nil {
		t.Fatal(err)
	}
	for {
		mu.Lock()
		missing := 0
		for id := range acked {
			if !received[id] {
				missing++
			}
		}
		mu.Unlock()
		if missing == 0 {
			break
		}
		if err := receive(45 * time.Second); err != nil {
			t.Fatalf("%d acknowledged messages never received: %v", missing, err)
		}
	}
	t.Logf("%d messages sent and received while replicas moved", len(acked))
}
