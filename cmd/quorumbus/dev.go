package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/quorumbus/quorumbus/frontend"
	"github.com/quorumbus/quorumbus/frontend/routing"
	"github.com/quorumbus/quorumbus/placement/membership"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// devConnectionString is what SDKs connect with. Keys are not checked yet
// (SAS validation is the security issue's work); these are the emulator's.
const devConnectionString = "Endpoint=sb://%s;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true"

type devOptions struct {
	dataDir  string
	amqpAddr string
	httpAddr string
	config   string
	nodes    int
	nodePort int
	groups   int
	cacheMB  int64
	logLevel string
}

func devCmd(args []string) error {
	var o devOptions
	fs := flag.NewFlagSet("dev", flag.ContinueOnError)
	fs.StringVar(&o.dataDir, "data", "./data", "directory for every node's data")
	fs.StringVar(&o.amqpAddr, "amqp-addr", "127.0.0.1:5672", "AMQP listener of the front-end")
	fs.StringVar(&o.httpAddr, "http-addr", "127.0.0.1:5300", "HTTP listener: /healthz and /readyz")
	fs.StringVar(&o.config, "config", "", "Service Bus emulator Config.json whose queues to create")
	fs.IntVar(&o.nodes, "nodes", 3, "storage nodes (each partition group is replicated on all of them, up to 3)")
	fs.IntVar(&o.nodePort, "node-port", 7101, "gRPC port of the first storage node; the others follow (stable across restarts: Raft remembers them)")
	fs.IntVar(&o.groups, "groups", 3, "partition groups")
	fs.Int64Var(&o.cacheMB, "cache-mb", 32, "block cache of each partition group's store, in MiB (memtables add up to half of it); bounds memory, not the backlog")
	fs.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: quorumbus dev [flags]\n\nRuns a whole replicated cluster in one process: storage nodes (Raft, fsync on),\nthe placement catalog and an AMQP front-end, on loopback. Prints the\nconnection string for the SDKs.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cluster, err := startDev(ctx, o)
	if err != nil {
		return err
	}
	fmt.Printf("quorumbus dev: %d storage nodes, AMQP on %s, HTTP on %s, data in %s\n", o.nodes, cluster.amqpAddr, o.httpAddr, o.dataDir)
	fmt.Println(fmt.Sprintf(devConnectionString, cluster.amqpAddr))
	<-ctx.Done()
	fmt.Println("quorumbus dev: shutting down")
	return cluster.Close()
}

// devCluster is everything `quorumbus dev` runs.
type devCluster struct {
	storage  []*storage
	router   *routing.Router
	frontend *frontend.Server
	http     *http.Server
	amqpAddr string
	nodeAddr []string
}

func newLogger(level string) *slog.Logger {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		l = slog.LevelInfo
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l}))
}

func startDev(ctx context.Context, o devOptions) (_ *devCluster, err error) {
	log := newLogger(o.logLevel)
	if o.nodes < 1 {
		return nil, errors.New("need at least one storage node")
	}
	c := &devCluster{}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	ids := make([]string, o.nodes)
	var members []membership.Member
	lns := make([]net.Listener, o.nodes)
	for i := range o.nodes {
		ids[i] = "dev-" + strconv.Itoa(i+1)
		addr := "127.0.0.1:" + strconv.Itoa(o.nodePort+i)
		if o.nodePort == 0 {
			addr = "127.0.0.1:0"
		}
		if lns[i], err = net.Listen("tcp", addr); err != nil {
			return nil, fmt.Errorf("node %s: %w", ids[i], err)
		}
		c.nodeAddr = append(c.nodeAddr, lns[i].Addr().String())
		members = append(members, membership.Member{NodeID: ids[i], Role: membership.RoleStorage, GRPCAddr: c.nodeAddr[i]})
	}
	servers := fmtServers(ids, c.nodeAddr)
	for i := range o.nodes {
		s, err := startStorage(ctx, storageOptions{
			id:        ids[i],
			dataDir:   filepath.Join(o.dataDir, ids[i]),
			listener:  lns[i],
			bootstrap: servers,
			members:   staticMembers(members),
			groups:    o.groups,
			replicas:  min(o.nodes, 3),
			cacheMB:   o.cacheMB,
			logger:    log.With("node", ids[i]),
		})
		if err != nil {
			return nil, fmt.Errorf("storage node %s: %w", ids[i], err)
		}
		c.storage = append(c.storage, s)
	}
	if c.router, err = routing.New(routing.Config{Placement: c.nodeAddr, Logger: log}); err != nil {
		return nil, err
	}
	c.router.Start(ctx)
	if c.frontend, err = frontend.New(frontend.Config{Backend: c.router, Logger: log.With("part", "frontend")}); err != nil {
		return nil, err
	}
	aln, err := net.Listen("tcp", o.amqpAddr)
	if err != nil {
		return nil, err
	}
	c.amqpAddr = aln.Addr().String()
	go c.frontend.Serve(aln)
	if o.httpAddr != "" {
		hln, err := net.Listen("tcp", o.httpAddr)
		if err != nil {
			return nil, err
		}
		c.http = &http.Server{Handler: healthHandler(c.router), ReadHeaderTimeout: 5 * time.Second}
		go c.http.Serve(hln)
	}
	if o.config != "" {
		queues, err := loadEmulatorConfig(o.config)
		if err != nil {
			return nil, err
		}
		if err := createQueues(ctx, c.nodeAddr, queues, log); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// createQueues creates queues through any placement member, waiting for
// the meta group to elect a leader first. Queues that exist are left as
// they are, so that a restart with the same --config is harmless.
func createQueues(ctx context.Context, placementAddrs []string, queues []queueSpec, log *slog.Logger) error {
	client, closeFn, err := dialPlacement(placementAddrs[0])
	if err != nil {
		return err
	}
	defer closeFn()
	for _, q := range queues {
		deadline := time.Now().Add(60 * time.Second)
		for {
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			_, err := client.CreateEntity(cctx, &placementpb.CreateEntityRequest{Name: q.name, Properties: q.props})
			cancel()
			if err == nil || isAlreadyExists(err) {
				log.Info("queue ready", "queue", q.name)
				break
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				return fmt.Errorf("create queue %s: %w", q.name, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	return nil
}

func (c *devCluster) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var errs []error
	if c.http != nil {
		c.http.Shutdown(ctx)
	}
	if c.frontend != nil {
		c.frontend.Shutdown(ctx)
	}
	if c.router != nil {
		c.router.Close()
	}
	for _, s := range c.storage {
		errs = append(errs, s.Close())
	}
	return errors.Join(errs...)
}

// healthHandler serves /healthz (the process runs) and /readyz (the
// front-end has a routing table, so it can serve clients).
func healthHandler(r *routing.Router) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	// Profiles of the running process, for `go tool pprof`.
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		select {
		case <-r.Ready():
			fmt.Fprintln(w, "ready")
		default:
			http.Error(w, "no routing table yet", http.StatusServiceUnavailable)
		}
	})
	return mux
}
