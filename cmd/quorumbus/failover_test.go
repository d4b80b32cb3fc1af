package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/quorumbus/quorumbus/cmd/quorumbus/cluster"
	"github.com/quorumbus/quorumbus/placement/sas"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// TestFailoverKillLeader runs the cluster as separate processes — three
// `quorumbus node` and one `quorumbus frontend` — sends continuously, and
// kill -9s the leader of the queue's partition group. Every acknowledged
// message must be received afterwards, the senders must see no error, and
// the killed node must rejoin and catch up: after it restarts, the test
// kills the next leader too, so the cluster only has a quorum if the
// restarted node holds the log.
//
// Between the two kills it pauses a leader (SIGSTOP) for six seconds and
// then lets it go on (SIGCONT), as a frozen virtual machine would
// (a known pitfall: a leader that wakes up believing it still leads).
// The others elect one of their own;
// the front-end, whose requests to the paused node get no answer, must
// give up on them and retry at the new leader, so that sends go on during
// the pause. None may be acknowledged by the paused node alone. Before
// that it pauses a follower for three seconds, which the leader must
// commit without. Each phase logs the longest stretch without an
// acknowledged send (docs/performance.md gathers them).
func TestFailoverKillLeader(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	bin := buildBinary(t)
	dir := t.TempDir()
	grpcAddrs := freeAddrs(t, 3)
	gossipAddrs := freeAddrs(t, 3)
	var boot []string
	for i := range 3 {
		boot = append(boot, fmt.Sprintf("n%d=%s", i+1, grpcAddrs[i]))
	}
	nodeArgs := func(i int) []string {
		return []string{"node", "-plain-cluster", "-id", fmt.Sprintf("n%d", i+1), "-data", filepath.Join(dir, fmt.Sprintf("n%d", i+1)),
			"-grpc-addr", grpcAddrs[i], "-gossip-addr", gossipAddrs[i], "-join", strings.Join(gossipAddrs, ","),
			"-bootstrap", strings.Join(boot, ","), "-log-level", "error"}
	}
	procs := make([]*process, 3)
	for i := range 3 {
		procs[i] = startProcess(t, bin, nodeArgs(i)...)
	}
	amqpAddr := freeAddrs(t, 1)[0]
	startFrontendProcess(t, bin, dir, amqpAddr, grpcAddrs)

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	// A lock of 20 s rather than the default minute. A retried receive
	// gets back what its lost Lock locked (request ids), but a receive the
	// front-end gives up on mid-call (a slow -race run can lose its leader
	// at any time) still leaves its messages locked to nobody until the
	// lock expires, as a receiver that died would. They must come back
	// within the receive wait below (receiveWait). The lock still outlasts
	// what the receiver prefetches (1,000 messages, completed one at a
	// time).
	props := &placementpb.QueueProperties{LockDurationMs: 20_000}
	if err := cluster.CreateQueues(ctx, grpcAddrs, nil, []cluster.QueueSpec{{Name: "fo", Props: props}}, quiet); err != nil {
		t.Fatal(err)
	}
	group := queueGroup(t, ctx, grpcAddrs[0], "fo")

	conn := dialUntil(t, ctx, amqpAddr)
	sess, err := conn.NewSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	snd := senderUntil(t, ctx, sess, "fo")

	// Producers: each message body is a unique number; acked collects the
	// numbers whose send was acknowledged.
	var acked sync.Map
	var next, sendErrors, acks atomic.Int64
	// lastAck and longestGap (Unix nanoseconds, nanoseconds) measure the
	// longest stretch without an acknowledged send in each phase: how long
	// sends stalled across a kill or a pause. Logged, not asserted.
	var lastAck, longestGap atomic.Int64
	// worstWait is the longest any one send took in the phase: how long
	// the unluckiest sender stalled.
	var worstWait atomic.Int64
	var firstErr atomic.Value
	produce := func(stop <-chan struct{}) *sync.WaitGroup {
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					id := next.Add(1)
					t0 := time.Now()
					err := snd.Send(ctx, goamqp.NewMessage([]byte(strconv.FormatInt(id, 10))), nil)
					if wait := int64(time.Since(t0)); wait > worstWait.Load() {
						worstWait.Store(wait) // racy max, as below
					}
					if err != nil {
						sendErrors.Add(1)
						firstErr.CompareAndSwap(nil, err)
						return
					}
					acked.Store(id, true)
					acks.Add(1)
					now := time.Now().UnixNano()
					if gap := now - lastAck.Swap(now); gap > longestGap.Load() {
						longestGap.Store(gap) // racy max: a log figure, not a check
					}
				}
			}()
		}
		return &wg
	}
	phase := func(name string, d time.Duration, during func()) {
		stop := make(chan struct{})
		lastAck.Store(time.Now().UnixNano())
		longestGap.Store(0)
		worstWait.Store(0)
		wg := produce(stop)
		time.Sleep(d / 2)
		during()
		time.Sleep(d / 2)
		close(stop)
		wg.Wait()
		t.Logf("%s: longest stretch without an acknowledged send %v, longest send %v", name,
			time.Duration(longestGap.Load()).Round(time.Millisecond), time.Duration(worstWait.Load()).Round(time.Millisecond))
		if n := sendErrors.Load(); n > 0 {
			t.Fatalf("%s: %d sends failed, first: %v", name, n, firstErr.Load())
		}
	}

	var killed int
	phase("kill the leader", 6*time.Second, func() {
		killed = leaderIndex(t, ctx, grpcAddrs, group)
		t.Logf("killing n%d, the leader of group %d, after %d sends", killed+1, group, next.Load())
		procs[killed].kill9()
	})
	procs[killed] = startProcess(t, bin, nodeArgs(killed)...)
	phase("after the restart", 4*time.Second, func() {})
	phase("pause a follower", 2*time.Second, func() {
		// The leader commits with the other follower; the paused one's
		// pipeline fills and waits. Sends must not fail.
		follower := (leaderIndex(t, ctx, grpcAddrs, group) + 1) % 3
		t.Logf("pausing n%d, a follower, for 3 s", follower+1)
		procs[follower].signal(syscall.SIGSTOP)
		time.Sleep(3 * time.Second)
		procs[follower].signal(syscall.SIGCONT)
	})
	phase("pause the leader", 2*time.Second, func() {
		paused := leaderIndex(t, ctx, grpcAddrs, group)
		t.Logf("pausing n%d, the leader, after %d acknowledged sends", paused+1, acks.Load())
		procs[paused].signal(syscall.SIGSTOP)
		// The front-end gives up on an unanswered attempt after 3 s
		// (routing.attemptTimeout); the others elect a leader in 1-2 s.
		time.Sleep(4 * time.Second)
		before := acks.Load()
		time.Sleep(2 * time.Second)
		late := acks.Load() - before
		procs[paused].signal(syscall.SIGCONT)
		t.Logf("%d sends acknowledged in the last 2 of the 6 s n%d was paused", late, paused+1)
		if late < 10 {
			t.Errorf("%d sends acknowledged 4-6 s into the pause of the leader n%d: the front-end still waits for it", late, paused+1)
		}
	})
	// The restarted node must have caught up: with the next leader gone,
	// only it and the remaining follower can form a quorum.
	phase("kill the next leader", 6*time.Second, func() {
		second := leaderIndex(t, ctx, grpcAddrs, group)
		if second == killed {
			second = (killed + 1) % 3 // the restarted node leads: kill another
		}
		t.Logf("killing n%d after %d sends", second+1, next.Load())
		procs[second].kill9()
	})

	total := 0
	acked.Range(func(_, _ any) bool { total++; return true })
	t.Logf("%d messages acknowledged; receiving them", total)
	rcv, err := sess.NewReceiver(ctx, "fo", &goamqp.ReceiverOptions{Credit: 1000, SettlementMode: goamqp.ReceiverSettleModeSecond.Ptr()})
	if err != nil {
		t.Fatal(err)
	}
	got := make(map[int64]int)
	// Completions run 64 at a time: one at a time, each waiting for its
	// confirmation, they took most of the test's time.
	var completing sync.WaitGroup
	var completeErr atomic.Value
	inFlight := make(chan struct{}, 64)
	for missing := total; missing > 0; {
		rctx, rcancel := context.WithTimeout(ctx, receiveWait)
		m, err := rcv.Receive(rctx, nil)
		rcancel()
		if err != nil {
			t.Fatalf("receive with %d acknowledged messages still missing: %v", missing, err)
		}
		id, _ := strconv.ParseInt(string(m.GetData()), 10, 64)
		if _, ok := acked.Load(id); ok && got[id] == 0 {
			missing--
		}
		got[id]++
		inFlight <- struct{}{}
		completing.Add(1)
		go func() {
			defer completing.Done()
			if err := rcv.AcceptMessage(ctx, m); err != nil {
				completeErr.CompareAndSwap(nil, err)
			}
			<-inFlight
		}()
	}
	completing.Wait()
	if err := completeErr.Load(); err != nil {
		t.Fatalf("complete: %v", err)
	}
	dups := 0
	for _, n := range got {
		dups += n - 1
	}
	t.Logf("all %d acknowledged messages received (%d duplicates, %d unacknowledged extras)", total, dups, len(got)-total)
}

