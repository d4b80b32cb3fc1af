package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/quorumbus/quorumbus/placement/sas"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// Ports every member uses on its own address in netns mode. In loopback
// mode the members share 127.0.0.1 and get free ports instead.
const (
	grpcPort   = 7101
	proxyPort  = 7102 // the node's link proxy, when Options.Proxies
	gossipPort = 7946
	httpPort   = 5300
	amqpPort   = 5672
)

// Members: the storage nodes the cluster starts with are 0..Nodes-1, the
// front-end is FE, and the spare nodes (Options.Spares) come after it.
// Node i of Cluster.Nodes is member Cluster.Member(i).
const (
	Nodes = 3
	FE    = Nodes
)

// Members is how many network members a cluster with spares spare nodes
// has (what NewNetns needs).
func Members(spares int) int { return Nodes + 1 + spares }

// Options shapes a cluster beyond its three nodes and front-end.
type Options struct {
	// Spares are nodes laid out but not started: AddNode starts the next
	// one, which joins by gossip (membership faults).
	Spares int
	// Proxies puts a link proxy (cmd/linkproxy) in front of every node:
	// the node advertises the proxy's address, so its peers and the
	// front-end reach it only through it, and Toxic can slow or break
	// every link into and out of that node.
	Proxies bool
	// SimulateMachines runs every node as if on a machine of its own
	// (node.ChaosSimulateMachine), so that CrashMachine can lose what its
	// logs have not fsynced.
	SimulateMachines bool
}

// Cluster is three storage nodes (and spares) and one front-end.
type Cluster struct {
	Net      Network
	Nodes    []*Process
	Frontend *Process
	// GRPC, HTTP: each node's listeners; AMQP, FEHTTP: the front-end's.
	// GRPC is the address the cluster reaches a node at (its proxy's with
	// Options.Proxies); the harness's own calls go to direct.
	GRPC, HTTP   []string
	AMQP, FEHTTP string
	direct       []string
	proxies      []*LinkProxy
	opts         Options
	bin, dir     string

	mu      sync.Mutex
	joined  int   // nodes started so far (Nodes, then one more per AddNode)
	boots   []int // machine boots per node, for the simulated boot id
	offsets []time.Duration
}

// Build compiles cmd/quorumbus of the checkout at root into dir once per
// run, with the chaos suite's hooks (-tags chaostest: a skewed clock, a
// simulated machine crash; node/chaos.go), and the suite's link proxy
// (cmd/linkproxy of this module): every process of the run execs one of
// these two binaries.
func Build(root, dir string) (string, error) {
	bin := filepath.Join(dir, "quorumbus")
	cmd := exec.Command("go", "build", "-tags", "chaostest", "-o", bin, "./cmd/quorumbus")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	cmd = exec.Command("go", "build", "-o", filepath.Join(dir, "linkproxy"), "./cmd/linkproxy")
	cmd.Dir = filepath.Join(root, "tests", "jepsen")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build linkproxy: %v\n%s", err, out)
	}
	return bin, nil
}

// New lays out the cluster on net: data and logs under dir. Nothing runs
// until Start.
func New(net Network, bin, dir string, opts Options) (*Cluster, error) {
	total := Nodes + opts.Spares
	c := &Cluster{Net: net, bin: bin, dir: dir, opts: opts, joined: Nodes,
		boots: make([]int, total), offsets: make([]time.Duration, total)}
	addr := func(m, port int) (string, error) {
		if net.Mode() == "netns" {
			return fmt.Sprintf("%s:%d", net.Host(m), port), nil
		}
		return freeAddr()
	}
	var gossip, boot []string
	for i := range total {
		m := c.Member(i)
		g, err1 := addr(m, grpcPort)
		s, err2 := addr(m, gossipPort)
		h, err3 := addr(m, httpPort)
		adv, err4 := g, error(nil)
		if opts.Proxies {
			adv, err4 = addr(m, proxyPort)
		}
		if err := errors.Join(err1, err2, err3, err4); err != nil {
			return nil, err
		}
		c.direct, c.GRPC, c.HTTP, gossip = append(c.direct, g), append(c.GRPC, adv), append(c.HTTP, h), append(gossip, s)
		if i < Nodes {
			boot = append(boot, fmt.Sprintf("n%d=%s", i+1, adv))
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o755); err != nil {
		return nil, err
	}
	for i := range total {
		id := fmt.Sprintf("n%d", i+1)
		p := &Process{Name: id, net: net, member: c.Member(i), bin: bin,
			log: filepath.Join(dir, "logs", id+".log"),
			args: []string{"node", "-id", id, "-data", filepath.Join(dir, "data", id),
				"-grpc-addr", c.direct[i], "-advertise-addr", c.GRPC[i], "-gossip-addr", gossip[i], "-http-addr", c.HTTP[i],
				// A spare joins by gossip: the bootstrap list does not name it.
				"-join", strings.Join(gossip[:Nodes], ","), "-bootstrap", strings.Join(boot, ","),
				"-groups", "1", "-log-level", "warn", plainCluster}}
		p.env = func() []string { return c.nodeEnv(i) }
		c.Nodes = append(c.Nodes, p)
	}
	var err1, err2 error
	c.AMQP, err1 = addr(FE, amqpPort)
	c.FEHTTP, err2 = addr(FE, httpPort)
	if err := errors.Join(err1, err2); err != nil {
		return nil, err
	}
	// The workload's clients log in with the emulator's rule (SASL PLAIN).
	rules := filepath.Join(dir, "sas-rules.json")
	ruleJSON := fmt.Sprintf(`{"AuthorizationRules": [{"Name": %q, "Rights": ["Listen", "Send", "Manage"], "PrimaryKey": %q}]}`, sas.DevKeyName, sas.DevKey)
	if err := os.WriteFile(rules, []byte(ruleJSON), 0o600); err != nil {
		return nil, err
	}
	c.Frontend = &Process{Name: "fe", net: net, member: FE, bin: bin,
		log: filepath.Join(dir, "logs", "fe.log"),
		args: []string{"frontend", "-amqp-addr", c.AMQP, "-http-addr", c.FEHTTP,
			"-placement", strings.Join(c.GRPC[:Nodes], ","), "-sas-rules", rules, "-throttle-credits", "0", "-log-level", "warn", plainCluster}}
	return c, nil
}

// plainCluster runs the harness's cluster plane in plain text: the
// harness tests replication under faults, not the plane's mutual TLS
// (cmd/quorumbus TestClusterMutualTLS does), and its checkers read the
// nodes' gRPC (Digest) without a certificate. Processes refuse to start
// without certificates unless told so.
const plainCluster = "-plain-cluster"

// Member is node i's member index on the network.
func (c *Cluster) Member(i int) int {
	if i < Nodes {
		return i
	}
	return i + 1
}

// Joined lists the nodes started so far: the first Nodes, then each
// spare AddNode started. The nemeses aim at these.
func (c *Cluster) Joined() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]int, c.joined)
	for i := range out {
		out[i] = i
	}
	return out
}

