package loadtool

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/url"
	"os"
	"runtime"
	"sync"

	goamqp "github.com/Azure/go-amqp"
)

// coalescingConn gathers what is written to a connection while its
// previous write is in flight into one write(2).
//
// go-amqp writes every frame with a write of its own from one goroutine,
// so a pipelined sender costs one system call per message, and so does
// every disposition of a receiver: CPU taken from the cores the broker it
// measures runs on. The SDKs that buffer their writes (rhea in the
// JavaScript SDK, the .NET SDK's AMQP library) put many frames in one TCP
// segment too; the broker sees the same frames either way.
//
// Write copies the bytes into a pending buffer and returns; a flusher
// goroutine writes what is pending, one write per round. A write error is
// reported by the Write calls after it. Pending bytes are bounded: Write
// waits while maxPending are already waiting.
type coalescingConn struct {
	net.Conn

	mu       sync.Mutex
	wake     *sync.Cond // the flusher waits for bytes or close
	room     *sync.Cond // writers wait for room
	pending  []byte
	spare    []byte
	flushing bool
	closed   bool
	err      error
}

const maxPending = 4 << 20

func newCoalescingConn(c net.Conn) *coalescingConn {
	cc := &coalescingConn{Conn: c}
	cc.wake = sync.NewCond(&cc.mu)
	cc.room = sync.NewCond(&cc.mu)
	go cc.flush()
	return cc
}

func (c *coalescingConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.err == nil && !c.closed && len(c.pending) >= maxPending {
		c.room.Wait()
	}
	if c.err != nil {
		return 0, c.err
	}
	if c.closed {
		return 0, net.ErrClosed
	}
	c.pending = append(c.pending, p...)
	if !c.flushing {
		c.wake.Signal()
	}
	return len(p), nil
}

// flush writes pending bytes until the connection closes or a write fails.
func (c *coalescingConn) flush() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		for len(c.pending) == 0 && !c.closed {
			c.wake.Wait()
		}
		if len(c.pending) == 0 { // closed, nothing left
			return
		}
		// Let the writer run before taking what is pending: woken for one
		// frame, the flusher would otherwise write it alone while the
		// writer is about to add the next (1.3 frames a write without
		// this, 19 with it, pipelined sends on two connections).
		c.mu.Unlock()
		runtime.Gosched()
		c.mu.Lock()
		out := c.pending
		c.pending, c.spare = c.spare[:0], nil
		c.flushing = true
		c.mu.Unlock()
		_, err := c.Conn.Write(out)
		c.mu.Lock()
		c.flushing = false
		c.spare = out
		c.room.Broadcast()
		if err != nil {
			c.err = err
			return
		}
	}
}

// Close closes the connection at once; bytes still pending are dropped.
// go-amqp closes its connection only once the peer has answered its close
// frame, so nothing it still needs is pending then.
func (c *coalescingConn) Close() error {
	c.mu.Lock()
	c.closed = true
	c.wake.Signal()
	c.room.Broadcast()
	c.mu.Unlock()
	return c.Conn.Close()
}

// dial connects to the endpoint, through a coalescingConn when coalesce
// is set (under TLS for amqps).
// A synchronous sender goes without: it never has a second frame to
// gather, and the hand-off to the flusher would only add latency.
func (c *benchConfig) dial(ctx context.Context, coalesce bool) (*goamqp.Conn, error) {
	opts := &goamqp.ConnOptions{SASLType: goamqp.SASLTypeAnonymous()}
	if c.keyName != "" {
		opts.SASLType = goamqp.SASLTypePlain(c.keyName, c.key)
	}
	u, err := url.Parse(c.url)
	if err != nil {
		return nil, fmt.Errorf("bench: -url: %w", err)
	}
	if c.caFile != "" {
		pem, err := os.ReadFile(c.caFile)
		if err != nil {
			return nil, fmt.Errorf("bench: -ca: %w", err)
		}
		roots, err := x509.SystemCertPool()
		if err != nil {
			roots = x509.NewCertPool()
		}
		if !roots.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("bench: -ca %s holds no PEM certificate", c.caFile)
		}
		opts.TLSConfig = &tls.Config{RootCAs: roots, ServerName: u.Hostname()}
	}
	if !coalesce || (u.Scheme != "amqp" && u.Scheme != "amqps") {
		return goamqp.Dial(ctx, c.url, opts)
	}
	host, port := u.Host, "5672"
	if u.Scheme == "amqps" {
		port = "5671"
	}
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), port)
	}
	var d net.Dialer
	tcp, err := d.DialContext(ctx, "tcp", host)
	if err != nil {
		return nil, err
	}
	var nc net.Conn = newCoalescingConn(tcp)
	if u.Scheme == "amqps" {
		// TLS over the coalescing connection: the records of the frames
		// written while a write is in flight leave in one write(2), as
		// the frames do in the clear.
		cfg := opts.TLSConfig.Clone()
		if cfg == nil {
			cfg = &tls.Config{}
		}
		if cfg.ServerName == "" {
			cfg.ServerName = u.Hostname()
		}
		tc := tls.Client(nc, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			tcp.Close()
			return nil, err
		}
		nc = tc
	}
	opts.HostName = u.Hostname()
	conn, err := goamqp.NewConn(ctx, nc, opts)
	if err != nil {
		tcp.Close()
		return nil, err
	}
	return conn, nil
}
