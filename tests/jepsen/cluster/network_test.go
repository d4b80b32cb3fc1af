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

// TestLossyPair: with 50 % of the packets between members 0 and 1
// dropped, a share of datagrams is lost both ways between them (of 200,
// between 40 and 160: the draw is per packet), none between 0 and 2,
// and none after the heal.
func TestLossyPair(t *testing.T) {
	if err := NetnsAvailable(); err != nil {
		t.Skipf("network namespaces: %v", err)
	}
	if err := IptablesAvailable(); err != nil {
		t.Skipf("iptables: %v", err)
	}
	n, err := NewNetns(3)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	var in [3]net.PacketConn
	for m := range in {
		in[m] = listenIn(t, n, m, func(addr string) (io.Closer, error) { return net.ListenPacket("udp", addr) }).(net.PacketConn)
	}
	// received counts how many of count datagrams from reaches to.
	received := func(from, to, count int) int {
		c, err := n.DialContext(from)(t.Context(), "udp", in[to].LocalAddr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		for range count {
			c.Write([]byte("probe"))
			time.Sleep(time.Millisecond) // no loss to a full socket buffer
		}
		got := 0
		buf := make([]byte, 16)
		for {
			in[to].SetReadDeadline(time.Now().Add(300 * time.Millisecond))
			if _, _, err := in[to].ReadFrom(buf); err != nil {
				return got
			}
			got++
		}
	}
	if err := n.LossyPair(0, 1, 50); err != nil {
		t.Fatal(err)
	}
	for _, d := range [][2]int{{0, 1}, {1, 0}} {
		if got := received(d[0], d[1], 200); got < 40 || got > 160 {
			t.Errorf("%d of 200 datagrams from %d reached %d across a 50 %% lossy pair", got, d[0], d[1])
		}
	}
	for _, d := range [][2]int{{0, 2}, {2, 1}} {
		if got := received(d[0], d[1], 100); got != 100 {
			t.Errorf("%d of 100 datagrams from %d reached %d, outside the lossy pair", got, d[0], d[1])
		}
	}
	if err := n.Heal(); err != nil {
		t.Fatal(err)
	}
	if got := received(0, 1, 100); got != 100 {
		t.Errorf("%d of 100 datagrams from 0 reached 1 after the heal", got)
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
