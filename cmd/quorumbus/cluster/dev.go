package cluster

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/grpc/status"

	"github.com/quorumbus/quorumbus/cmd/quorumbus/adminhttp"
	"github.com/quorumbus/quorumbus/frontend"
	"github.com/quorumbus/quorumbus/frontend/certs"
	"github.com/quorumbus/quorumbus/frontend/routing"
	"github.com/quorumbus/quorumbus/gateway"
	"github.com/quorumbus/quorumbus/placement/membership"
	"github.com/quorumbus/quorumbus/placement/sas"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
	"github.com/quorumbus/quorumbus/proto/placementpb"
	"github.com/quorumbus/quorumbus/proto/rpcnet"
)

// ConnectionString is what the SDKs connect to dev mode with, given the
// front-end's AMQP address: the emulator's rule and well-known key, which
// dev mode serves (sas.DevRule).
func ConnectionString(amqpAddr string) string {
	return RuleConnectionString(amqpAddr, sas.DevKeyName, sas.DevKey)
}

// RuleConnectionString is an emulator-style (plain AMQP) connection string
// for a rule's name and key.
func RuleConnectionString(amqpAddr, keyName, key string) string {
	return fmt.Sprintf("Endpoint=sb://%s;SharedAccessKeyName=%s;SharedAccessKey=%s;UseDevelopmentEmulator=true", amqpAddr, keyName, key)
}

// TLSConnectionString is a connection string for a rule's name and key
// whose SDKs dial amqps://<amqpsAddr> (no UseDevelopmentEmulator).
func TLSConnectionString(amqpsAddr, keyName, key string) string {
	return fmt.Sprintf("Endpoint=sb://%s;SharedAccessKeyName=%s;SharedAccessKey=%s", amqpsAddr, keyName, key)
}

// DevOptions configures a whole cluster in one process.
type DevOptions struct {
	DataDir  string
	AMQPAddr string
	// AMQPSAddr is the AMQP-over-TLS listener (the SDKs' amqps:// without
	// UseDevelopmentEmulator); empty: none. It serves TLSCert and TLSKey,
	// reloaded when they change, or without them a certificate of a CA
	// that dev mode makes under DataDir/tls (Dev.CAFile).
	AMQPSAddr       string
	TLSCert, TLSKey string
	HTTPAddr        string // admin HTTP listener (cmd/quorumbus/adminhttp); empty: none
	Pprof           bool   // serve /debug/pprof/ on it
	// Declare names the queues the caller will create (--config); the
	// process is not ready until it called Dev.Declared.Created and the
	// routing table has them.
	Declare  []QueueSpec
	Nodes    int
	NodePort int // gRPC port of the first node, the others follow; 0 picks free ports
	Groups   int
	// MaxReplicasPerNode is StorageOptions.MaxReplicasPerNode of every
	// node (0: Groups only).
	MaxReplicasPerNode int
	CacheMB            int64
	// GoneAfter is StorageOptions.GoneAfter of every node.
	GoneAfter time.Duration
	LogLevel  string
	// LeaderSyncFirst: leaders fsync before they replicate
	// (node.Config.LeaderSyncFirst).
	LeaderSyncFirst bool
	// RaftMetrics collects hashicorp/raft's timers and serves them on
	// the HTTP listener at /debug/raft-metrics (raftmetrics.go).
	RaftMetrics bool
	// MaxConnections is frontend.Config.MaxConnections.
	MaxConnections int
	// ThrottleCredits is frontend.Config.ThrottleCredits (0: off); the
	// admin API (the gateway) spends the same credits, 10 a request.
	ThrottleCredits int64
	// SessionAcceptWait is frontend.Config.SessionAcceptWait (0: its
	// default).
	SessionAcceptWait time.Duration
	// PeekMaxBytes is frontend.Config.PeekMaxBytes (0: its default).
	PeekMaxBytes int
	// FrontendOverGRPC makes the front-end reach the storage nodes over
	// gRPC, as a `quorumbus frontend` process does, instead of calling the
	// in-process PartitionService directly.
	FrontendOverGRPC bool
	// PlainCluster turns the cluster plane's mutual TLS off: by default
	// every gRPC connection between the parts (Raft, PartitionService,
	// PlacementService) is mutual TLS with certificates of a cluster CA
	// that dev mode makes under DataDir/cluster-tls (Dev.ClusterTLS).
	PlainCluster bool
}