// receiveWait bounds the wait for each message TestFailoverKillLeader
// receives: longer than the test queue's lock, which the messages of an
// abandoned receive have to outlive.
const receiveWait = 45 * time.Second

func buildBinary(t *testing.T) string {
	t.Helper()
	built.once.Do(func() {
		dir, err := os.MkdirTemp("", "quorumbus-bin-")
		if err != nil {
			built.err = err
			return
		}
		built.path = filepath.Join(dir, "quorumbus")
		built.out, built.err = exec.Command("go", "build", "-o", built.path, ".").CombinedOutput()
	})
	if built.err != nil {
		t.Fatalf("go build: %v\n%s", built.err, built.out)
	}
	return built.path
}

// built is the binary the process tests share: one link per package run
// rather than one per test (nine of them, 5-30 s each on two cores).
var built struct {
	once sync.Once
	path string
	out  []byte
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if built.path != "" {
		os.RemoveAll(filepath.Dir(built.path))
	}
	os.Exit(code)
}

// freeAddrs returns loopback addresses with ports that were free a moment
// ago (for processes that must keep their address across restarts).
func freeAddrs(t *testing.T, n int) []string {
	t.Helper()
	var out []string
	var lns []net.Listener
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		out = append(out, ln.Addr().String())
	}
	for _, ln := range lns {
		ln.Close()
	}
	return out
}

