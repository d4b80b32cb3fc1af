package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"

	"github.com/quorumbus/quorumbus/cmd/quorumbus/cluster"
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
	scaleRun(t, scalePlan{nodes: 5, groups: 3, queues: map[string]uint32{"grow": 3}, grow: 5, drain: []int{5}})
}

// TestDeadNodeReplaced starts four `quorumbus node` processes with
// -gone-after 5s and a front-end, sends and receives continuously on a
// queue of three partitions, and kill -9s the fourth node once it holds
// its share of the replicas. Five seconds after gossip finds it dead, the
// meta leader re-creates its replicas on the three others from the
// surviving replicas, until no group lists it. No send or receive may
// fail meanwhile, and every acknowledged message must be received.
func TestDeadNodeReplaced(t *testing.T) {
	scaleRun(t, scalePlan{nodes: 4, groups: 3, queues: map[string]uint32{"dead": 3}, grow: 4, kill: []int{4}, goneAfter: 5 * time.Second})
}

// TestScaleSevenAndBack is `make scale`: three nodes grown to seven and
// drained back to three, one node at a time, with two queues of 16
// partitions under load, reporting how long moves took and the longest
// time without an acknowledged send. It runs only with QUORUMBUS_SCALE=1.
func TestScaleSevenAndBack(t *testing.T) {
	if os.Getenv("QUORUMBUS_SCALE") == "" {
		t.Skip("QUORUMBUS_SCALE=1 (make scale) runs it")
	}
	scaleRun(t, scalePlan{nodes: 7, groups: 7, queues: map[string]uint32{"scale-a": 16, "scale-b": 16}, grow: 7, drain: []int{7, 6, 5, 4},
		timeout: 15 * time.Minute})
}

// scalePlan: start 3 of nodes, create groups and the queues (name →
// partitions), start the others up to grow, then drain the listed nodes
// (1-based) one after another, stopping each once it is empty; then kill
// -9 the nodes of kill one after another, each once the replicas it held
// are re-created elsewhere (with goneAfter, the nodes' -gone-after).
type scalePlan struct {
	nodes, groups, grow int
	queues              map[string]uint32
	drain, kill         []int
	goneAfter           time.Duration
	timeout             time.Duration
}