// devClusterParts are the identities of a dev cluster's parts besides its
// nodes: the front-end, the gateway, and "cli", which the CLI and tests
// present (Dev.Creds); each certificate's role is its name.
var devClusterParts = []certs.DevMember{{Name: "frontend", Role: certs.RoleFrontend}, {Name: "gateway", Role: certs.RoleGateway}, {Name: "cli", Role: certs.RoleCLI}}

// Dev is everything `quorumbus dev` runs.
type Dev struct {
	Storage   []*Storage
	Router    *routing.Router
	Frontend  *frontend.Server
	AMQP      *AMQPListener
	AMQPS     *AMQPListener // nil without DevOptions.AMQPSAddr
	AMQPSAddr string
	CAFile    string // the generated CA clients trust; empty with DevOptions.TLSCert
	Admin     *adminhttp.Server
	Gateway   *gateway.Gateway
	// AdminCert is the PEM file a client of the HTTP listener's HTTPS side
	// trusts: CAFile, or DevOptions.TLSCert.
	AdminCert string
	Declared  *Declared // nil without DevOptions.Declare
	AMQPAddr  string
	NodeAddrs []string
	// Creds dial the nodes as the CLI does (the "cli" certificate of the
	// cluster CA); nil with DevOptions.PlainCluster.
	Creds *rpcnet.Creds
	// ClusterTLS are the files of each part's cluster certificate, by
	// name (dev-1..., frontend, gateway, cli); nil with PlainCluster.
	ClusterTLS map[string]certs.DevFiles

	closers []func()
}

func NewLogger(level string) *slog.Logger {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		l = slog.LevelInfo
	}
	return slog.New(quietRaft{slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l})})
}

