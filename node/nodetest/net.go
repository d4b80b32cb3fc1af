package nodetest

import (
	"context"
	"net"
	"sync"
)

// Net stands between the nodes of a cluster started with Options.Cuttable:
// every connection a node dials to a peer goes through it, so that a test
// can cut nodes off from the others (a network partition) and heal the cut.
//
// A cut holds bytes rather than breaking connections: what a node writes
// towards the other side, and what it would read from there, waits until
// the cut heals, as TCP retransmits across a partition that ends before its
// timeouts. A connection dialed across a cut waits as well, as a dropped
// SYN does. Only the dialing end is wrapped; since every byte of a
// connection passes through that end, holding it there cuts both
// directions. The clients of Cluster.Client dial the nodes directly: a
// node cut off from its peers still hears from clients, as a leader
// partitioned from its followers may.
type Net struct {
	mu      sync.Mutex
	cut     map[string]bool // addresses cut off from every other node
	deaf    map[string]bool // addresses no other node's connections reach
	changed chan struct{}   // closed and replaced when cut or deaf changes
}

func newNet() *Net {
	return &Net{cut: map[string]bool{}, deaf: map[string]bool{}, changed: make(chan struct{})}
}

// Deafen holds the connections other nodes open to the node at addr,
// while the ones it opens itself carry on: the node is heard, over its
// own connections, but cannot hear anyone who calls it (a firewall rule
// on its port, a broken return route).
func (n *Net) Deafen(addr string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.deaf[addr] = true
	n.changedLocked()
}

// Cut cuts the node at addr off from every other node.
func (n *Net) Cut(addr string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.cut[addr] = true
	n.changedLocked()
}

// Heal ends every cut and deafness.
func (n *Net) Heal() {
	n.mu.Lock()
	defer n.mu.Unlock()
	clear(n.cut)
	clear(n.deaf)
	n.changedLocked()
}

// IsCut reports whether the node at addr is cut off.
func (n *Net) IsCut(addr string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cut[addr]
}

func (n *Net) changedLocked() {
	close(n.changed)
	n.changed = make(chan struct{})
}

// wait blocks while a cut lies between from and to, until done is closed.
func (n *Net) wait(from, to string, done <-chan struct{}) error {
	for {
		n.mu.Lock()
		blocked := n.cut[from] || n.cut[to] || n.deaf[to]
		changed := n.changed
		n.mu.Unlock()
		if !blocked {
			return nil
		}
		select {
		case <-changed:
		case <-done:
			return net.ErrClosed
		}
	}
}

// dialer returns the dial function of the node at from.
func (n *Net) dialer(from string) func(context.Context, string) (net.Conn, error) {
	return func(ctx context.Context, to string) (net.Conn, error) {
		if err := n.wait(from, to, ctx.Done()); err != nil {
			return nil, ctx.Err()
		}
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", to)
		if err != nil {
			return nil, err
		}
		return &cutConn{Conn: c, net: n, from: from, to: to, closed: make(chan struct{})}, nil
	}
}

// cutConn is the dialing end of a connection between two nodes.
type cutConn struct {
	net.Conn
	net      *Net
	from, to string

	closeOnce sync.Once
	closed    chan struct{}
}

// Read returns what arrived only once no cut lies between the two nodes.
func (c *cutConn) Read(p []byte) (int, error) {
	k, err := c.Conn.Read(p)
	if k > 0 {
		if werr := c.net.wait(c.from, c.to, c.closed); werr != nil {
			return 0, werr
		}
	}
	return k, err
}

// Write sends only once no cut lies between the two nodes.
func (c *cutConn) Write(p []byte) (int, error) {
	if err := c.net.wait(c.from, c.to, c.closed); err != nil {
		return 0, err
	}
	return c.Conn.Write(p)
}

func (c *cutConn) Close() error {
	c.closeOnce.Do(func() { close(c.closed) })
	return c.Conn.Close()
}