// nodeEnv is node i's environment for its next start: its clock offset
// and, with SimulateMachines, its machine's boot id.
func (c *Cluster) nodeEnv(i int) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var env []string
	if d := c.offsets[i]; d != 0 {
		env = append(env, "QUORUMBUS_CHAOS_CLOCK_OFFSET="+d.String())
	}
	if c.opts.SimulateMachines {
		env = append(env, fmt.Sprintf("QUORUMBUS_CHAOS_BOOT_ID=%s-boot%d", c.Nodes[i].Name, c.boots[i]))
	}
	return env
}

// SetClockOffset sets the clock offset node i starts with from its next
// start on (0: its machine's clock).
func (c *Cluster) SetClockOffset(i int, d time.Duration) {
	c.mu.Lock()
	c.offsets[i] = d
	c.mu.Unlock()
}

// CrashMachine crashes node i's simulated machine: the node loses what its
// logs wrote and did not fsync, and exits; its next start is a new boot
// of its machine. It returns what the node said it lost.
func (c *Cluster) CrashMachine(i int) (string, error) {
	if !c.opts.SimulateMachines {
		return "", errors.New("cluster: machines are not simulated (Options.SimulateMachines)")
	}
	said, err := c.Nodes[i].CrashMachine()
	c.mu.Lock()
	c.boots[i]++
	c.mu.Unlock()
	return said, err
}

// startNode starts node i and, with Proxies, its link proxy first.
func (c *Cluster) startNode(i int) error {
	if c.opts.Proxies {
		lp, err := StartLinkProxy(c.Net, c.Member(i), filepath.Join(filepath.Dir(c.bin), "linkproxy"), c.GRPC[i], c.direct[i],
			filepath.Join(c.dir, "logs", c.Nodes[i].Name+"-proxy.log"))
		if err != nil {
			return fmt.Errorf("%s proxy: %w", c.Nodes[i].Name, err)
		}
		c.mu.Lock()
		c.proxies = append(c.proxies, lp)
		c.mu.Unlock()
		c.Nodes[i].proxy = lp
	}
	return c.Nodes[i].Start()
}

// Toxic adds a toxiproxy toxic (its JSON) to node i's link proxy: every
// link into and out of node i.
func (c *Cluster) Toxic(i int, toxic string) error {
	lp := c.Nodes[i].proxy
	if lp == nil {
		return errors.New("cluster: no link proxies (Options.Proxies)")
	}
	return lp.Do("toxic " + toxic)
}

// ClearToxics removes every toxic of every node's link proxy.
func (c *Cluster) ClearToxics() error {
	c.mu.Lock()
	ps := slices.Clone(c.proxies)
	c.mu.Unlock()
	var errs []error
	for _, lp := range ps {
		errs = append(errs, lp.Do("clear"))
	}
	return errors.Join(errs...)
}

// Start starts every process and waits until each is ready (/readyz).
func (c *Cluster) Start(ctx context.Context) error {
	for i := range Nodes {
		if err := c.startNode(i); err != nil {
			return err
		}
	}
	if err := c.Frontend.Start(); err != nil {
		return err
	}
	return c.WaitAllReady(ctx)
}

