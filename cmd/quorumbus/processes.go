package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/raft"

	"github.com/quorumbus/quorumbus/cmd/quorumbus/adminhttp"
	"github.com/quorumbus/quorumbus/cmd/quorumbus/cluster"
	"github.com/quorumbus/quorumbus/frontend"
	"github.com/quorumbus/quorumbus/frontend/routing"
	"github.com/quorumbus/quorumbus/node"
	"github.com/quorumbus/quorumbus/placement"
	"github.com/quorumbus/quorumbus/placement/credits"
	"github.com/quorumbus/quorumbus/placement/membership"
	"github.com/quorumbus/quorumbus/placement/sas"
)

// nodeCmd runs one storage process: a storage node and a member of the
// placement meta group, on one gRPC port, finding the others by gossip.
func nodeCmd(args []string) error {
	if len(args) > 0 && (args[0] == "drain" || args[0] == "undrain") {
		return drainCmd(args[0], args[1:])
	}
	fs := flag.NewFlagSet("node", flag.ContinueOnError)
	id := fs.String("id", "", "node id, stable across restarts (required)")
	dataDir := fs.String("data", "", "data directory (required)")
	grpcAddr := fs.String("grpc-addr", "127.0.0.1:7101", "gRPC listener: Raft traffic of every group, PartitionService, PlacementService")
	advertise := fs.String("advertise-addr", "", "gRPC address peers and front-ends dial to reach this node (default: -grpc-addr's; required when -grpc-addr binds every interface)")
	gossipAddr := fs.String("gossip-addr", "127.0.0.1:7946", "memberlist gossip address (UDP and TCP)")
	gossipAdvertise := fs.String("gossip-advertise-addr", "", "gossip address other members reach this node at (default: memberlist picks one of the bound address's)")
	join := fs.String("join", "", "comma-separated gossip addresses of other members")
	bootstrap := fs.String("bootstrap", "", "initial meta-group voters as id=grpc-addr,...; give the same list to each of them on first start; a node the list does not name joins by gossip instead (so every pod of a StatefulSet can get the same list)")
	zone := fs.String("zone", "", "failure domain; replicas spread over zones")
	zoneFromNode := fs.String("zone-from-kubernetes-node", "", "on Kubernetes: the Node (spec.nodeName) whose -zone-label gives this node's zone when -zone is empty, read from the API server with the pod's service account")
	zoneLabel := fs.String("zone-label", "topology.kubernetes.io/zone", "the Kubernetes Node label -zone-from-kubernetes-node reads")
	kubeAccountDir := fs.String("kubernetes-account-dir", defaultServiceAccountDir, "directory holding the pod's service account token and ca.crt, for -zone-from-kubernetes-node")
	groups := fs.Int("groups", 3, "partition groups the cluster creates whatever its entities")
	maxReplicas := fs.Int("max-replicas-per-node", cluster.DefaultMaxReplicasPerNode, maxReplicasPerNodeUsage)
	replicas := fs.Int("replicas", 3, "replicas per partition group")
	goneAfter := fs.Duration("gone-after", placement.DefaultGoneAfter, goneAfterUsage)
	syncFirst := fs.Bool("leader-sync-first", false, leaderSyncFirstUsage)
	walSegmentMB := fs.Int("wal-segment-mb", node.DefaultWALSegmentBytes>>20, "size of each Raft log segment, in MiB; each partition group preallocates one, idle or not")
	diskReserveMB := fs.Int64("disk-reserve-mb", 0, "free disk below which sends are refused (resource-limit-exceeded) while settles go on, in MiB; 0: two segments and 64 MiB, negative: off")
	maxQueuedSendMB := fs.Int64("max-queued-send-mb", node.DefaultMaxQueuedSendBytes>>20, "requests a partition group's leader holds for its proposer, in MiB, past which it refuses sends with server-busy (which the SDKs retry) instead of queueing them without limit; settles still queue (docs/security.md). 0: the default, negative: no bound")
	cacheMB := fs.Int64("cache-mb", 64, "block cache of each partition group's store, in MiB (memtables add up to twice it); bounds memory, not the backlog")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	rulesPath := fs.String("sas-rules", "", sasRulesNodeUsage)
	gossipKeyFile := fs.String("gossip-key-file", "", "file of base64 gossip keys, one a line (16, 24 or 32 bytes; `openssl rand -base64 32`): the first encrypts, all are accepted; members without one are not heard. Re-read every 10 s (rotation: docs/security.md). Empty: gossip in clear text")
	memLimit := memoryLimitFlag(fs)
	var admin adminhttp.Config
	admin.RegisterFlags(fs, "")
	var clusterTLS cluster.ClusterTLSFlags
	clusterTLS.RegisterProcess(fs)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: quorumbus node [flags]\n\nRuns a storage node (partition groups on Raft) that is also a member of the\nplacement meta group. Three of them make a cluster; see README.md.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *id == "" || *dataDir == "" {
		return errors.New("-id and -data are required")
	}
	servers, err := parseServers(*bootstrap)
	if err != nil {
		return err
	}
	var rules []sas.Rule
	if *rulesPath != "" {
		if rules, err = cluster.LoadRulesConfig(*rulesPath); err != nil {
			return err
		}
	}
	log := cluster.NewLogger(*logLevel).With("node", *id)
	servers = bootstrapFor(*id, servers, log)
	if *zone == "" && *zoneFromNode != "" {
		zctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		src := kubeZoneSource{NodeName: *zoneFromNode, Label: *zoneLabel, AccountDir: *kubeAccountDir}
		*zone, err = src.zone(zctx, log)
		cancel()
		if err != nil {
			return err
		}
		log.Info("zone read from the Kubernetes node", "kubernetes_node", *zoneFromNode, "label", *zoneLabel, "zone", *zone)
	}
	ctls, err := clusterTLS.LoadProcess(log)
	if err != nil {
		return err
	}
	var gossipKeys [][]byte
	if *gossipKeyFile != "" {
		if gossipKeys, err = cluster.LoadGossipKeys(*gossipKeyFile); err != nil {
			return err
		}
	} else {
		log.Warn("gossip in clear text and open to any process that reaches it: give -gossip-key-file (docs/security.md)")
	}
	// A node hosts every group of -groups at most, and up to the cap of
	// the groups that follow entities.
	if err := applyMemoryLimit(*memLimit, baseMiB+storageBudgetMiB(replicasPerNode(*groups, 1, 1, *maxReplicas), *cacheMB), log); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	ln, err := net.Listen("tcp", *grpcAddr)
	if err != nil {
		return err
	}
	addr, err := advertisedAddr(*advertise, ln.Addr())
	if err != nil {
		ln.Close()
		return err
	}
	ml, err := membership.New(membership.Config{
		NodeID: *id, Role: membership.RoleStorage, GRPCAddr: addr, Zone: *zone,
		BindAddr: *gossipAddr, AdvertiseAddr: *gossipAdvertise, Seeds: splitList(*join), Network: "local", Keys: gossipKeys, Logger: log,
	})
	if err != nil {
		return err
	}
	if err := ml.Start(ctx); err != nil {
		return err
	}
	defer ml.Close()
	if *gossipKeyFile != "" {
		go cluster.WatchGossipKeys(ctx, *gossipKeyFile, 10*time.Second, ml.SetKeys, log)
	}
	s, err := cluster.StartStorage(ctx, cluster.StorageOptions{
		ID: *id, DataDir: *dataDir, Listener: ln, AdvertiseAddr: addr, Bootstrap: servers,
		Members: ml, Groups: *groups, MaxReplicasPerNode: *maxReplicas, Replicas: *replicas, GoneAfter: *goneAfter, CacheMB: *cacheMB,
		LeaderSyncFirst: *syncFirst, WALSegmentMB: *walSegmentMB, DiskReserveMB: *diskReserveMB, MaxQueuedSendMB: *maxQueuedSendMB, Creds: ctls.Creds(), Logger: log,
	})
	if err != nil {
		return err
	}
	metrics, err := cluster.MetricsHandler(s.Node.Collector())
	if err != nil {
		s.Close()
		return err
	}
	admin.Logger, admin.Probes = log, s.Probes()
	admin.Handlers = map[string]http.Handler{"/metrics": metrics}
	admin.TLS, admin.TLSOnly = ctls.HTTPS(), ctls != nil
	hs := adminhttp.New(admin)
	hs.AddChecks(s.ReadyChecks()...)
	if err := hs.Start(ctx); err != nil {
		s.Close()
		return err
	}
	fmt.Printf("quorumbus node %s: gRPC on %s (reached at %s), gossip on %s, HTTP on %s\n", *id, ln.Addr(), addr, ml.Addr(), hs.Addr())
	if len(rules) > 0 {
		go func() {
			if err := cluster.SeedRules(ctx, []string{addr}, ctls.Creds(), rules, log); err != nil {
				log.Error("authorization rules of -sas-rules not created", "err", err)
			}
		}()
	}
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	hs.Shutdown(sctx)
	return s.Close()
}

