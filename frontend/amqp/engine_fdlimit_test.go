//go:build linux

package amqp

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// fdChildEnv makes the test binary, run again by
// TestServeSurvivesDescriptorExhaustion, serve with a low descriptor limit
// instead of testing.
const fdChildEnv = "QUORUMBUS_AMQP_FD_CHILD"

// fdChildLimit is the child's RLIMIT_NOFILE: room for the runtime's own
// descriptors and the listener, and a few connections.
const fdChildLimit = 32

// TestServeSurvivesDescriptorExhaustion runs a server in a child process
// whose descriptor limit is low, holds more connections to it than the
// limit allows, lets them go, and checks that a new AMQP connection is
// served: running out of descriptors must not end the listener. The limit
// is lowered in the child only.
func TestServeSurvivesDescriptorExhaustion(t *testing.T) {
	if os.Getenv(fdChildEnv) == "1" {
		fdChild()
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestServeSurvivesDescriptorExhaustion$")
	cmd.Env = append(os.Environ(), fdChildEnv+"=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close() // the child exits when its stdin ends
		if err := cmd.Wait(); err != nil {
			t.Errorf("child: %v\n%s", err, logs.String())
		}
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("reading the child's address: %v\n%s", err, logs.String())
	}
	addr := strings.TrimSpace(strings.TrimPrefix(line, "addr "))

	// Twice the limit: the kernel completes the handshakes (the listen
	// backlog holds them) while the child runs out of descriptors.
	var held []net.Conn
	for range 2 * fdChildLimit {
		nc, err := net.DialTimeout("tcp", addr, engTimeout)
		if err != nil {
			t.Fatalf("dial %d: %v", len(held), err)
		}
		held = append(held, nc)
	}
	engWaitFor(t, "the child to log a retried accept error", func() bool {
		return strings.Contains(logs.String(), "amqp accept failed; retrying")
	})
	for _, nc := range held {
		nc.Close()
	}

	env := &engEnv{t: t, addr: addr}
	deadline := time.Now().Add(2 * engTimeout)
	for {
		err := tryOpen(env.addr)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no AMQP connection after the held ones closed: %v\n%s", err, logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// tryOpen opens an AMQP connection and reports whether the server answered
// with its header and open frame.
func tryOpen(addr string) error {
	nc, err := net.DialTimeout("tcp", addr, engTimeout)
	if err != nil {
		return err
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(engTimeout))
	open := engClientOpen()
	if _, err := nc.Write(append(protoHeaderAMQP[:], engFrameBytes(frameTypeAMQP, 0, open.append)...)); err != nil {
		return err
	}
	fr := newFrameReader(nc, 1<<20)
	if h, err := fr.protoHeader(); err != nil || h != protoHeaderAMQP {
		return fmt.Errorf("protocol header % x: %v", h, err)
	}
	f, err := fr.next()
	if err != nil {
		return err
	}
	r, err := engDecodeFrame(f)
	if err != nil || r.code != descOpen {
		return fmt.Errorf("first frame %v: %v", r, err)
	}
	return nil
}

// fdChild serves on a loopback port with RLIMIT_NOFILE lowered, prints the
// address, and exits when its stdin ends.
func fdChild() {
	lim := syscall.Rlimit{Cur: fdChildLimit, Max: fdChildLimit}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		fmt.Fprintln(os.Stderr, "setrlimit:", err)
		os.Exit(2)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "listen:", err)
		os.Exit(2)
	}
	srv := &Server{Handler: newEngHandler(), Logger: slog.New(slog.NewTextHandler(os.Stderr, nil))}
	go func() {
		err := srv.Serve(ln)
		fmt.Fprintln(os.Stderr, "Serve returned:", err)
		os.Exit(3)
	}()
	fmt.Printf("addr %s\n", ln.Addr())
	io.Copy(io.Discard, os.Stdin)
	os.Exit(0)
}

// syncBuffer is a bytes.Buffer that a child's output and a test may use at
// once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