// WaitAllReady waits until every joined node and the front-end are ready.
func (c *Cluster) WaitAllReady(ctx context.Context) error {
	var errs []error
	for _, i := range c.Joined() {
		if err := c.WaitReady(ctx, c.Member(i), c.HTTP[i]); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", c.Nodes[i].Name, err))
		}
	}
	if err := c.WaitReady(ctx, FE, c.FEHTTP); err != nil {
		errs = append(errs, fmt.Errorf("front-end: %w", err))
	}
	return errors.Join(errs...)
}

// Stop ends every process; the cluster cannot start again.
func (c *Cluster) Stop() {
	for _, p := range append(append([]*Process(nil), c.Nodes...), c.Frontend) {
		p.Stop()
	}
	c.mu.Lock()
	ps := c.proxies
	c.proxies = nil
	c.mu.Unlock()
	for _, lp := range ps {
		lp.Stop()
	}
}

// WaitReady polls member m's /readyz at addr until it answers 200.
func (c *Cluster) WaitReady(ctx context.Context, m int, addr string) error {
	client := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{DialContext: c.Net.DialContext(m), DisableKeepAlives: true}}
	var last string
	for {
		resp, err := client.Get("http://" + addr + "/readyz")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = strings.TrimSpace(string(body))
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not ready: %s", last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// CreateQueue creates a queue through the CLI, run as the front-end
// member, until it succeeds or exists.
func (c *Cluster) CreateQueue(ctx context.Context, name string, flags ...string) error {
	var last []byte
	for {
		args := append([]string{"queue", "create", "-placement", c.direct[0]}, flags...)
		out, err := c.Net.Command(FE, c.bin, append(args, name)...).CombinedOutput()
		if err == nil || strings.Contains(strings.ToLower(string(out)), "already exists") {
			return nil
		}
		last = out
		select {
		case <-ctx.Done():
			return fmt.Errorf("queue create %s: %s", name, last)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// DialAMQP opens a TCP connection to the front-end's AMQP listener.
func (c *Cluster) DialAMQP(ctx context.Context) (net.Conn, error) {
	return c.Net.DialContext(FE)(ctx, "tcp", c.AMQP)
}

// grpcConn dials node i directly, past its link proxy: the harness's
// questions are not slowed by the faults it injects.
func (c *Cluster) grpcConn(i int) (*grpc.ClientConn, error) {
	m := c.Member(i)
	return grpc.NewClient("passthrough:///"+c.direct[i], grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return c.Net.DialContext(m)(ctx, "tcp", addr)
		}))
}

// QueueGroup asks placement which partition group holds queue.
func (c *Cluster) QueueGroup(ctx context.Context, queue string) (uint64, error) {
	var errs []error
	for _, i := range c.Joined() {
		cc, err := c.grpcConn(i)
		if err != nil {
			return 0, err
		}
		sctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		e, err := placementpb.NewPlacementServiceClient(cc).GetEntity(sctx, &placementpb.GetEntityRequest{Name: queue})
		cancel()
		cc.Close()
		if err == nil && len(e.PartitionGroups) > 0 {
			return e.PartitionGroups[0], nil
		}
		errs = append(errs, err)
	}
	return 0, errors.Join(errs...)
}

// Leader says which node leads group, or -1 when none answers as its
// leader within a second each (an election, a paused leader).
func (c *Cluster) Leader(ctx context.Context, group uint64) int {
	for _, i := range c.Joined() {
		if !c.Nodes[i].Running() || c.Nodes[i].Paused() {
			continue
		}
		cc, err := c.grpcConn(i)
		if err != nil {
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err = partitionpb.NewPartitionServiceClient(cc).Stats(sctx, &partitionpb.StatsRequest{GroupId: group})
		cancel()
		cc.Close()
		// The leader answers (NotFound is an answer too); a follower
		// refuses with FailedPrecondition. A node that holds no replica
		// of the group (a spare, a drained node) says NotFound too, with
		// the node's "group not found".
		st := status.Convert(err)
		switch {
		case st.Code() == codes.NotFound && strings.Contains(st.Message(), "group not found"):
		case st.Code() == codes.OK, st.Code() == codes.NotFound:
			return i
		}
	}
	return -1
}

// TransferLeader asks node from, the group's leader, to hand its
// leadership to node to (the GroupMembership service placement uses to
// spread leaders).
func (c *Cluster) TransferLeader(ctx context.Context, group uint64, from, to int) error {
	cc, err := c.grpcConn(from)
	if err != nil {
		return err
	}
	defer cc.Close()
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = partitionpb.NewGroupMembershipClient(cc).ChangeReplica(sctx, &partitionpb.ChangeReplicaRequest{
		GroupId: group, Change: partitionpb.ReplicaChange_REPLICA_CHANGE_LEAD, NodeId: c.Nodes[to].Name, Addr: c.GRPC[to],
	})
	return err
}

// freeAddr returns a loopback address whose port was free a moment ago
// (a process keeps its address across restarts, so it cannot take :0).
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}
