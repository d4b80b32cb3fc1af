package nodetest

import (
	"context"
	"fmt"
	"net"
	"sync"

	"google.golang.org/grpc/test/bufconn"
)

// memNet carries a cluster's connections in memory (Options.InMemory):
// each node listens on a bufconn listener under a made-up loopback
// address, and every dial, the nodes' and the test's clients', reaches
// it by that address. A goroutine waiting on such a connection is
// durably blocked, as testing/synctest requires to advance its virtual
// clock; one waiting on a socket is not.
type memNet struct {
	mu        sync.Mutex
	listeners map[string]*bufconn.Listener
}

// memBuffer is each direction's buffer of a connection: a gRPC window's
// worth, so that a large AppendEntries does not wait on its reader byte
// by byte.
const memBuffer = 1 << 20

func newMemNet() *memNet { return &memNet{listeners: map[string]*bufconn.Listener{}} }

// listen makes node i's listener. The address is an IP literal, so that
// gRPC's resolver needs no lookup; nothing listens on it for real.
func (m *memNet) listen(i int) (net.Listener, string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	addr := fmt.Sprintf("127.0.0.1:%d", 1+i)
	l := bufconn.Listen(memBuffer)
	m.listeners[addr] = l
	return memListener{Listener: l, addr: addr}, addr
}

// relisten replaces node i's listener after a kill (its old one closed
// with the node).
func (m *memNet) relisten(addr string) net.Listener {
	m.mu.Lock()
	defer m.mu.Unlock()
	l := bufconn.Listen(memBuffer)
	m.listeners[addr] = l
	return memListener{Listener: l, addr: addr}
}

func (m *memNet) dial(ctx context.Context, addr string) (net.Conn, error) {
	m.mu.Lock()
	l := m.listeners[addr]
	m.mu.Unlock()
	if l == nil {
		return nil, fmt.Errorf("nodetest: nothing listens on %s", addr)
	}
	return l.DialContext(ctx)
}

// memListener reports the address the node was given, not bufconn's.
type memListener struct {
	*bufconn.Listener
	addr string
}

func (l memListener) Addr() net.Addr { return memAddr(l.addr) }

type memAddr string

func (a memAddr) Network() string { return "tcp" }
func (a memAddr) String() string  { return string(a) }