type process struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// startProcess runs the binary with args until the test ends. The tests
// that start node, frontend and gateway processes pass -plain-cluster
// (their subject is replication, not the cluster plane's security, which
// TestClusterMutualTLS covers with certificates): without it or the
// -cluster-* flags a process refuses to start.
func startProcess(t *testing.T, bin string, args ...string) *process {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Stdout = io.Discard
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() { cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGCONT) // in case a failed test left it paused
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// plainCluster is three `quorumbus node` processes bootstrapped together,
// with a plain-text cluster plane (the multi-process tests test the
// broker's behaviour, not its certificates), and a `quorumbus frontend`
// in front of them.
type plainCluster struct {
	procs     []*process
	grpcAddrs []string
	amqpAddr  string
}

// startStorageProcesses starts three `quorumbus node` processes, n1 to
// n3 under dir, with a plain-text cluster plane, bootstrapped together
// and joined in one gossip; it returns them with their gRPC and gossip
// addresses.
func startStorageProcesses(t *testing.T, bin, dir string) (procs []*process, grpcAddrs, gossipAddrs []string) {
	t.Helper()
	grpcAddrs, gossipAddrs = freeAddrs(t, 3), freeAddrs(t, 3)
	var boot []string
	for i := range 3 {
		boot = append(boot, fmt.Sprintf("n%d=%s", i+1, grpcAddrs[i]))
	}
	for i := range 3 {
		procs = append(procs, startProcess(t, bin, "node", "-plain-cluster", "-id", fmt.Sprintf("n%d", i+1), "-data", filepath.Join(dir, fmt.Sprintf("n%d", i+1)),
			"-grpc-addr", grpcAddrs[i], "-gossip-addr", gossipAddrs[i], "-join", strings.Join(gossipAddrs, ","),
			"-bootstrap", strings.Join(boot, ","), "-log-level", "error"))
	}
	return procs, grpcAddrs, gossipAddrs
}

func startPlainCluster(t *testing.T) *plainCluster {
	t.Helper()
	bin := buildBinary(t)
	dir := t.TempDir()
	c := &plainCluster{}
	c.procs, c.grpcAddrs, _ = startStorageProcesses(t, bin, dir)
	c.amqpAddr = freeAddrs(t, 1)[0]
	startFrontendProcess(t, bin, dir, c.amqpAddr, c.grpcAddrs)
	return c
}

// startFrontendProcess starts a `quorumbus frontend` on amqpAddr reading
// routes from the nodes at placement, trusting the dev rule from a rules
// file in dir (a front-end refuses to start without a rule), throttling
// off.
func startFrontendProcess(t *testing.T, bin, dir, amqpAddr string, placement []string) *process {
	t.Helper()
	rules := filepath.Join(dir, "rules.json")
	if err := cluster.WriteRulesConfig(rules, sas.DevRule()); err != nil {
		t.Fatal(err)
	}
	return startProcess(t, bin, "frontend", "-plain-cluster", "-amqp-addr", amqpAddr, "-http-addr", "", "-placement", strings.Join(placement, ","),
		"-sas-rules", rules, "-throttle-credits", "0", "-log-level", "error")
}

func (p *process) signal(sig syscall.Signal) {
	p.cmd.Process.Signal(sig)
}

func (p *process) kill9() {
	p.cmd.Process.Kill() // SIGKILL: no shutdown, no flush
	<-p.done
}

func dialUntil(t *testing.T, ctx context.Context, addr string) *goamqp.Conn {
	t.Helper()
	for {
		c, err := goamqp.Dial(ctx, "amqp://"+addr, &goamqp.ConnOptions{SASLType: goamqp.SASLTypePlain(sas.DevKeyName, sas.DevKey)})
		if err == nil {
			t.Cleanup(func() { c.Close() })
			return c
		}
		if ctx.Err() != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// senderUntil attaches once the front-end knows the queue.
func senderUntil(t *testing.T, ctx context.Context, s *goamqp.Session, queue string) *goamqp.Sender {
	t.Helper()
	for {
		snd, err := s.NewSender(ctx, queue, nil)
		if err == nil {
			return snd
		}
		if ctx.Err() != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func queueGroup(t *testing.T, ctx context.Context, addr, queue string) uint64 {
	t.Helper()
	client, closeFn, err := cluster.DialPlacement(addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer closeFn()
	e, err := client.GetEntity(ctx, &placementpb.GetEntityRequest{Name: queue})
	if err != nil {
		t.Fatal(err)
	}
	return e.PartitionGroups[0]
}

// leaderIndex asks the nodes which of them leads the group: a follower
// answers with a leader hint.
func leaderIndex(t *testing.T, ctx context.Context, addrs []string, group uint64) int {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		for i, addr := range addrs {
			cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				continue
			}
			sctx, cancel := context.WithTimeout(ctx, time.Second)
			_, err = partitionpb.NewPartitionServiceClient(cc).Stats(sctx, &partitionpb.StatsRequest{GroupId: group})
			cancel()
			cc.Close()
			// The leader answers (an unknown entity is its answer too);
			// others refuse with FailedPrecondition, dead ones are
			// Unavailable.
			switch status.Code(err) {
			case codes.OK, codes.NotFound:
				return i
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("no leader for group %d", group)
	return -1
}
