// Package cluster runs a quorumbus cluster as real processes for the
// chaos tests: three `quorumbus node` and one `quorumbus frontend`, each
// started from one binary built from this checkout, and the network they
// talk over, which the nemeses cut.
package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// Network is where the cluster's processes live: what address each
// member has, how to start a process as a member, how the harness reaches
// a member, and (when it can) how to cut the link between two members.
type Network interface {
	// Mode is "netns" or "loopback", for the report.
	Mode() string
	// Host is member m's IP address.
	Host(m int) string
	// Command prepares a process that runs as member m.
	Command(m int, name string, args ...string) *exec.Cmd
	// DialContext dials addr from inside member m's network: the harness
	// reaches each member from its own side, so a cut never hides a
	// member from the harness.
	DialContext(m int) func(ctx context.Context, network, addr string) (net.Conn, error)
	// Cut drops every packet between members a and b, both ways, until
	// Heal. It fails on a network that cannot cut links.
	Cut(a, b int) error
	// CutOneWay drops every packet member from sends to member to, until
	// Heal; to's packets still reach from. (Over TCP that still stalls
	// both directions of every connection between them, once the
	// acknowledgements from is to send stop arriving; UDP, the gossip's
	// probes, is cut one way only.)
	CutOneWay(from, to int) error
	// LossyPair drops a random share (percent) of the packets between
	// members a and b, both ways, until Heal: a lossy link between two
	// nodes while every other link is clean. TCP turns the loss into
	// retransmissions and stalls, as on a flaky cable.
	LossyPair(a, b, percent int) error
	// Heal restores every cut link.
	Heal() error
	Close() error
}

// ErrNoPartitions is Cut's error on a network that cannot cut links.
var ErrNoPartitions = errors.New("cluster: this network cannot cut links")

// Loopback puts every member on 127.0.0.1. It needs no privileges and
// cannot partition: processes, pauses and kills only.
type Loopback struct{}

func (Loopback) Mode() string    { return "loopback" }
func (Loopback) Host(int) string { return "127.0.0.1" }
func (Loopback) Command(_ int, name string, args ...string) *exec.Cmd {
	return exec.Command(name, args...)
}
func (Loopback) Cut(int, int) error       { return ErrNoPartitions }
func (Loopback) CutOneWay(int, int) error { return ErrNoPartitions }
func (Loopback) LossyPair(int, int, int) error {
	return ErrNoPartitions
}
func (Loopback) Heal() error  { return nil }
func (Loopback) Close() error { return nil }
func (Loopback) DialContext(int) func(context.Context, string, string) (net.Conn, error) {
	return (&net.Dialer{}).DialContext
}

// Netns gives each member its own network namespace with one veth on a
// bridge that lives in a hub namespace of its own, so nothing is added
// to the machine's own namespace and the addresses (10.99.0.0/24) cannot
// clash with another run's: each run has its own bridge. A cut is a pair
// of blackhole routes, one in each member's namespace; that needs only
// iproute2, no iptables. A connect across a cut fails at once (the
// kernel refuses to route it); packets of an established connection are
// dropped silently, as in a real partition, until TCP or the process's
// own timeouts give up.
//
// It needs root. Names start with "qbj<pid>-" so that a later run can
// delete what a killed run left behind (ReapStale).
type Netns struct {
	prefix  string
	members int
	mu      sync.Mutex
	cuts    map[[2]int]bool
	oneWay  map[[2]int]bool
	lossy   map[[2]int]string // from, to → the rule's probability, to delete it by
}

const netnsPrefix = "qbj"

// NewNetns creates the hub, the bridge and one namespace per member.
func NewNetns(members int) (*Netns, error) {
	n := &Netns{prefix: fmt.Sprintf("%s%d-", netnsPrefix, os.Getpid()), members: members, cuts: map[[2]int]bool{}, oneWay: map[[2]int]bool{}, lossy: map[[2]int]string{}}
	hub := n.prefix + "hub"
	steps := [][]string{
		{"netns", "add", hub},
		{"-n", hub, "link", "set", "lo", "up"},
		{"-n", hub, "link", "add", "br0", "type", "bridge"},
		{"-n", hub, "link", "set", "br0", "up"},
	}
	for m := range members {
		ns := n.ns(m)
		veth := fmt.Sprintf("v%d", m)
		steps = append(steps,
			[]string{"netns", "add", ns},
			[]string{"-n", ns, "link", "set", "lo", "up"},
			[]string{"-n", hub, "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns},
			[]string{"-n", hub, "link", "set", veth, "master", "br0", "up"},
			[]string{"-n", ns, "addr", "add", n.Host(m) + "/24", "dev", "eth0"},
			[]string{"-n", ns, "link", "set", "eth0", "up"},
		)
	}
	for _, s := range steps {
		if err := ip(s...); err != nil {
			n.Close()
			return nil, err
		}
	}
	return n, nil
}

func (n *Netns) ns(m int) string { return fmt.Sprintf("%sm%d", n.prefix, m) }

func (n *Netns) Mode() string { return "netns" }

func (n *Netns) Host(m int) string { return fmt.Sprintf("10.99.0.%d", 10+m) }

func (n *Netns) Command(m int, name string, args ...string) *exec.Cmd {
	// ip netns exec execs the program, so the process we hold is it.
	return exec.Command("ip", append([]string{"netns", "exec", n.ns(m), name}, args...)...)
}

func (n *Netns) Cut(a, b int) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := ip("-n", n.ns(a), "route", "add", "blackhole", n.Host(b)+"/32"); err != nil {
		return err
	}
	if err := ip("-n", n.ns(b), "route", "add", "blackhole", n.Host(a)+"/32"); err != nil {
		ip("-n", n.ns(a), "route", "del", "blackhole", n.Host(b)+"/32")
		return err
	}
	n.cuts[[2]int{a, b}] = true
	return nil
}

