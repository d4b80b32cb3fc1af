package cluster

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"

	"github.com/quorumbus/quorumbus/placement/sas"
)

// freeNodePort finds n consecutive free ports, for a dev cluster that must
// come back on the same addresses (Raft remembers them).
func freeNodePort(t *testing.T, n int) int {
	t.Helper()
	for range 100 {
		base := 20000 + rand.IntN(30000)
		var lns []net.Listener
		ok := true
		for i := range n {
			ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", base+i))
			if err != nil {
				ok = false
				break
			}
			lns = append(lns, ln)
		}
		for _, ln := range lns {
			ln.Close()
		}
		if ok {
			return base
		}
	}
	t.Fatal("no free ports")
	return 0
}

// attach opens a sender on queue, and returns the AMQP error it was
// refused with, if any.
func attach(ctx context.Context, addr, queue string) error {
	conn, err := goamqp.Dial(ctx, "amqp://"+addr, &goamqp.ConnOptions{SASLType: goamqp.SASLTypePlain(sas.DevKeyName, sas.DevKey)})
	if err != nil {
		return err
	}
	defer conn.Close()
	sess, err := conn.NewSession(ctx, nil)
	if err != nil {
		return err
	}
	snd, err := sess.NewSender(ctx, queue, nil)
	if err != nil {
		return err
	}
	return snd.Close(ctx)
}

func isNotFound(err error) bool {
	var ae *goamqp.Error
	return errors.As(err, &ae) && ae.Condition == goamqp.ErrCondNotFound
}

// TestRestartedDevNeverSaysNotFound restarts a dev cluster, which then
// replays its catalog, and attaches to an existing queue from the moment
// the front-end listens: attaches may be refused with a retriable error
// until the catalog is back, never with amqp:not-found, which the SDKs
// take as final. Once /readyz says ready, an attach succeeds at once, and
// a queue that does not exist is still not-found.
func TestRestartedDevNeverSaysNotFound(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a dev cluster twice")
	}
	opts := DevOptions{
		DataDir: t.TempDir(), AMQPAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0",
		Nodes: 3, NodePort: freeNodePort(t, 3), Groups: 2, CacheMB: 8, LogLevel: "error",
		Declare: []QueueSpec{{Name: "orders"}},
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dev, err := StartDev(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if body, ok := readinessOf(dev); ok {
		t.Fatalf("ready before the declared queue exists:\n%s", body)
	}
	if err := CreateQueues(ctx, dev.NodeAddrs, dev.Creds, opts.Declare, testLogger()); err != nil {
		dev.Close()
		t.Fatal(err)
	}
	dev.Declared.Created()
	waitReady(t, dev)
	if err := attach(ctx, dev.AMQPAddr, "orders"); err != nil {
		t.Fatalf("attach once ready: %v", err)
	}
	if err := dev.Close(); err != nil {
		t.Fatal(err)
	}

	dev, err = StartDev(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	dev.Declared.Created() // it exists: what a restart with the same --config finds
	refused, first := 0, error(nil)
	deadline := time.Now().Add(60 * time.Second)
	for {
		actx, acancel := context.WithTimeout(ctx, 10*time.Second)
		err := attach(actx, dev.AMQPAddr, "orders")
		acancel()
		if err == nil {
			break
		}
		if isNotFound(err) {
			t.Fatalf("an existing queue was not-found after a restart (after %d retriable refusals): %v", refused, err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("attach still failing: %v", err)
		}
		if refused++; first == nil {
			first = err
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("%d attaches refused before the catalog was back, the first with: %v", refused, first)
	waitReady(t, dev)
	if err := attach(ctx, dev.AMQPAddr, "orders"); err != nil {
		t.Fatalf("attach once ready: %v", err)
	}
	if err := attach(ctx, dev.AMQPAddr, "missing"); !isNotFound(err) {
		t.Fatalf("attach to a queue that does not exist: %v, want amqp:not-found", err)
	}
}

func readinessOf(dev *Dev) (string, bool) {
	lines, ok := dev.Admin.Ready()
	return strings.Join(lines, "\n"), ok
}

func waitReady(t *testing.T, dev *Dev) {
	t.Helper()
	eventually(t, "the dev cluster to be ready", func() bool {
		_, ok := readinessOf(dev)
		return ok
	})
}
