package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/quorumbus/quorumbus/cmd/quorumbus/cluster"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// TestWipedNodeRejoins runs three `quorumbus node` processes (each named
// in -bootstrap) and a front-end, and sends through go-amqp while one
// follower of the queue's group is down, so that the acknowledged
// messages are on the leader and the other follower only. That follower
// then loses its data directory (kill -9, then the directory is removed),
// the leader is killed, and the wiped node and the lagging one restart,
// the wiped one with the same flags on an empty directory. Neither may
// serve the queue's group meanwhile (the wiped one would have voted for
// the lagging one, which lacks the messages). Once the old leader is
// back, every acknowledged message is received; then, with that leader
// killed again, the two others serve the queue: the wiped node caught up
// and votes again.
func TestWipedNodeRejoins(t *testing.T) {
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
	dataDir := func(i int) string { return filepath.Join(dir, fmt.Sprintf("n%d", i+1)) }
	nodeArgs := func(i int) []string {
		return []string{"node", "-plain-cluster", "-id", fmt.Sprintf("n%d", i+1), "-data", dataDir(i),
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
	if err := cluster.CreateQueues(ctx, grpcAddrs, nil, []cluster.QueueSpec{{Name: "wiped"}}, quiet); err != nil {
		t.Fatal(err)
	}
	group := queueGroup(t, ctx, grpcAddrs[0], "wiped")
	conn := dialUntil(t, ctx, amqpAddr)
	sess, err := conn.NewSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	snd := senderUntil(t, ctx, sess, "wiped")
	acked := map[string]bool{}
	send := func(prefix string, n int) {
		t.Helper()
		for i := range n {
			body := prefix + "-" + strconv.Itoa(i)
			if err := snd.Send(ctx, goamqp.NewMessage([]byte(body)), nil); err != nil {
				t.Fatalf("send %s: %v", body, err)
			}
			acked[body] = true
		}
	}

	send("early", 20)
	l := leaderIndex(t, ctx, grpcAddrs, group)
	w, lag := (l+1)%3, (l+2)%3
	t.Logf("n%d leads group %d; n%d will lose its disk, n%d lags", l+1, group, w+1, lag+1)
	procs[lag].kill9()
	send("late", 50) // on l and w only
	procs[w].kill9()
	if err := os.RemoveAll(dataDir(w)); err != nil {
		t.Fatal(err)
	}
	procs[l].kill9()
	procs[w] = startProcess(t, bin, nodeArgs(w)...)
	procs[lag] = startProcess(t, bin, nodeArgs(lag)...)

	// Without the rejoin rule the two elect the lagging node within a few
	// election timeouts (1 s). Watch for twelve.
	for deadline := time.Now().Add(12 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		for _, i := range []int{w, lag} {
			if leads(ctx, grpcAddrs[i], group) {
				t.Fatalf("n%d leads group %d while the only node holding every acknowledged message is down", i+1, group)
			}
		}
	}

	procs[l] = startProcess(t, bin, nodeArgs(l)...)
	rcv, err := sess.NewReceiver(ctx, "wiped", &goamqp.ReceiverOptions{Credit: 100, SettlementMode: goamqp.ReceiverSettleModeSecond.Ptr()})
	if err != nil {
		t.Fatal(err)
	}
	receiveAll := func() {
		t.Helper()
		for missing := len(acked); missing > 0; {
			rctx, rcancel := context.WithTimeout(ctx, 45*time.Second)
			m, err := rcv.Receive(rctx, nil)
			rcancel()
			if err != nil {
				t.Fatalf("receive with %d acknowledged messages missing: %v", missing, err)
			}
			if body := string(m.GetData()); acked[body] {
				delete(acked, body)
				missing--
			}
			if err := rcv.AcceptMessage(ctx, m); err != nil {
				t.Fatal(err)
			}
		}
	}
	receiveAll()

	// The wiped node rejoined: without the old leader, it and the lagging
	// node serve the group.
	l = leaderIndex(t, ctx, grpcAddrs, group)
	t.Logf("n%d leads again; killing it", l+1)
	procs[l].kill9()
	send("after", 10)
	receiveAll()
}

// leads tells whether the node at addr leads group, as its replica sees
// it.
func leads(ctx context.Context, addr string, group uint64) bool {
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return false
	}
	defer cc.Close()
	sctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	st, err := partitionpb.NewGroupMembershipClient(cc).GroupStatus(sctx, &partitionpb.GroupStatusRequest{GroupId: group})
	return err == nil && st.State == "Leader"
}
