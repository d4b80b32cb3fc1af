package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/quorumbus/quorumbus/cmd/quorumbus/cluster"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// keyedTryBound is what a keyed send's try (or any send's to a queue of
// one partition) may take, through the Go SDK, when its partition's group
// has lost its quorum: the front-end's wait on a partition that reads not
// serving (frontend unservedWait, 5 s),
// after what it takes to read so (a surviving leader's 1 s lease, or the
// router's 3 s attempt timeout at a leader that does not answer), and its
// poll; plus a loaded two-core machine's slack. Before it, the try took
// the whole send timeout, 30 s.
const keyedTryBound = 12 * time.Second

// TestKeyedSendsWithAGroupDown runs five `quorumbus node` processes (five
// partition groups of three replicas) and a `quorumbus frontend`, with a
// queue of five partitions, a session queue of five and a plain queue,
// and talks to them through the Go SDK with retries off, so that every
// error a try meets reaches the test:
//
//   - keyed sends (PartitionKey, and SessionId) to every partition, and
//     sends to the plain queue, go on without an error while the leader
//     of the plain queue's group is killed (kill -9) and restarted, and
//     while the next is paused (SIGSTOP) and goes on;
//   - with two replicas of that group killed, a keyed send to its
//     partition fails with the retriable timeout code within
//     keyedTryBound, a PartitionKey and a SessionId alike, and so does a
//     send to the plain queue, at once after the kill and later; unkeyed
//     sends, and keyed ones to the other partitions, succeed;
//   - once the two restart, those sends succeed again;
//   - every acknowledged message is received, and none twice (a send
//     that failed may have been stored, so it may be received or not).
func TestKeyedSendsWithAGroupDown(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	const nodes, parts = 5, 5
	pc := startProcessCluster(t, nodes)
	bin, grpcAddrs, nodeArgs, procs, amqpAddr := pc.bin, pc.grpcAddrs, pc.nodeArgs, pc.procs, pc.amqpAddr

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	queues := []cluster.QueueSpec{
		{Name: "pq", Props: &placementpb.QueueProperties{PartitionCount: parts, LockDurationMs: 30_000}},
		{Name: "ps", Props: &placementpb.QueueProperties{PartitionCount: parts, LockDurationMs: 30_000, RequiresSession: true}},
		{Name: "q", Props: &placementpb.QueueProperties{LockDurationMs: 30_000}},
	}
	if err := cluster.CreateQueues(ctx, grpcAddrs, nil, queues, quiet); err != nil {
		t.Fatal(err)
	}
	placement, closePlacement, err := cluster.DialPlacementMembers(grpcAddrs, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer closePlacement()
	entity := func(name string) *placementpb.Entity {
		for {
			e, err := placement.GetEntity(ctx, &placementpb.GetEntityRequest{Name: name})
			if err == nil {
				return e
			}
			if ctx.Err() != nil {
				t.Fatalf("get %s: %v", name, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	pq, ps, plain := entity("pq"), entity("ps"), entity("q")
	// The group that goes down: the plain queue's, which holds a
	// partition of each partitioned queue too (five partitions spread
	// over the five groups).
	group := plain.PartitionGroups[0]
	lostPQ, lostPS := slices.Index(pq.PartitionGroups, group), slices.Index(ps.PartitionGroups, group)
	if lostPQ < 0 || lostPS < 0 {
		t.Fatalf("q's group %d holds no partition of pq (on %v) or ps (on %v)", group, pq.PartitionGroups, ps.PartitionGroups)
	}
	var replicas []int // node indexes
	stream, err := placement.WatchRoutes(ctx, &placementpb.WatchRoutesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	table, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range table.Groups {
		if g.Id == group {
			for _, r := range g.Replicas {
				replicas = append(replicas, slices.Index(grpcAddrs, table.Nodes[slices.IndexFunc(table.Nodes, func(n *placementpb.Node) bool { return n.Id == r.NodeId })].GrpcAddr))
			}
		}
	}
	if len(replicas) != 3 || slices.Contains(replicas, -1) {
		t.Fatalf("group %d on nodes %v, want three", group, replicas)
	}
	t.Logf("group %d holds q, partition %d of pq and %d of ps, on nodes %v", group, lostPQ, lostPS, replicas)

	// strict sends with the SDK's retries off: the test sees every error.
	strict, err := azservicebus.NewClientFromConnectionString(cluster.ConnectionString(amqpAddr), &azservicebus.ClientOptions{
		RetryOptions: azservicebus.RetryOptions{MaxRetries: -1},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer strict.Close(context.Background())
	senders := map[string]*azservicebus.Sender{}
	for _, q := range []string{"pq", "ps", "q"} {
		if senders[q], err = strict.NewSender(q, nil); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	// sent: every body sent, true once acknowledged, by queue.
	sent := map[string]map[string]bool{"pq": {}, "ps": {}, "q": {}}
	// send sends one message to queue, keyed to partition p (a SessionId
	// on ps, a PartitionKey on pq) or unkeyed when p < 0 (always on q).
	seq := 0
	send := func(queue string, p int) (time.Duration, error) {
		mu.Lock()
		seq++
		body := fmt.Sprintf("%s-%d-%d", queue, p, seq)
		sent[queue][body] = false
		mu.Unlock()
		m := &azservicebus.Message{Body: []byte(body)}
		if p >= 0 {
			key := keyOfPartition(uint32(p), parts)
			if queue == "ps" {
				m.SessionID = &key
			} else {
				m.PartitionKey = &key
			}
		}
		sctx, scancel := context.WithTimeout(ctx, time.Minute)
		defer scancel()
		start := time.Now()
		err := senders[queue].SendMessage(sctx, m, nil)
		took := time.Since(start)
		if err == nil {
			mu.Lock()
			sent[queue][body] = true
			mu.Unlock()
		}
		return took, err
	}
	// Every group elected, and the front-end has the queues.
	for _, q := range []string{"pq", "ps", "q"} {
		for p := range parts {
			for {
				_, err := send(q, p)
				if err == nil {
					break
				}
				if ctx.Err() != nil {
					t.Fatalf("%s partition %d: %v", q, p, err)
				}
				time.Sleep(200 * time.Millisecond)
			}
		}
	}

	// Leader changes: keyed sends to every partition of both partitioned
	// queues, and sends to q, one at a time per queue, while the group's
	// leader is killed and restarted, then while the next one is paused
	// (SIGSTOP: the router's attempts at it get no answer until its
	// attempt timeout) and goes on. None may fail.
	phase := "kill"
	longest := map[string]time.Duration{} // by phase and queue; under mu
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, q := range []string{"pq", "ps", "q"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				p := i % parts
				if q == "q" {
					p = -1
				}
				took, err := send(q, p)
				mu.Lock()
				ph := phase
				longest[ph+" "+q] = max(longest[ph+" "+q], took)
				mu.Unlock()
				if err != nil {
					t.Errorf("%s: send to partition %d during the leader change (%s): %v", q, p, ph, err)
					return
				}
			}
		}()
	}
	time.Sleep(time.Second)
	leader := leaderIndex(t, ctx, grpcAddrs, group)
	procs[leader].kill9()
	t.Logf("killed n%d, the leader of group %d", leader+1, group)
	time.Sleep(6 * time.Second)
	procs[leader] = startProcess(t, bin, nodeArgs(leader)...)
	awaitReplica(t, ctx, grpcAddrs[leader], group)
	time.Sleep(2 * time.Second)
	mu.Lock()
	phase = "pause"
	mu.Unlock()
	leader = leaderIndex(t, ctx, grpcAddrs, group)
	procs[leader].signal(syscall.SIGSTOP)
	t.Logf("paused n%d, the leader of group %d", leader+1, group)
	time.Sleep(6 * time.Second)
	procs[leader].signal(syscall.SIGCONT)
	awaitReplica(t, ctx, grpcAddrs[leader], group)
	time.Sleep(2 * time.Second)
	close(stop)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("leader changes: sends without an error, the longest %v (pq), %v (ps) and %v (q) across the kill, %v, %v and %v across the pause",
		longest["kill pq"].Round(time.Millisecond), longest["kill ps"].Round(time.Millisecond), longest["kill q"].Round(time.Millisecond),
		longest["pause pq"].Round(time.Millisecond), longest["pause ps"].Round(time.Millisecond), longest["pause q"].Round(time.Millisecond))

	// The group down: two of its replicas killed.
	var victims []int
	for _, r := range replicas {
		if len(victims) < 2 {
			victims = append(victims, r)
		}
	}
	for _, v := range victims {
		procs[v].kill9()
	}
	// Every group with both among its replicas has lost its quorum.
	lost := map[uint64]bool{}
	for _, g := range table.Groups {
		lost[g.Id] = lostWith(g, victims)
	}
	t.Logf("killed n%d and n%d: group %d has no quorum (lost groups %v)", victims[0]+1, victims[1]+1, group, lost)
	wantTimeout := func(what string, took time.Duration, err error) {
		t.Helper()
		var sbErr *azservicebus.Error
		if !errors.As(err, &sbErr) || sbErr.Code != azservicebus.CodeTimeout {
			t.Fatalf("%s: %v after %v, want the SDK's retriable %q", what, err, took.Round(time.Millisecond), azservicebus.CodeTimeout)
		}
		if took > keyedTryBound {
			t.Errorf("%s failed after %v, more than %v", what, took.Round(time.Millisecond), keyedTryBound)
		}
		t.Logf("%s: %s after %v", what, sbErr.Code, took.Round(time.Millisecond))
	}
	for round, when := range []string{"at once after the kill", "again"} {
		// The three queues' sends run side by side, as three clients
		// would.
		type outcome struct {
			took time.Duration
			err  error
		}
		var pqOut, psOut, qOut outcome
		var all sync.WaitGroup
		all.Add(3)
		go func() { defer all.Done(); pqOut.took, pqOut.err = send("pq", lostPQ) }()
		go func() { defer all.Done(); psOut.took, psOut.err = send("ps", lostPS) }()
		go func() { defer all.Done(); qOut.took, qOut.err = send("q", -1) }()
		all.Wait()
		wantTimeout(fmt.Sprintf("PartitionKey send to pq partition %d, %s", lostPQ, when), pqOut.took, pqOut.err)
		wantTimeout(fmt.Sprintf("SessionId send to ps partition %d, %s", lostPS, when), psOut.took, psOut.err)
		wantTimeout(fmt.Sprintf("send to the plain queue q, %s", when), qOut.took, qOut.err)
		// The others go on: unkeyed sends, and keyed ones elsewhere.
		for i := range 10 {
			if _, err := send("pq", -1); err != nil {
				t.Fatalf("round %d: unkeyed send %d with group %d down: %v", round, i, group, err)
			}
		}
		for p := range parts {
			if lost[pq.PartitionGroups[p]] {
				continue
			}
			if _, err := send("pq", p); err != nil {
				t.Fatalf("keyed send to pq partition %d with group %d down: %v", p, group, err)
			}
		}
	}

	restarted := time.Now()
	for _, v := range victims {
		procs[v] = startProcess(t, bin, nodeArgs(v)...)
	}
	// The first sends may meet the group still electing; once one
	// succeeds, the next must too.
	for _, q := range []struct {
		queue string
		p     int
	}{{"pq", lostPQ}, {"ps", lostPS}, {"q", -1}} {
		failed := 0
		for {
			took, err := send(q.queue, q.p)
			if err == nil {
				break
			}
			var sbErr *azservicebus.Error
			if !errors.As(err, &sbErr) || sbErr.Code != azservicebus.CodeTimeout || time.Since(restarted) > time.Minute {
				t.Fatalf("%s partition %d after the restart: %v after %v", q.queue, q.p, err, took)
			}
			failed++
		}
		t.Logf("%s partition %d: a send succeeded %v after the restart, %d tries failed before", q.queue, q.p, time.Since(restarted).Round(time.Millisecond), failed)
		for i := range 5 {
			if _, err := send(q.queue, q.p); err != nil {
				t.Fatalf("%s partition %d: send %d after the group came back: %v", q.queue, q.p, i, err)
			}
		}
	}

	// Every acknowledged message received, none twice.
	type receiver interface {
		ReceiveMessages(context.Context, int, *azservicebus.ReceiveMessagesOptions) ([]*azservicebus.ReceivedMessage, error)
	}
	// drain receives what r holds into got, failing at a body never sent
	// or received twice.
	drain := func(queue string, r receiver, got map[string]bool) {
		t.Helper()
		for {
			rctx, rcancel := context.WithTimeout(ctx, 3*time.Second)
			msgs, err := r.ReceiveMessages(rctx, 100, nil)
			rcancel()
			if err != nil && !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("%s: receive: %v", queue, err)
			}
			if len(msgs) == 0 {
				return
			}
			for _, m := range msgs {
				body := string(m.Body)
				mu.Lock()
				_, ok := sent[queue][body]
				mu.Unlock()
				if !ok {
					t.Fatalf("%s: received %q, never sent", queue, body)
				}
				if got[body] {
					t.Fatalf("%s: received %q twice", queue, body)
				}
				got[body] = true
			}
		}
	}
	// check reports the acknowledged bodies of queue that got lacks.
	check := func(queue string, got map[string]bool) {
		t.Helper()
		mu.Lock()
		defer mu.Unlock()
		acked := 0
		for body, ok := range sent[queue] {
			if ok {
				acked++
				if !got[body] {
					t.Errorf("%s: %q acknowledged and never received", queue, body)
				}
			}
		}
		t.Logf("%s: %d received, %d acknowledged, %d sent", queue, len(got), acked, len(sent[queue]))
	}
	var got map[string]bool
	for _, q := range []string{"pq", "q"} {
		rcv, err := strict.NewReceiverForQueue(q, &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
		if err != nil {
			t.Fatal(err)
		}
		got = map[string]bool{}
		drain(q, rcv, got)
		check(q, got)
	}
	got = map[string]bool{}
	for p := range parts {
		sr, err := strict.AcceptSessionForQueue(ctx, "ps", keyOfPartition(uint32(p), parts), &azservicebus.SessionReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
		if err != nil {
			t.Fatalf("accept session of partition %d: %v", p, err)
		}
		drain("ps", sr, got)
		sr.Close(ctx)
	}
	check("ps", got)
}

// awaitReplica waits until the node at addr hosts group and knows its
// leader: it answers a Stats call of the group as the leader (of no
// entity: not found), or refuses it naming one.
func awaitReplica(t *testing.T, ctx context.Context, addr string, group uint64) {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	for {
		sctx, scancel := context.WithTimeout(ctx, time.Second)
		_, err := partitionpb.NewPartitionServiceClient(cc).Stats(sctx, &partitionpb.StatsRequest{GroupId: group})
		scancel()
		st, _ := status.FromError(err)
		switch st.Code() {
		case codes.OK:
			return
		case codes.NotFound: // the leader's answer about entity 0, unless it has no such group yet
			if !strings.Contains(st.Message(), "group not found") {
				return
			}
		case codes.FailedPrecondition:
			for _, d := range st.Details() {
				if h, ok := d.(*partitionpb.LeaderHint); ok && h.LeaderId != "" {
					return
				}
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("%s never knew a leader of group %d: %v", addr, group, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
