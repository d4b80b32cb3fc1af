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
	"strings"
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
	gossipPort = 7946
	httpPort   = 5300
	amqpPort   = 5672
)

// Members: the storage nodes are 0..Nodes-1, the front-end is FE.
const (
	Nodes = 3
	FE    = Nodes
)

// Cluster is three storage nodes and one front-end.
type Cluster struct {
	Net      Network
	Nodes    []*Process
	Frontend *Process
	// GRPC, HTTP: each node's listeners; AMQP, FEHTTP: the front-end's.
	GRPC, HTTP   []string
	AMQP, FEHTTP string
	bin, dir     string
}

// Build compiles cmd/quorumbus of the checkout at root into dir once per
// run: every process of the run execs this one binary.
func Build(root, dir string) (string, error) {
	bin := filepath.Join(dir, "quorumbus")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/quorumbus")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
}

// New lays out the cluster on net: data and logs under dir. Nothing runs
// until Start.
func New(net Network, bin, dir string) (*Cluster, error) {
	c := &Cluster{Net: net, bin: bin, dir: dir}
	addr := func(m, port int) (string, error) {
		if net.Mode() == "netns" {
			return fmt.Sprintf("%s:%d", net.Host(m), port), nil
		}
		return freeAddr()
	}
	var gossip, boot []string
	for i := range Nodes {
		g, err1 := addr(i, grpcPort)
		s, err2 := addr(i, gossipPort)
		h, err3 := addr(i, httpPort)
		if err := errors.Join(err1, err2, err3); err != nil {
			return nil, err
		}
		c.GRPC, c.HTTP, gossip = append(c.GRPC, g), append(c.HTTP, h), append(gossip, s)
		boot = append(boot, fmt.Sprintf("n%d=%s", i+1, g))
	}
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o755); err != nil {
		return nil, err
	}
	for i := range Nodes {
		id := fmt.Sprintf("n%d", i+1)
		c.Nodes = append(c.Nodes, &Process{Name: id, net: net, member: i, bin: bin,
			log: filepath.Join(dir, "logs", id+".log"),
			args: []string{"node", "-id", id, "-data", filepath.Join(dir, "data", id),
				"-grpc-addr", c.GRPC[i], "-gossip-addr", gossip[i], "-http-addr", c.HTTP[i],
				"-join", strings.Join(gossip, ","), "-bootstrap", strings.Join(boot, ","),
				"-groups", "1", "-log-level", "warn"}})
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
			"-placement", strings.Join(c.GRPC, ","), "-sas-rules", rules, "-throttle-credits", "0", "-log-level", "warn"}}
	return c, nil
}

// Start starts every process and waits until each is ready (/readyz).
func (c *Cluster) Start(ctx context.Context) error {
	for _, p := range append(append([]*Process(nil), c.Nodes...), c.Frontend) {
		if err := p.Start(); err != nil {
			return err
		}
	}
	for i := range Nodes {
		if err := c.WaitReady(ctx, i, c.HTTP[i]); err != nil {
			return fmt.Errorf("n%d: %w", i+1, err)
		}
	}
	return c.WaitReady(ctx, FE, c.FEHTTP)
}

// Stop ends every process; the cluster cannot start again.
func (c *Cluster) Stop() {
	for _, p := range append(append([]*Process(nil), c.Nodes...), c.Frontend) {
		p.Stop()
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
		args := append([]string{"queue", "create", "-placement", c.GRPC[0]}, flags...)
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

func (c *Cluster) grpcConn(i int) (*grpc.ClientConn, error) {
	return grpc.NewClient("passthrough:///"+c.GRPC[i], grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return c.Net.DialContext(i)(ctx, "tcp", addr)
		}))
}

// QueueGroup asks placement which partition group holds queue.
func (c *Cluster) QueueGroup(ctx context.Context, queue string) (uint64, error) {
	var errs []error
	for i := range Nodes {
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
	for i := range Nodes {
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
		// refuses with FailedPrecondition.
		switch status.Code(err) {
		case codes.OK, codes.NotFound:
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