func StartDev(ctx context.Context, o DevOptions) (_ *Dev, err error) {
	log := NewLogger(o.LogLevel)
	if o.Nodes < 1 {
		return nil, errors.New("need at least one storage node")
	}
	c := &Dev{}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	ids := make([]string, o.Nodes)
	var members []membership.Member
	lns := make([]net.Listener, o.Nodes)
	for i := range o.Nodes {
		ids[i] = "dev-" + strconv.Itoa(i+1)
		addr := "127.0.0.1:" + strconv.Itoa(o.NodePort+i)
		if o.NodePort == 0 {
			addr = "127.0.0.1:0"
		}
		if lns[i], err = net.Listen("tcp", addr); err != nil {
			return nil, fmt.Errorf("node %s: %w", ids[i], err)
		}
		c.NodeAddrs = append(c.NodeAddrs, lns[i].Addr().String())
		members = append(members, membership.Member{NodeID: ids[i], Role: membership.RoleStorage, GRPCAddr: c.NodeAddrs[i]})
	}
	servers := Servers(ids, c.NodeAddrs)
	creds := map[string]*rpcnet.Creds{}
	if !o.PlainCluster {
		members := slices.Clone(devClusterParts)
		for _, id := range ids {
			members = append(members, certs.DevMember{Name: id, Role: certs.RoleNode})
		}
		if c.ClusterTLS, creds, err = devClusterCreds(filepath.Join(o.DataDir, "cluster-tls"), members, log); err != nil {
			return nil, fmt.Errorf("dev cluster TLS: %w", err)
		}
		c.Creds = creds["cli"]
	}
	for i := range o.Nodes {
		s, err := StartStorage(ctx, StorageOptions{
			ID:                 ids[i],
			DataDir:            filepath.Join(o.DataDir, ids[i]),
			Listener:           lns[i],
			Bootstrap:          servers,
			Members:            StaticMembers(members),
			Groups:             o.Groups,
			MaxReplicasPerNode: o.MaxReplicasPerNode,
			Replicas:           min(o.Nodes, 3),
			GoneAfter:          o.GoneAfter,
			CacheMB:            o.CacheMB,
			LeaderSyncFirst:    o.LeaderSyncFirst,
			Creds:              creds[ids[i]],
			Logger:             log.With("node", ids[i]),
		})
		if err != nil {
			return nil, fmt.Errorf("storage node %s: %w", ids[i], err)
		}
		c.Storage = append(c.Storage, s)
	}
	var local map[string]partitionpb.PartitionServiceServer
	if !o.FrontendOverGRPC {
		local = make(map[string]partitionpb.PartitionServiceServer, len(c.Storage))
		for _, s := range c.Storage {
			local[s.Node.ID()] = s.Node.PartitionService()
		}
	}
	// Dev mode serves the emulator's rule, and whatever rules the CLI
	// adds to the catalog.
	if c.Router, err = routing.New(routing.Config{Placement: c.NodeAddrs, Creds: creds["frontend"], Logger: log, Local: local, Rules: []sas.Rule{sas.DevRule()}}); err != nil {
		return nil, err
	}
	c.Router.Start(ctx)
	if c.Frontend, err = frontend.New(frontend.Config{Backend: c.Router, Rules: c.Router, Logger: log.With("part", "frontend"), MaxConnections: o.MaxConnections, ThrottleCredits: o.ThrottleCredits, SessionAcceptWait: o.SessionAcceptWait, PeekMaxBytes: o.PeekMaxBytes,
		// As the emulator and Service Bus: the JS SDK with a SharedAccessSignature connection string skips SASL.
		AllowNoSASL: true}); err != nil {
		return nil, err
	}
	aln, err := net.Listen("tcp", o.AMQPAddr)
	if err != nil {
		return nil, err
	}
	c.AMQPAddr = aln.Addr().String()
	c.AMQP = ServeAMQP(c.Frontend, aln, log)
	// The AMQPS listener and the HTTPS side of the HTTP listener serve one
	// certificate: the given one, or one the dev CA signs.
	cert, key := o.TLSCert, o.TLSKey
	if cert == "" && key == "" && (o.AMQPSAddr != "" || o.HTTPAddr != "") {
		files, err := certs.GenerateDev(filepath.Join(o.DataDir, "tls"), append(extraHosts(o.AMQPSAddr), extraHosts(o.HTTPAddr)...)...)
		if err != nil {
			return nil, fmt.Errorf("dev TLS certificate: %w", err)
		}
		cert, key, c.CAFile = files.Cert, files.Key, files.CA
	}
	c.AdminCert = cmp.Or(c.CAFile, cert)
	if o.AMQPSAddr != "" {
		tln, err := ListenTLS(o.AMQPSAddr, cert, key, log)
		if err != nil {
			return nil, err
		}
		c.AMQPSAddr = tln.Addr().String()
		c.AMQPS = ServeAMQP(c.Frontend, tln, log)
	}

	placementClient, closePlacement, err := DialPlacementMembers(c.NodeAddrs, creds["gateway"])
	if err != nil {
		return nil, err
	}
	c.closers = append(c.closers, closePlacement)
	// The admin API checks tokens against the same rules as the
	// front-end: the emulator's, and whatever rules the catalog holds. It
	// spends the front-end's credits: one process, one namespace budget,
	// whose throttled requests the front-end's collector reports.
	if c.Gateway, err = gateway.New(gateway.Config{
		Catalog: placementClient, Stats: c.Router, Messages: c.Router, Topology: c.Router, Logger: log.With("part", "gateway"),
		Validator: gateway.RulesValidator{Rules: c.Router}, Credits: c.Frontend.Credits(),
	}); err != nil {
		return nil, err
	}
	collectors := []prometheus.Collector{c.Frontend.Collector(), c.Gateway.Collector()}
	for _, s := range c.Storage {
		collectors = append(collectors, s.Node.Collector())
	}
	metrics, err := MetricsHandler(collectors...)
	if err != nil {
		return nil, err
	}
	admin := adminhttp.Config{Addr: o.HTTPAddr, Pprof: o.Pprof, Logger: log, Probes: FrontendProbes(c.Router), API: c.Gateway,
		Handlers: map[string]http.Handler{"/metrics": metrics}}
	if o.HTTPAddr != "" {
		if admin.TLS, _, err = adminhttp.TLSConfig(cert, key, ""); err != nil {
			return nil, err
		}
	}
	if o.RaftMetrics {
		admin.Handlers["/debug/raft-metrics"] = collectRaftMetrics()
	}
	for _, s := range c.Storage {
		admin.Probes = append(admin.Probes, s.Probes()...)
	}
	c.Admin = adminhttp.New(admin)
	c.Admin.AddChecks(FrontendChecks(c.Router, c.AMQP)...)
	if c.AMQPS != nil {
		c.Admin.AddChecks(adminhttp.Check{Name: "amqps listener", Func: c.AMQPS.Check})
	}
	if len(o.Declare) > 0 {
		c.Declared = NewDeclared(o.Declare, c.Router)
		c.Admin.AddChecks(adminhttp.Check{Name: "declared entities", Func: c.Declared.Check})
	}
	for _, s := range c.Storage {
		c.Admin.AddChecks(s.ReadyChecks()...)
	}
	if err := c.Admin.Start(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// CreateQueues creates queues, topics and subscriptions (in the order
// given: a topic before its subscriptions) through any placement member,
// waiting for the meta group to elect a leader first. Entities that exist
// are left as they are, so that a restart with the same --config is
// harmless. A request the catalog refuses (a filter that does not parse)
// fails at once.
func CreateQueues(ctx context.Context, placementAddrs []string, creds *rpcnet.Creds, queues []QueueSpec, log *slog.Logger) error {
	client, closeFn, err := DialPlacement(placementAddrs[0], creds)
	if err != nil {
		return err
	}
	defer closeFn()
	for _, q := range queues {
		deadline := time.Now().Add(60 * time.Second)
		for {
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			_, err := client.CreateEntity(cctx, &placementpb.CreateEntityRequest{Name: q.Name, Kind: q.Kind, Properties: q.Props, Rules: q.Rules})
			cancel()
			kind := strings.ToLower(strings.TrimPrefix(q.Kind.String(), "ENTITY_KIND_"))
			if err == nil || IsAlreadyExists(err) {
				log.Info(kind+" ready", kind, q.Name)
				break
			}
			if !retriable(err) || time.Now().After(deadline) || ctx.Err() != nil {
				return fmt.Errorf("create %s %s: %w", kind, q.Name, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	return nil
}

// retriable reports whether a refused creation may succeed later (the
// meta group electing, a plan that met a changed catalog), rather than
// being wrong in itself.
func retriable(err error) bool {
	switch status.Code(err) {
	case codes.InvalidArgument, codes.NotFound, codes.ResourceExhausted:
		return false
	}
	return true
}

func (c *Dev) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var errs []error
	if c.Admin != nil {
		c.Admin.Shutdown(ctx)
	}
	if c.Frontend != nil {
		c.Frontend.Shutdown(ctx)
	}
	if c.Router != nil {
		c.Router.Close()
	}
	for _, f := range c.closers {
		f()
	}
	for _, s := range c.Storage {
		errs = append(errs, s.Close())
	}
	return errors.Join(errs...)
}

// devClusterCreds makes (or keeps) a dev cluster CA under dir and a
// certificate of it for each name, and loads each as credentials.
func devClusterCreds(dir string, members []certs.DevMember, log *slog.Logger) (map[string]certs.DevFiles, map[string]*rpcnet.Creds, error) {
	files, err := certs.GenerateDevCluster(dir, members...)
	if err != nil {
		return nil, nil, err
	}
	creds := make(map[string]*rpcnet.Creds, len(files))
	for name, f := range files {
		cl, err := certs.NewCluster(f.Cert, f.Key, f.CA, log)
		if err != nil {
			return nil, nil, err
		}
		creds[name] = clusterCreds(cl)
	}
	return files, creds, nil
}

// DialPlacement returns a PlacementService client for a storage node's
// gRPC address, with the cluster's credentials (nil: plain text), and a
// function that closes it.
func DialPlacement(addr string, creds *rpcnet.Creds) (placementpb.PlacementServiceClient, func(), error) {
	cc, err := rpcnet.Dial(addr, creds)
	if err != nil {
		return nil, nil, err
	}
	return placementpb.NewPlacementServiceClient(cc), func() { cc.Close() }, nil
}

// DialPlacementMembers returns a PlacementService client over every
// member's address: gRPC connects to the first that answers and moves on
// when it fails (any member serves, forwarding changes to the leader).
func DialPlacementMembers(addrs []string, creds *rpcnet.Creds) (placementpb.PlacementServiceClient, func(), error) {
	r := manual.NewBuilderWithScheme("quorumbus-placement")
	state := resolver.State{}
	for _, a := range addrs {
		state.Addresses = append(state.Addresses, resolver.Address{Addr: a})
	}
	r.InitialState(state)
	cc, err := rpcnet.Dial(r.Scheme()+":///placement", creds, grpc.WithResolvers(r))
	if err != nil {
		return nil, nil, err
	}
	return placementpb.NewPlacementServiceClient(cc), func() { cc.Close() }, nil
}

// IsAlreadyExists reports whether err says the entity exists.
func IsAlreadyExists(err error) bool { return status.Code(err) == codes.AlreadyExists }