// frontendCmd runs a stateless AMQP front-end.
func frontendCmd(args []string) error {
	fs := flag.NewFlagSet("frontend", flag.ContinueOnError)
	amqpAddr := fs.String("amqp-addr", "127.0.0.1:5672", "AMQP listener (plain); empty: none")
	amqpsAddr := fs.String("amqps-addr", "", "AMQP over TLS listener (the SDKs dial 5671), with -tls-cert and -tls-key; empty: none")
	tlsCert := fs.String("tls-cert", "", "PEM certificate (chain) of the AMQPS listener, re-read when it changes (cert-manager rotations); with -plain-cluster also of the HTTPS side of the admin listener (-http-addr), which then serves HTTPS and HTTP")
	tlsKey := fs.String("tls-key", "", "PEM key of -tls-cert, re-read with it")
	var admin adminhttp.Config
	admin.RegisterFlags(fs, "127.0.0.1:5300")
	placementAddrs := fs.String("placement", "127.0.0.1:7101", "comma-separated gRPC addresses of storage nodes, to read the routing table from")
	config := fs.String("config", "", "Service Bus emulator Config.json whose queues, topics, subscriptions and rules to create (through placement) before the front-end is ready")
	rulesPath := fs.String("sas-rules", "", sasRulesFrontendUsage)
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	maxConns := fs.Int("max-connections", 0, maxConnectionsUsage)
	throttleCredits := fs.Int64("throttle-credits", 1000, throttleCreditsUsage+"; "+sharedCreditsUsage)
	maxPending := fs.Int("max-pending-sends", 0, "resource-based throttling (Premium's, with -throttle-credits 0): a send or schedule that would make more messages than this pending (queued by links or in flight to the partitions) is refused with server-busy, which the SDKs retry (0: no bound; docs/security.md)")
	acceptWait := fs.Duration("session-accept-wait", frontend.DefaultSessionAcceptWait, sessionAcceptWaitUsage)
	allowNoSASL := fs.Bool("allow-no-sasl", false, "serve AMQP peers that skip the SASL layer as anonymous ones (they need a token on $cbs), as Service Bus does: the JavaScript SDK connects so with a SharedAccessSignature connection string (docs/security.md)")
	frontends := fs.Int("frontends", 1, frontendsUsage)
	gateways := fs.Int("gateways", 0, gatewaysUsage)
	memberID := fs.String("id", "", "this front-end's name in the gossip, unique among its members (default frontend-<host name>)")
	join := fs.String("join", "", fmt.Sprintf(joinSpendersUsage, "front-end"))
	gossipAddr := fs.String("gossip-addr", "0.0.0.0:7946", "memberlist gossip address (UDP and TCP), with -join")
	gossipAdvertise := fs.String("gossip-advertise-addr", "", "gossip address other members reach this front-end at (default: memberlist picks one of the bound address's)")
	gossipKeyFile := fs.String("gossip-key-file", "", "the storage nodes' gossip keys (node -gossip-key-file), with -join")
	memLimit := memoryLimitFlag(fs)
	var clusterTLS cluster.ClusterTLSFlags
	clusterTLS.RegisterProcess(fs)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: quorumbus frontend [flags]\n\nRuns a stateless AMQP front-end that serves the Service Bus SDKs and routes\nto the partition groups' leaders.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	log := cluster.NewLogger(*logLevel).With("part", "frontend")
	if err := applyMemoryLimit(*memLimit, baseMiB+frontendMiB, log); err != nil {
		return err
	}
	ctls, err := clusterTLS.LoadProcess(log)
	if err != nil {
		return err
	}
	var queues []cluster.QueueSpec
	if *config != "" {
		if queues, err = cluster.LoadEmulatorConfig(*config); err != nil {
			return err
		}
	}
	var rules []sas.Rule
	if *rulesPath != "" {
		if rules, err = cluster.LoadRulesConfig(*rulesPath); err != nil {
			return err
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	router, err := routing.New(routing.Config{Placement: splitList(*placementAddrs), Creds: ctls.Creds(), Logger: log, Rules: rules})
	if err != nil {
		return err
	}
	router.Start(ctx)
	defer router.Close()
	if err := requireRules(ctx, router, *rulesPath, rulesWait); err != nil {
		return err
	}
	static := credits.Spenders{Frontends: *frontends, Gateways: *gateways}
	share := static.FrontendShare
	if *join != "" {
		ml, err := joinGossip(ctx, membership.RoleFrontend, *memberID, *gossipAddr, *gossipAdvertise, *join, *gossipKeyFile, log)
		if err != nil {
			return err
		}
		defer ml.Close()
		share = cluster.FrontendShare(ml)
	}
	srv, err := frontend.New(frontend.Config{Backend: router, Rules: router, Logger: log, MaxConnections: *maxConns,
		ThrottleCredits: *throttleCredits, ThrottleShare: share, MaxPendingSends: *maxPending, SessionAcceptWait: *acceptWait, AllowNoSASL: *allowNoSASL})
	if err != nil {
		return err
	}
	if *amqpAddr == "" && *amqpsAddr == "" {
		return errors.New("-amqp-addr and -amqps-addr are both empty: the front-end would serve nobody")
	}
	metrics, err := cluster.MetricsHandler(srv.Collector())
	if err != nil {
		return err
	}
	admin.Logger, admin.Probes = log, cluster.FrontendProbes(router)
	admin.Handlers = map[string]http.Handler{"/metrics": metrics}
	admin.TLS, admin.TLSOnly = ctls.HTTPS(), ctls != nil
	if ctls == nil && (*tlsCert != "" || *tlsKey != "") {
		// A plain cluster plane: the admin listener serves HTTPS with the
		// AMQPS certificate, and plain HTTP still, for probes that do not
		// speak TLS (as dev mode's listener does).
		if admin.TLS, err = cluster.ServerTLS(*tlsCert, *tlsKey, log); err != nil {
			return fmt.Errorf("-tls-cert: %w", err)
		}
	}
	hs := adminhttp.New(admin)
	var listeners []*cluster.AMQPListener
	var addrs []string
	if *amqpAddr != "" {
		ln, err := net.Listen("tcp", *amqpAddr)
		if err != nil {
			return err
		}
		l := cluster.ServeAMQP(srv, ln, log)
		listeners, addrs = append(listeners, l), append(addrs, "AMQP on "+ln.Addr().String())
		hs.AddChecks(adminhttp.Check{Name: "amqp listener", Func: l.Check})
	}
	if *amqpsAddr != "" {
		ln, err := cluster.ListenTLS(*amqpsAddr, *tlsCert, *tlsKey, log)
		if err != nil {
			return fmt.Errorf("-amqps-addr: %w", err)
		}
		l := cluster.ServeAMQP(srv, ln, log)
		listeners, addrs = append(listeners, l), append(addrs, "AMQPS on "+ln.Addr().String())
		hs.AddChecks(adminhttp.Check{Name: "amqps listener", Func: l.Check})
	}
	hs.AddChecks(cluster.RoutingCheck(router))
	var declared *cluster.Declared
	if len(queues) > 0 {
		declared = cluster.NewDeclared(queues, router)
		hs.AddChecks(adminhttp.Check{Name: "declared entities", Func: declared.Check})
	}
	if err := hs.Start(ctx); err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		hs.Shutdown(sctx)
	}()
	if declared != nil {
		if err := cluster.CreateQueues(ctx, splitList(*placementAddrs), ctls.Creds(), queues, log); err != nil {
			return err
		}
		declared.Created()
	}
	fmt.Printf("quorumbus frontend: %s\n", strings.Join(addrs, ", "))
	dead := make(chan *cluster.AMQPListener, len(listeners))
	for _, l := range listeners {
		go func() {
			select {
			case <-l.Dead():
				dead <- l
			case <-ctx.Done():
			}
		}()
	}
	select {
	case <-ctx.Done():
	case l := <-dead:
		return fmt.Errorf("an AMQP listener stopped: %w", l.Err())
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return srv.Shutdown(sctx)
}

// joinGossip joins the storage nodes' gossip as a front-end or a gateway,
// which nodes ignore (they place replicas on storage members only) and
// front-ends and gateways count to share the namespace's credits
// (cluster.LiveSpenders).
func joinGossip(ctx context.Context, role membership.Role, id, bind, advertise, join, keyFile string, log *slog.Logger) (*membership.Memberlist, error) {
	if id == "" {
		host, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("-id: %w", err)
		}
		id = string(role) + "-" + host
	}
	var keys [][]byte
	if keyFile != "" {
		var err error
		if keys, err = cluster.LoadGossipKeys(keyFile); err != nil {
			return nil, err
		}
	}
	ml, err := membership.New(membership.Config{NodeID: id, Role: role, BindAddr: bind, AdvertiseAddr: advertise,
		Seeds: splitList(join), Network: "local", Keys: keys, Logger: log})
	if err != nil {
		return nil, err
	}
	if err := ml.Start(ctx); err != nil {
		return nil, err
	}
	if keyFile != "" {
		go cluster.WatchGossipKeys(ctx, keyFile, 10*time.Second, ml.SetKeys, log)
	}
	return ml, nil
}

const sessionAcceptWaitUsage = "how long an accept-next session receiver waits for a session when its client names no com.microsoft:timeout (Service Bus: a minute)"

const sessionAcceptWaitPropertyUsage = "quorumbus's own: how long an accept-next of this entity waits for a session when its client names no com.microsoft:timeout, 100ms to 1m (default: the front-end's -session-accept-wait, a minute)"

const throttleCreditsUsage = "credits a second of the namespace: a message sent, received, peeked or scheduled costs 1, a rule operation 10, a message sent to a topic 1 more per filter of its subscriptions (docs/security.md); past them sends fail with server-busy, which the SDKs retry (0 or less: no credits)"

const gatewayThrottleCreditsUsage = "credits a second of the namespace: an admin API request (create, read, update, delete, a page of a list) costs 10, AMQP operations what the front-ends' -throttle-credits says (docs/security.md); past them requests answer 503 server-busy, which the admin clients retry (0 or less: no credits)"

// The namespace's front-ends and gateways spend one budget between them
// (placement/credits.Spenders); these flags say so on both commands.
const (
	sharedCreditsUsage = "one budget for the whole namespace: give every front-end and gateway the same value; each enforces its share (the gateways together a tenth while front-ends are live, the front-ends the rest, evenly), counted with -join or from -frontends and -gateways"
	frontendsUsage     = "front-ends serving the namespace, without -join: give every front-end and gateway the same -frontends and -gateways, so that their shares of -throttle-credits add up to it (docs/security.md); with -join the live count from gossip replaces it"
	gatewaysUsage      = "gateways (the admin API) serving the namespace, without -join: give every front-end and gateway the same -frontends and -gateways, so that their shares of -throttle-credits add up to it (docs/security.md); with -join the live count from gossip replaces it"
	joinSpendersUsage  = "comma-separated gossip addresses of storage nodes: this process joins their gossip as a %s, counts the live front-ends and gateways there and enforces its share of -throttle-credits (docs/security.md); give every front-end and gateway -join. Empty: no gossip, -frontends and -gateways are the counts"
)

const (
	sasRulesNodeUsage     = "authorization rules file (JSON, docs/security.md) whose rules to create in the catalog once; rules that exist are left as they are"
	sasRulesFrontendUsage = "authorization rules file (JSON, docs/security.md) the front-end trusts besides the catalog's; without it the catalog must hold a rule"
)

// rulesWait bounds how long a front-end without a rules file waits for the
// routing table to tell whether the catalog holds a rule.
const rulesWait = 30 * time.Second

// requireRules refuses to run a front-end that would let nobody in: it
// needs a rule from its file or, failing that, from the catalog.
func requireRules(ctx context.Context, router *routing.Router, path string, wait time.Duration) error {
	if router.Ruleset().Len() > 0 {
		return nil
	}
	select {
	case <-router.Ready():
	case <-time.After(wait):
	case <-ctx.Done():
		return ctx.Err()
	}
	if router.Ruleset().Len() > 0 {
		return nil
	}
	if path != "" {
		return fmt.Errorf("-sas-rules %s holds no rule and the catalog none either: no client could connect", path)
	}
	return errors.New("no authorization rule: give -sas-rules FILE, or create one in the catalog first (quorumbus auth-rule create NAME --rights Listen,Send,Manage)")
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// parseServers reads "id=addr,id=addr".
func parseServers(s string) ([]raft.Server, error) {
	var ids, addrs []string
	for _, p := range splitList(s) {
		id, addr, ok := strings.Cut(p, "=")
		if !ok || id == "" || addr == "" {
			return nil, fmt.Errorf("bootstrap entry %q is not id=addr", p)
		}
		ids, addrs = append(ids, id), append(addrs, addr)
	}
	return cluster.Servers(ids, addrs), nil
}

const leaderSyncFirstUsage = "a partition group's leader fsyncs each Raft log write before it replicates it, instead of while its followers write theirs; slower, and keeps a group electing after a leader's machine crash while another replica is down (docs/design-notes.md)"

// advertisedAddr is the gRPC address a node gives its peers: advertise if
// set, else the listener's, which must then name one interface (a node
// that told its peers 0.0.0.0 or [::] could not be reached).
func advertisedAddr(advertise string, bound net.Addr) (string, error) {
	if advertise != "" {
		if _, _, err := net.SplitHostPort(advertise); err != nil {
			return "", fmt.Errorf("-advertise-addr %q: %w", advertise, err)
		}
		return advertise, nil
	}
	if tcp, ok := bound.(*net.TCPAddr); ok && tcp.IP.IsUnspecified() {
		return "", fmt.Errorf("-grpc-addr %s binds every interface: give -advertise-addr, the address peers and front-ends dial", bound)
	}
	return bound.String(), nil
}

// bootstrapFor is the part of the -bootstrap list this node acts on: all
// of it when the list names the node, none when it does not. A node the
// list does not name is a later member that joins the meta group by
// gossip; this lets an orchestrator that gives every replica the same
// arguments (a Kubernetes StatefulSet) name only the first few.
func bootstrapFor(id string, servers []raft.Server, log *slog.Logger) []raft.Server {
	if len(servers) == 0 || slices.ContainsFunc(servers, func(s raft.Server) bool { return s.ID == raft.ServerID(id) }) {
		return servers
	}
	log.Info("this node is not in -bootstrap: it joins the existing meta group by gossip", "bootstrap", len(servers))
	return nil
}
