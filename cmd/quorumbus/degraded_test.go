package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"
	"google.golang.org/grpc/metadata"

	"github.com/quorumbus/quorumbus/cmd/quorumbus/cluster"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// TestPartitionedQueueWithAGroupDown runs five `quorumbus node` processes
// with five partition groups of three replicas and a front-end, and a queue
// of five partitions, one in each group. It kills -9 two nodes, the meta
// leader and another replica of one of its groups, which takes the quorum
// of at least one group, while the meta group (all five nodes) keeps its
// own and elects another leader. Then:
//   - the queue reads Degraded in the catalog within 5 s of the kill, as
//     issue 24 requires, although the meta leader that watched the
//     group's health died with it;
//   - unkeyed sends go on, each accepted at its first attempt (go-amqp does
//     not retry), from the kill on: before the catalog records the lost
//     groups, a send that tries one goes on to another partition, and
//     after, the front-end passes over them;
//   - a keyed send to a partition of a lost group fails with
//     com.microsoft:timeout, which the SDKs retry;
//   - once the two nodes restart, the queue reads Active again within 10 s
//     of their start;
//   - every acknowledged message is received.
//
// The two bounds are the requirements, so they are checked,
// against the rule that tests do not assert timings.
func TestPartitionedQueueWithAGroupDown(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	const nodes = 5
	pc := startProcessCluster(t, nodes)
	bin, grpcAddrs, nodeArgs, procs, amqpAddr := pc.bin, pc.grpcAddrs, pc.nodeArgs, pc.procs, pc.amqpAddr

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	props := &placementpb.QueueProperties{PartitionCount: 5, LockDurationMs: 30_000}
	if err := cluster.CreateQueues(ctx, grpcAddrs, nil, []cluster.QueueSpec{{Name: "pq", Props: props}}, quiet); err != nil {
		t.Fatal(err)
	}
	// The victims: the meta leader and another replica of a group it
	// holds a replica of. The group loses its quorum with them.
	leader := metaLeader(t, ctx, grpcAddrs)
	first, closeFirst, err := cluster.DialPlacement(grpcAddrs[leader], nil)
	if err != nil {
		t.Fatal(err)
	}
	defer closeFirst()
	stream, err := first.WatchRoutes(ctx, &placementpb.WatchRoutesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	table, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	victims := []int{leader}
	for _, g := range table.Groups {
		if !slices.ContainsFunc(g.Replicas, func(r *placementpb.Replica) bool { return r.NodeId == fmt.Sprintf("n%d", leader+1) }) {
			continue
		}
		for _, r := range g.Replicas {
			i, _ := strconv.Atoi(strings.TrimPrefix(r.NodeId, "n"))
			if i-1 != leader {
				victims = append(victims, i-1)
				break
			}
		}
		break
	}
	if len(victims) != 2 {
		t.Fatalf("no group with n%d, the meta leader, among its replicas: %v", leader+1, table.Groups)
	}
	keeper := 0 // a node that stays up, to ask placement through
	for slices.Contains(victims, keeper) {
		keeper++
	}
	placement, closePlacement, err := cluster.DialPlacement(grpcAddrs[keeper], nil)
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

	conn := dialUntil(t, ctx, amqpAddr)
	sess, err := conn.NewSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	snd := senderUntil(t, ctx, sess, "pq")
	var sentMu sync.Mutex
	sent := map[string]bool{}
	// sendOne sends one unkeyed message and reports how long it took;
	// it may run beside other sends.
	sendOne := func(phase string) time.Duration {
		sentMu.Lock()
		body := fmt.Sprintf("m%d", len(sent))
		sent[body] = false // taken; true once acknowledged
		sentMu.Unlock()
		start := time.Now()
		sctx, scancel := context.WithTimeout(ctx, 15*time.Second)
		err := snd.Send(sctx, goamqp.NewMessage([]byte(body)), nil)
		scancel()
		if err != nil {
			st, _ := placement.WatchRoutes(ctx, &placementpb.WatchRoutesRequest{})
			tb, _ := st.Recv()
			t.Errorf("%s: send %s: %v\nentity %v\ngroups %v", phase, body, err, entity(), tb.GetGroups())
			return 0
		}
		sentMu.Lock()
		sent[body] = true
		sentMu.Unlock()
		return time.Since(start)
	}
	send := func(n int, phase string) {
		for range n {
			sendOne(phase)
			if t.Failed() {
				t.FailNow()
			}
		}
	}
	// placementWait waits until pq reads degraded (or not) and returns
	// how long that took since start; it checks that it took no longer
	// than bound, but waits up to a minute to say how long it did take.
	placementWait := func(what string, want bool, start time.Time, bound time.Duration) time.Duration {
		for entity().Degraded != want {
			if ctx.Err() != nil || time.Since(start) > time.Minute {
				t.Fatalf("pq never became %s", what)
			}
			time.Sleep(100 * time.Millisecond)
		}
		took := time.Since(start)
		if took > bound {
			t.Errorf("pq became %s after %v, more than %v", what, took.Round(time.Millisecond), bound)
		}
		return took
	}
	placementWait("active", false, time.Now(), time.Minute)
	send(10, "before")

	// A partition of a group that loses its quorum with the victims, and
	// a key of it.
	lostPartition := -1
	for p, id := range e.PartitionGroups {
		for _, g := range table.Groups {
			if g.Id == id && lostWith(g, victims) {
				lostPartition = p
			}
		}
	}
	if lostPartition < 0 {
		t.Fatalf("no partition of pq in a group of both victims: %v", table.Groups)
	}
	lostKey := keyOfPartition(uint32(lostPartition), uint32(len(e.PartitionGroups)))

	for _, i := range victims {
		procs[i].kill9()
	}
	killed := time.Now()
	// Unkeyed sends from the kill on, until the catalog has recorded
	// every lost group and a second more: the seconds in which the lost
	// groups still read well and a send may try one.
	caughtUp := make(chan struct{})
	var early sync.WaitGroup
	stopEarly := sync.OnceFunc(func() { close(caughtUp); early.Wait() })
	defer stopEarly() // a failure below ends the test before the sends
	var earlyCount int
	var earlyLongest time.Duration
	early.Add(1)
	go func() {
		defer early.Done()
		for {
			select {
			case <-caughtUp:
				return
			default:
			}
			took := sendOne("right after the kill")
			if t.Failed() {
				return
			}
			earlyCount++
			earlyLongest = max(earlyLongest, took)
		}
	}()
	// A keyed send to the lost partition fails, retriably, once the
	// front-end gave up on its group (5 s after the partition read not
	// serving: TestKeyedSendsWithAGroupDown); it must end
	// before the victims restart, which would let it succeed.
	keyedDone := make(chan error, 1)
	go func() {
		m := goamqp.NewMessage([]byte("keyed"))
		m.Annotations = goamqp.Annotations{"x-opt-partition-key": lostKey}
		sctx, scancel := context.WithTimeout(ctx, time.Minute)
		defer scancel()
		keyedDone <- snd.Send(sctx, m, nil)
	}()
	took := placementWait("degraded", true, killed, 5*time.Second)
	t.Logf("killed n%d (the meta leader) and n%d: degraded after %v", victims[0]+1, victims[1]+1, took.Round(time.Millisecond))
	// Every group with both victims among its replicas has lost its
	// quorum; the catalog records each once it has been silent (its
	// leader may have been a survivor, which steps down only when its
	// lease runs out). Unkeyed sends avoid the groups the catalog records.
	lost := func(g *placementpb.Group) bool { return lostWith(g, victims) }
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
	stopEarly()
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("%d unkeyed sends from the kill until the catalog recorded the lost groups, the longest %v", earlyCount, earlyLongest.Round(time.Millisecond))
	send(30, "degraded")
	err = <-keyedDone
	var ae *goamqp.Error
	if !errors.As(err, &ae) || ae.Condition != "com.microsoft:timeout" {
		t.Fatalf("keyed send to partition %d, whose group lost its quorum: %v; want com.microsoft:timeout", lostPartition, err)
	}
	t.Logf("keyed send to the lost partition %d failed after %v: %s", lostPartition, time.Since(killed).Round(time.Second), ae.Condition)

	restarted := time.Now()
	for _, i := range victims {
		procs[i] = startProcess(t, bin, nodeArgs(i)...)
	}
	took = placementWait("active again", false, restarted, 10*time.Second)
	t.Logf("restarted: active after %v", took.Round(time.Millisecond))

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
		if body == "keyed" {
			// Refused with a timeout, which says it may have been
			// stored: its leader may have proposed it before it lost
			// the quorum, and a restarted victim can commit it.
			continue
		}
		if !sent[body] {
			t.Fatalf("received %q, never sent", body)
		}
		got[body] = true
	}
}

// metaLeader returns the index of the node whose placement member leads
// the meta group: the one that takes a (empty) report marked as forwarded
// already, which a follower refuses rather than forwarding it again.
func metaLeader(t *testing.T, ctx context.Context, addrs []string) int {
	t.Helper()
	fctx := metadata.AppendToOutgoingContext(ctx, "x-quorumbus-placement-forwarded", "test")
	for {
		for i, addr := range addrs {
			c, closeC, err := cluster.DialPlacement(addr, nil)
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.ReportGroups(fctx, &placementpb.ReportGroupsRequest{NodeId: "test"})
			closeC()
			if err == nil {
				return i
			}
		}
		if ctx.Err() != nil {
			t.Fatal("no meta leader")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// lostWith reports whether g has two replicas among the victims (node
// indexes): with three replicas, it lost its quorum when they died.
func lostWith(g *placementpb.Group, victims []int) bool {
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

// keyOfPartition returns a partition key that puts a message in partition
// p of n.
func keyOfPartition(p, n uint32) string {
	for i := 0; ; i++ {
		if k := fmt.Sprint("key-", i); partitionpb.PartitionForKey(k, n) == p {
			return k
		}
	}
}
