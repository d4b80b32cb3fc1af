package compat

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"

	"github.com/quorumbus/quorumbus/cmd/quorumbus/cluster"
	"github.com/quorumbus/quorumbus/placement/sas"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// TestDevLargestSendsSurviveRestart: the largest message an entity may
// allow (100 MB) and a pipelined burst of messages at a default queue's
// limit are acknowledged, and after the cluster restarts every one of them
// is read back, byte for byte. Before Raft entries were bounded, both made
// entries over 64 MiB that the log store wrote and could not read back:
// the restarted cluster panicked or lost the group.
func TestDevLargestSendsSurviveRestart(t *testing.T) {
	if raceOn {
		// 175 MB through three replicas, twice: 150-175 s under the
		// detector, which checks every byte a copy moves, and timed out
		// there on a loaded machine.
		t.Skip("moves hundreds of MiB: run without -race (make test does)")
	}
	t.Parallel()
	dir := t.TempDir()
	port := freePortRun(t, 3)
	start := func() *cluster.Dev {
		c, err := cluster.StartDev(context.Background(), cluster.DevOptions{
			DataDir: dir, AMQPAddr: "127.0.0.1:0", Nodes: 3, NodePort: port, Groups: 3, CacheMB: 16, LogLevel: "error",
		})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	known := func(c *cluster.Dev) {
		for _, q := range []string{"big", "burst"} {
			for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
				if _, err := c.Router.Entity(q); err == nil {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("queue %s never reached the front-end's routing table", q)
				}
			}
		}
	}
	c := start()
	queues := []cluster.QueueSpec{
		{Name: "big", Props: &placementpb.QueueProperties{MaxMessageSizeInKilobytes: 100 << 10, MaxSizeInMegabytes: 1024}},
		{Name: "burst", Props: &placementpb.QueueProperties{MaxSizeInMegabytes: 1024}},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	if err := cluster.CreateQueues(ctx, c.NodeAddrs, c.Creds, queues, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		t.Fatal(err)
	}
	known(c)

	sums := map[string][32]byte{}
	var mu sync.Mutex
	body := func(id string, n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(i*31 + len(id))
		}
		mu.Lock()
		sums[id] = sha256.Sum256(b)
		mu.Unlock()
		return b
	}
	// The link's limit counts the whole encoded message; its sections
	// other than the body take well under 1 KiB here.
	began := time.Now()
	sendAll(t, ctx, c.AMQPAddr, "big", 1, 1, func(int) (string, []byte) { return "largest", body("largest", 100<<20-1024) })
	t.Logf("sent 100 MB in %v", time.Since(began))
	const conns, perConn = 2, 150
	began = time.Now()
	sendAll(t, ctx, c.AMQPAddr, "burst", conns, perConn, func(i int) (string, []byte) {
		id := fmt.Sprint("burst-", i)
		return id, body(id, 256<<10-1024)
	})
	t.Logf("sent %d messages of 255 KiB in %v", conns*perConn, time.Since(began))
	c.Close()

	c = start()
	defer c.Close()
	known(c)
	receiveAll(t, ctx, c.AMQPAddr, "big", sums, 1)
	receiveAll(t, ctx, c.AMQPAddr, "burst", sums, conns*perConn)
}

// freePortRun returns the first of n consecutive free TCP ports.
func freePortRun(t *testing.T, n int) int {
	t.Helper()
	for range 50 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		base := l.Addr().(*net.TCPAddr).Port
		l.Close()
		free := true
		for p := base + 1; p < base+n && free; p++ {
			if l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p)); err != nil {
				free = false
			} else {
				l.Close()
			}
		}
		if free {
			return base
		}
	}
	t.Fatal("no run of free ports")
	return 0
}

// sendAll sends conns×perConn messages made by msg to queue, each
// connection's all at once on one link, and fails unless every one is
// accepted.
func sendAll(t *testing.T, ctx context.Context, addr, queue string, conns, perConn int, msg func(int) (string, []byte)) {
	t.Helper()
	var wg sync.WaitGroup
	for c := range conns {
		snd, err := dialSession(t, ctx, addr).NewSender(ctx, queue, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i := range perConn {
			wg.Add(1)
			go func() {
				defer wg.Done()
				id, b := msg(c*perConn + i)
				m := goamqp.NewMessage(b)
				m.Properties = &goamqp.MessageProperties{MessageID: id}
				if err := snd.Send(ctx, m, nil); err != nil {
					t.Errorf("send %s: %v", id, err)
				}
			}()
		}
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
}

// receiveAll receives and completes n messages of queue, checking each
// body against sums and deleting it there.
func receiveAll(t *testing.T, ctx context.Context, addr, queue string, sums map[string][32]byte, n int) {
	t.Helper()
	rcv, err := dialSession(t, ctx, addr).NewReceiver(ctx, queue, &goamqp.ReceiverOptions{Credit: 16})
	if err != nil {
		t.Fatal(err)
	}
	for want := n; want > 0; want-- {
		m, err := rcv.Receive(ctx, nil)
		if err != nil {
			t.Fatalf("%s: %d messages not received: %v", queue, want, err)
		}
		id, _ := m.Properties.MessageID.(string)
		want, ok := sums[id]
		if !ok || sha256.Sum256(bytes.Join(m.Data, nil)) != want {
			t.Fatalf("message %q of %s: unknown, or not the bytes sent", id, queue)
		}
		delete(sums, id)
		if err := rcv.AcceptMessage(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
}

// dialSession opens a go-amqp connection, closed when the test ends, and
// a session on it.
func dialSession(t *testing.T, ctx context.Context, addr string) *goamqp.Session {
	t.Helper()
	conn, err := goamqp.Dial(ctx, "amqp://"+addr, &goamqp.ConnOptions{SASLType: goamqp.SASLTypePlain(sas.DevKeyName, sas.DevKey)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	sess, err := conn.NewSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	return sess
}
