package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"

	"github.com/quorumbus/quorumbus/cmd/quorumbus/cluster"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// TestPartitionedQueueWithAGroupDown runs five `quorumbus node` processes
// with five partition groups of three replicas and a front-end, and a queue
// of five partitions, one in each group. It kills -9 two nodes, which takes
// the quorum of at least one group, while the meta group (all five nodes)
// keeps its own. Then:
//   - the queue reads Degraded in the catalog;
//   - unkeyed sends go on, each accepted at its first attempt (go-amqp does
//     not retry): the front-end passes over the partitions without quorum;
//   - once the two nodes restart, the queue reads Active again;
//   - every acknowledged message is received.
func TestPartitionedQueueWithAGroupDown(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	const nodes = 5
	bin := buildBinary(t)
	dir := t.TempDir()
	grpcAddrs := freeAddrs(t, nodes)
	gossipAddrs := freeAddrs(t, nodes)
	var boot []string
	for i := range nodes {
		boot = append(boot, fmt.Sprintf("n%d=%s", i+1, grpcAddrs[i]))
	}
	nodeArgs := func(i int) []string {
		return []string{"node", "-plain-cluster", "-id", fmt.Sprintf("n%d", i+1), "-data", filepath.Join(dir, fmt.Sprintf("n%d", i+1)),
			"-grpc-addr", grpcAddrs[i], "-gossip-addr", gossipAddrs[i], "-join", strings.Join(gossipAddrs, ","),
			"-bootstrap", strings.Join(boot, ","), "-groups", "5", "-replicas", "3", "-log-level", "error",
			"-cache-mb", "8", "-wal-segment-mb", "4"}
	}
	procs := make([]*process, nodes)
	for i := range nodes {
		procs[i] = startProcess(t, bin, nodeArgs(i)...)
	}
	amqpAddr := freeAddrs(t, 1)[0]
	startFrontendProcess(t, bin, dir, amqpAddr, grpcAddrs)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	props := &placementpb.QueueProperties{PartitionCount: 5, LockDurationMs: 30_000}
	if err := cluster.CreateQueues(ctx, grpcAddrs, nil, []cluster.QueueSpec{{Name: "pq", Props: props}}, quiet); err != nil {
		t.Fatal(err)
	}
	placement, closePlacement, err := cluster.DialPlacement(grpcAddrs[0], nil) // n1 stays up
	if err != nil {
		t.Fatal(err)
	}
	defer closePlacement()
	entity := func() *placementpb.Entity {
		for {
			e, err := placement.GetEntity(ctx, &placementpb.GetEntityRequest{Name: "pq"})
			if err == nil {
				return e
			}
			if ctx.Err() != nil {
				t.Fatalf("get pq: %v", err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	e := entity()
	if got := slices.Compact(slices.Sorted(slices.Values(e.PartitionGroups))); len(got) != 5 {
		t.Fatalf("5 partitions on groups %v, want one per group", e.PartitionGroups)
	}

	// Two nodes that share a group, neither of them n1: the group loses
	// its quorum with them.
	stream, err := placement.WatchRoutes(ctx, &placementpb.WatchRoutesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	table, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var victims []int
	for _, g := range table.Groups {
		var idx []int
		for _, r := range g.Replicas {
			i, _ := strconv.Atoi(strings.TrimPrefix(r.NodeId, "n"))
			if i != 1 {
				idx = append(idx, i-1)
			}
		}
		if len(idx) >= 2 {
			victims = idx[:2]
			break
		}
	}
	if victims == nil {
		t.Fatalf("no group without n1 among two of its replicas: %v", table.Groups)
	}

	conn := dialUntil(t, ctx, amqpAddr)
	sess, err := conn.NewSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	snd := senderUntil(t, ctx, sess, "pq")
	sent := map[string]bool{}
	send := func(n int, phase string) {
		for range n {
			body := fmt.Sprintf("m%d", len(sent))
			sctx, scancel := context.WithTimeout(ctx, 15*time.Second)
			err := snd.Send(sctx, goamqp.NewMessage([]byte(body)), nil)
			scancel()
			if err != nil {
				st, _ := placement.WatchRoutes(ctx, &placementpb.WatchRoutesRequest{})
				tb, _ := st.Recv()
				t.Fatalf("%s: send %s: %v\nentity %v\ngroups %v", phase, body, err, entity(), tb.GetGroups())
			}
			sent[body] = true
		}
	}
	placementWait := func(what string, want bool) time.Duration {
		start := time.Now()
		for entity().Degraded != want {
			if ctx.Err() != nil || time.Since(start) > time.Minute {
				t.Fatalf("pq never became %s", what)
			}
			time.Sleep(100 * time.Millisecond)
		}
		return time.Since(start)
	}
	placementWait("active", false)
	send(10, "before")

	for _, i := range victims {
		procs[i].kill9()
	}
	killed := time.Now()
	took := placementWait("degraded", true)
	t.Logf("killed n%d and n%d: degraded after %v", victims[0]+1, victims[1]+1, time.Since(killed).Round(time.Millisecond))
	_ = took
	// Every group with both victims among its replicas has lost its
	// quorum; the catalog records each once it has been silent (its
	// leader may have been a survivor, which steps down only when its
	// lease runs out). Unkeyed sends avoid the groups the catalog records.
	lost := func(g *placementpb.Group) bool {
		n := 0
		for _, r := range g.Replicas {
			for _, v := range victims {
				if r.NodeId == fmt.Sprintf("n%d", v+1) {
					n++
				}
			}
		}
		return n >= 2
	}
	for recorded := false; !recorded; {
		st, err := placement.WatchRoutes(ctx, &placementpb.WatchRoutesRequest{})
		if err != nil {
			t.Fatal(err)
		}
		tb, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		recorded = true
		for _, g := range tb.Groups {
			if lost(g) && g.HasQuorum {
				recorded = false
			}
		}
		if ctx.Err() != nil {
			t.Fatal("the catalog never recorded every group without quorum")
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(time.Second) // the front-end's routing table follows the catalog
	send(30, "degraded")

	for _, i := range victims {
		procs[i] = startProcess(t, bin, nodeArgs(i)...)
	}
	restarted := time.Now()
	placementWait("active again", false)
	t.Logf("restarted: active after %v", time.Since(restarted).Round(time.Millisecond))

	rcv, err := sess.NewReceiver(ctx, "pq", &goamqp.ReceiverOptions{Credit: 100, SettlementMode: goamqp.ReceiverSettleModeSecond.Ptr()})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for len(got) < len(sent) {
		rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
		m, err := rcv.Receive(rctx, nil)
		rcancel()
		if err != nil {
			t.Fatalf("received %d of %d: %v", len(got), len(sent), err)
		}
		if err := rcv.AcceptMessage(ctx, m); err != nil {
			t.Fatal(err)
		}
		body := string(m.GetData())
		if !sent[body] {
			t.Fatalf("received %q, never sent", body)
		}
		got[body] = true
	}
}