// CutOneWay adds an iptables rule in from's namespace that drops what it
// sends to to's address. A blackhole route cannot do this: a route also
// refuses from's answers to to's packets, so it cuts both ways. The rule
// lives in the member's own namespace and goes with it.
func (n *Netns) CutOneWay(from, to int) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.iptables(from, "-A", "OUTPUT", "-d", n.Host(to)+"/32", "-j", "DROP"); err != nil {
		return err
	}
	n.oneWay[[2]int{from, to}] = true
	return nil
}

// LossyPair adds, in each of the two namespaces, an iptables rule that
// drops the given share of what the member sends to the other (the
// statistic match, drawn per packet).
func (n *Netns) LossyPair(a, b, percent int) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	p := fmt.Sprintf("%.2f", float64(percent)/100)
	for _, c := range [][2]int{{a, b}, {b, a}} {
		if err := n.iptables(c[0], lossyRule("-A", n.Host(c[1]), p)...); err != nil {
			return err
		}
		n.lossy[c] = p
	}
	return nil
}

func lossyRule(op, to, probability string) []string {
	return []string{op, "OUTPUT", "-d", to + "/32", "-m", "statistic", "--mode", "random", "--probability", probability, "-j", "DROP"}
}

func (n *Netns) iptables(m int, args ...string) error {
	var stderr bytes.Buffer
	cmd := n.Command(m, "iptables", append([]string{"-w"}, args...)...)
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("iptables %s in %s: %v: %s", strings.Join(args, " "), n.ns(m), err, bytes.TrimSpace(stderr.Bytes()))
	}
	return nil
}

func (n *Netns) Heal() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	var errs []error
	for c := range n.oneWay {
		errs = append(errs, n.iptables(c[0], "-D", "OUTPUT", "-d", n.Host(c[1])+"/32", "-j", "DROP"))
		delete(n.oneWay, c)
	}
	for c, p := range n.lossy {
		errs = append(errs, n.iptables(c[0], lossyRule("-D", n.Host(c[1]), p)...))
		delete(n.lossy, c)
	}
	for c := range n.cuts {
		errs = append(errs,
			ip("-n", n.ns(c[0]), "route", "del", "blackhole", n.Host(c[1])+"/32"),
			ip("-n", n.ns(c[1]), "route", "del", "blackhole", n.Host(c[0])+"/32"))
		delete(n.cuts, c)
	}
	return errors.Join(errs...)
}

// Close deletes the namespaces. The processes in them must have exited:
// a namespace lives on while a process is in it.
func (n *Netns) Close() error {
	return deleteNamespaces(func(name string) bool { return strings.HasPrefix(name, n.prefix) })
}

// DialContext dials from a thread that has entered member m's namespace:
// a socket belongs to the namespace of the thread that created it, and
// stays there when the thread goes back.
func (n *Netns) DialContext(m int) func(ctx context.Context, network, addr string) (net.Conn, error) {
	path := "/run/netns/" + n.ns(m)
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		type result struct {
			c   net.Conn
			err error
		}
		ch := make(chan result, 1)
		go func() {
			runtime.LockOSThread()
			c, err, back := dialIn(ctx, path, network, addr)
			if back {
				runtime.UnlockOSThread()
			} // else the thread is still in the namespace: leaving it locked makes the runtime end it with this goroutine
			ch <- result{c, err}
		}()
		r := <-ch
		return r.c, r.err
	}
}

func dialIn(ctx context.Context, path, network, addr string) (_ net.Conn, _ error, back bool) {
	self, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err, true
	}
	defer unix.Close(self)
	target, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err, true
	}
	defer unix.Close(target)
	if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
		return nil, fmt.Errorf("setns %s: %w", path, err), true
	}
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	return c, err, unix.Setns(self, unix.CLONE_NEWNET) == nil
}

// ReapStale deletes the namespaces of earlier runs whose process is gone
// (a run killed before its cleanup). Runs still alive keep theirs.
func ReapStale() error {
	return deleteNamespaces(func(name string) bool {
		rest, ok := strings.CutPrefix(name, netnsPrefix)
		if !ok {
			return false
		}
		pid, err := strconv.Atoi(strings.SplitN(rest, "-", 2)[0])
		if err != nil {
			return false
		}
		return syscall.Kill(pid, 0) == syscall.ESRCH
	})
}

func deleteNamespaces(match func(string) bool) error {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return err
	}
	var errs []error
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if len(f) > 0 && match(f[0]) {
			errs = append(errs, ip("netns", "del", f[0]))
		}
	}
	return errors.Join(errs...)
}

// IptablesAvailable says whether one-way cuts (CutOneWay) can be made:
// the iptables command (Debian's iptables package).
func IptablesAvailable() error {
	_, err := exec.LookPath("iptables")
	return err
}

// NetnsAvailable says whether this machine can run Netns: root and the
// ip command. Without them the tests use Loopback and say so.
func NetnsAvailable() error {
	if os.Geteuid() != 0 {
		return errors.New("not root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return err
	}
	// Root may still lack the right to make namespaces (a container
	// without CAP_NET_ADMIN): try one.
	probe := fmt.Sprintf("qbjprobe%d", os.Getpid())
	if err := ip("netns", "add", probe); err != nil {
		return err
	}
	return ip("netns", "del", probe)
}

func ip(args ...string) error {
	var stderr bytes.Buffer
	cmd := exec.Command("ip", args...)
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(stderr.Bytes()))
	}
	return nil
}