func scaleRun(t *testing.T, plan scalePlan) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	if plan.timeout == 0 {
		plan.timeout = 4 * time.Minute
	}
	bin := buildBinary(t)
	dir := t.TempDir()
	// The three that bootstrap get their ports now, since each names
	// the others; those that join later pick theirs as they start
	// (startLateNode).
	ports := make([]nodePorts, plan.nodes)
	grpcAddrs, gossipAddrs, httpAddrs := freeAddrs(t, 3), freeAddrs(t, 3), freeAddrs(t, 3)
	var boot []string
	for i := range 3 {
		ports[i] = nodePorts{grpc: grpcAddrs[i], gossip: gossipAddrs[i], http: httpAddrs[i]}
		boot = append(boot, fmt.Sprintf("n%d=%s", i+1, grpcAddrs[i]))
	}
	nodeArgs := func(i int, at nodePorts) []string {
		args := []string{"node", "-plain-cluster", "-id", fmt.Sprintf("n%d", i+1), "-data", filepath.Join(dir, fmt.Sprintf("n%d", i+1)),
			"-grpc-addr", at.grpc, "-gossip-addr", at.gossip, "-join", strings.Join(gossipAddrs, ","),
			"-http-addr", at.http, "-groups", strconv.Itoa(plan.groups), "-log-level", "error", "-cache-mb", "8", "-wal-segment-mb", "4"}
		if i < 3 {
			args = append(args, "-bootstrap", strings.Join(boot, ","))
		}
		if plan.goneAfter != 0 {
			args = append(args, "-gone-after", plan.goneAfter.String())
		}
		return args
	}
	procs := make([]*process, plan.nodes)
	for i := range 3 {
		procs[i] = startProcess(t, bin, nodeArgs(i, ports[i])...)
	}
	// stopped are the nodes the test stops itself; any other that exits
	// fails the test at once, naming it, rather than after settled's
	// three minutes.
	stopped := make([]bool, plan.nodes)
	checkRunning := func(what string) {
		for i, p := range procs {
			if p != nil && !stopped[i] && p.exited() {
				t.Fatalf("%s: node n%d exited: %v", what, i+1, p.cmd.ProcessState)
			}
		}
	}
	amqpAddr := freeAddrs(t, 1)[0]
	startFrontendProcess(t, bin, dir, amqpAddr, grpcAddrs[:3])

	ctx, cancel := context.WithTimeout(context.Background(), plan.timeout)
	defer cancel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	var specs []cluster.QueueSpec
	names := slices.Sorted(func(yield func(string) bool) {
		for n := range plan.queues {
			if !yield(n) {
				return
			}
		}
	})
	for _, name := range names {
		specs = append(specs, cluster.QueueSpec{Name: name, Props: &placementpb.QueueProperties{PartitionCount: plan.queues[name], LockDurationMs: 30_000}})
	}
	if err := cluster.CreateQueues(ctx, grpcAddrs[:3], nil, specs, quiet); err != nil {
		t.Fatal(err)
	}
	placement, closePlacement, err := cluster.DialPlacement(grpcAddrs[0], nil)
	if err != nil {
		t.Fatal(err)
	}
	defer closePlacement()

	conn := dialUntil(t, ctx, amqpAddr)
	var (
		mu         sync.Mutex
		acked      = map[string]bool{}
		received   = map[string]bool{}
		next       atomic.Int64
		failure    atomic.Value
		lastAck    atomic.Int64
		longestGap atomic.Int64
		stop       = make(chan struct{})
		wg         sync.WaitGroup
	)
	lastAck.Store(time.Now().UnixNano())
	fail := func(err error) { failure.CompareAndSwap(nil, err) }
	type receiver struct {
		rcv  *goamqp.Receiver
		name string
	}
	var rcvs []receiver
	for _, name := range names {
		sess, err := conn.NewSession(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		snd := senderUntil(t, ctx, sess, name)
		rcv, err := sess.NewReceiver(ctx, name, &goamqp.ReceiverOptions{Credit: 200, SettlementMode: goamqp.ReceiverSettleModeSecond.Ptr()})
		if err != nil {
			t.Fatal(err)
		}
		rcvs = append(rcvs, receiver{rcv, name})
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
					id := name + "/" + strconv.FormatInt(next.Add(1), 10)
					sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
					err := snd.Send(sctx, goamqp.NewMessage([]byte(id)), nil)
					scancel()
					if err != nil {
						fail(fmt.Errorf("send %s: %w", id, err))
						return
					}
					mu.Lock()
					acked[id] = true
					mu.Unlock()
					now := time.Now().UnixNano()
					if gap := now - lastAck.Swap(now); gap > longestGap.Load() {
						longestGap.Store(gap) // racy max: a figure, not a check
					}
				}
			}()
		}
	}
	receive := func(r receiver, wait time.Duration) error {
		rctx, rcancel := context.WithTimeout(ctx, wait)
		defer rcancel()
		m, err := r.rcv.Receive(rctx, nil)
		if err != nil {
			return err
		}
		if err := r.rcv.AcceptMessage(ctx, m); err != nil {
			return fmt.Errorf("complete: %w", err)
		}
		mu.Lock()
		received[string(m.GetData())] = true
		mu.Unlock()
		return nil
	}
	var recvWG sync.WaitGroup
	for _, r := range rcvs {
		recvWG.Add(1)
		go func() {
			defer recvWG.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if err := receive(r, 2*time.Second); err != nil && ctx.Err() == nil && !strings.Contains(err.Error(), "deadline") {
					fail(fmt.Errorf("receive %s: %w", r.name, err))
					return
				}
			}
		}()
	}

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
	// Move durations as the routing table shows them (polled).
	var moveTimes []time.Duration
	movingSince := map[uint64]time.Time{}
	// settled waits until no group is moving, the usable nodes hold as
	// many replicas as each other, give or take one, and the drained (or
	// dead) ones none.
	settled := func(what string, usable, drained []string) {
		start := time.Now()
		for {
			if err, _ := failure.Load().(error); err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			checkRunning(what)
			tb := table()
			load := map[string]int{}
			moving := false
			now := time.Now()
			total := 0
			for _, g := range tb.Groups {
				if g.MovingFrom != "" {
					moving = true
					if _, ok := movingSince[g.Id]; !ok {
						movingSince[g.Id] = now
					}
				} else if since, ok := movingSince[g.Id]; ok {
					moveTimes = append(moveTimes, now.Sub(since))
					delete(movingSince, g.Id)
				}
				for _, r := range g.Replicas {
					load[r.NodeId]++
					total++
				}
			}
			lo, hi := total/len(usable), (total+len(usable)-1)/len(usable)
			ok := !moving
			for _, id := range usable {
				ok = ok && load[id] >= lo && load[id] <= hi
			}
			for _, id := range drained {
				ok = ok && load[id] == 0
			}
			if ok {
				t.Logf("%s after %v: %v", what, time.Since(start).Round(100*time.Millisecond), load)
				return
			}
			if time.Since(start) > 3*time.Minute {
				t.Fatalf("%s: not settled after 3 min: %v (moving %v)", what, load, moving)
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
	ids := func(from, to int) []string {
		var out []string
		for i := from; i <= to; i++ {
			out = append(out, fmt.Sprintf("n%d", i))
		}
		return out
	}

	time.Sleep(2 * time.Second)
	for i := 3; i < plan.grow; i++ {
		procs[i], ports[i] = startLateNode(t, bin, func(at nodePorts) []string { return nodeArgs(i, at) })
	}
	settled(fmt.Sprintf("grown to %d", plan.grow), ids(1, plan.grow), nil)
	// The nodes that joined are no members of the meta group, yet ready:
	// their groups serve and they have the routing table.
	for i := 3; i < plan.grow; i++ {
		start := time.Now()
		for {
			resp, err := http.Get("http://" + ports[i].http + "/readyz")
			if err == nil {
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
				err = fmt.Errorf("%s: %s", resp.Status, body)
			}
			if time.Since(start) > 30*time.Second {
				t.Fatalf("n%d, which joined, is not ready: %v", i+1, err)
			}
			time.Sleep(250 * time.Millisecond)
		}
	}

	var drained []string
	usable := ids(1, plan.grow)
	for _, n := range plan.drain {
		id := fmt.Sprintf("n%d", n)
		if _, err := placement.DrainNode(ctx, &placementpb.DrainNodeRequest{NodeId: id, Draining: true}); err != nil {
			t.Fatal(err)
		}
		usable = slices.DeleteFunc(usable, func(u string) bool { return u == id })
		drained = append(drained, id)
		settled(id+" drained", usable, drained)
		if len(plan.drain) > 1 {
			stopped[n-1] = true
			procs[n-1].signal(syscall.SIGTERM) // drained: it may go
		}
	}
	for _, n := range plan.kill {
		id := fmt.Sprintf("n%d", n)
		stopped[n-1] = true
		procs[n-1].kill9()
		usable = slices.DeleteFunc(usable, func(u string) bool { return u == id })
		drained = append(drained, id)
		settled(id+" dead and its replicas re-created", usable, drained)
	}

	// Leaderships spread too: no node leads two groups more than another.
	start := time.Now()
	for {
		leads := map[string]int{}
		for _, g := range table().Groups {
			leads[g.LeaderId]++
		}
		most, least := 0, 1<<30
		for _, id := range usable {
			most, least = max(most, leads[id]), min(least, leads[id])
		}
		bad := leads[""] > 0
		for _, id := range drained {
			bad = bad || leads[id] > 0
		}
		if !bad && most-least <= 1 {
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
	recvWG.Wait()
	if err, _ := failure.Load().(error); err != nil {
		t.Fatal(err)
	}
	for _, r := range rcvs {
		for {
			mu.Lock()
			missing := 0
			for id := range acked {
				if strings.HasPrefix(id, r.name+"/") && !received[id] {
					missing++
				}
			}
			mu.Unlock()
			if missing == 0 {
				break
			}
			if err := receive(r, 45*time.Second); err != nil {
				t.Fatalf("%s: %d acknowledged messages never received: %v", r.name, missing, err)
			}
		}
	}
	slices.Sort(moveTimes)
	var longest time.Duration
	if len(moveTimes) > 0 {
		longest = moveTimes[len(moveTimes)-1]
	}
	t.Logf("%d messages sent and received while replicas moved; %d moves seen, longest %v; longest time without an acknowledged send %v",
		len(acked), len(moveTimes), longest.Round(100*time.Millisecond), time.Duration(longestGap.Load()).Round(time.Millisecond))
}
