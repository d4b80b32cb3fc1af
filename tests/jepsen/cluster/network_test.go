package cluster

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestCutOneWay: with member 0's packets to member 1 dropped, a datagram
// from 1 still reaches 0 and one from 0 no longer reaches 1; a TCP connect
// either way hangs instead of failing at once (the handshake's answer is
// dropped on one of its legs), which is why a one-way cut stalls TCP both
// ways. Heal restores both directions.
func TestCutOneWay(t *testing.T) {
	if err := NetnsAvailable(); err != nil {
		t.Skipf("network namespaces: %v", err)
	}
	if err := IptablesAvailable(); err != nil {
		t.Skipf("iptables: %v", err)
	}
	n, err := NewNetns(2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	in := [2]net.PacketConn{
		listenIn(t, n, 0, func(addr string) (io.Closer, error) { return net.ListenPacket("udp", addr) }).(net.PacketConn),
		listenIn(t, n, 1, func(addr string) (io.Closer, error) { return net.ListenPacket("udp", addr) }).(net.PacketConn),
	}
	tcp := [2]net.Listener{
		listenIn(t, n, 0, func(addr string) (io.Closer, error) { return net.Listen("tcp", addr) }).(net.Listener),
		listenIn(t, n, 1, func(addr string) (io.Closer, error) { return net.Listen("tcp", addr) }).(net.Listener),
	}
	connect := func(from, to int) error {
		ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
		defer cancel()
		c, err := n.DialContext(from)(ctx, "tcp", tcp[to].Addr().String())
		if err == nil {
			c.Close()
		}
		return err
	}
	send := func(from, to int) bool {
		c, err := n.DialContext(from)(t.Context(), "udp", in[to].LocalAddr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.Write([]byte("probe"))
		in[to].SetReadDeadline(time.Now().Add(500 * time.Millisecond))
		_, _, err = in[to].ReadFrom(make([]byte, 16))
		return err == nil
	}
	if !send(0, 1) || !send(1, 0) {
		t.Fatal("datagrams lost before any cut")
	}
	if err := n.CutOneWay(0, 1); err != nil {
		t.Fatal(err)
	}
	if send(0, 1) {
		t.Error("a datagram from 0 reached 1 across the cut")
	}
	if !send(1, 0) {
		t.Error("a datagram from 1 did not reach 0: the cut is not one-way")
	}
	for _, d := range [][2]int{{0, 1}, {1, 0}} {
		var ne net.Error
		if err := connect(d[0], d[1]); !errors.As(err, &ne) || !ne.Timeout() {
			t.Errorf("TCP connect from %d to %d across a one-way cut: %v, want it to hang", d[0], d[1], err)
		}
	}
	if err := n.Heal(); err != nil {
		t.Fatal(err)
	}
	if !send(0, 1) || !send(1, 0) {
		t.Error("datagrams lost after the heal")
	}
	if err := errors.Join(connect(0, 1), connect(1, 0)); err != nil {
		t.Errorf("TCP after the heal: %v", err)
	}
}

// listenIn opens a socket with listen on member m's address, from a
// thread in m's namespace: a socket stays in the namespace it was made in.
func listenIn(t *testing.T, n *Netns, m int, listen func(addr string) (io.Closer, error)) io.Closer {
	t.Helper()
	type result struct {
		c   io.Closer
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine, namespace and all
		f, err := os.Open("/run/netns/" + n.ns(m))
		if err != nil {
			ch <- result{nil, err}
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- result{nil, err}
			return
		}
		c, err := listen(n.Host(m) + ":0")
		ch <- result{c, err}
	}()
	r := <-ch
	if r.err != nil {
		t.Fatalf("listen in %s: %v", n.ns(m), r.err)
	}
	t.Cleanup(func() { r.c.Close() })
	return r.c
}
