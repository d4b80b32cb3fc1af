package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/quorumbus/quorumbus/cmd/quorumbus/adminhttp"
	"github.com/quorumbus/quorumbus/cmd/quorumbus/cluster"
	"github.com/quorumbus/quorumbus/frontend"
	"github.com/quorumbus/quorumbus/placement"
	"github.com/quorumbus/quorumbus/placement/sas"
)

func devCmd(args []string) error {
	var o cluster.DevOptions
	var config string
	fs := flag.NewFlagSet("dev", flag.ContinueOnError)
	fs.StringVar(&o.DataDir, "data", "./data", "directory for every node's data")
	fs.StringVar(&o.AMQPAddr, "amqp-addr", "127.0.0.1:5672", "AMQP listener of the front-end (plain, for emulator connection strings)")
	fs.StringVar(&o.AMQPSAddr, "amqps-addr", "127.0.0.1:5671", "AMQP over TLS listener of the front-end (the SDKs' connection strings without UseDevelopmentEmulator); empty: none")
	fs.StringVar(&o.TLSCert, "tls-cert", "", "PEM certificate (chain) of the AMQPS listener (re-read when it changes) and of the HTTPS side of the HTTP listener; default: one of a CA dev mode makes under -data/tls")
	fs.StringVar(&o.TLSKey, "tls-key", "", "PEM key of -tls-cert")
	var admin adminhttp.Config
	admin.RegisterFlags(fs, "127.0.0.1:5300")
	fs.StringVar(&config, "config", "", "Service Bus emulator Config.json whose queues, topics, subscriptions and rules to create")
	fs.IntVar(&o.Nodes, "nodes", 3, "storage nodes (each partition group is replicated on all of them, up to 3)")
	fs.IntVar(&o.NodePort, "node-port", 7101, "gRPC port of the first storage node; the others follow (stable across restarts: Raft remembers them)")
	fs.IntVar(&o.Groups, "groups", 3, "partition groups the cluster creates whatever its entities")
	fs.IntVar(&o.MaxReplicasPerNode, "max-replicas-per-node", cluster.DefaultMaxReplicasPerNode, maxReplicasPerNodeUsage)
	fs.DurationVar(&o.GoneAfter, "gone-after", placement.DefaultGoneAfter, goneAfterUsage)
	fs.Int64Var(&o.CacheMB, "cache-mb", 32, "block cache of each partition group's store, in MiB (memtables add up to twice it); bounds memory, not the backlog")
	fs.BoolVar(&o.LeaderSyncFirst, "leader-sync-first", false, leaderSyncFirstUsage)
	fs.IntVar(&o.MaxConnections, "max-connections", 0, maxConnectionsUsage)
	fs.DurationVar(&o.SessionAcceptWait, "session-accept-wait", frontend.DefaultSessionAcceptWait, sessionAcceptWaitUsage)
	fs.Int64Var(&o.ThrottleCredits, "throttle-credits", 0, throttleCreditsUsage+"; the admin API spends the same credits, 10 a request; off by default in dev mode, which benchmarks drive")
	fs.StringVar(&o.LogLevel, "log-level", "info", "debug, info, warn or error")
	memLimit := memoryLimitFlag(fs)
	fs.BoolVar(&o.PlainCluster, "plain-cluster", false, "gRPC between the parts in plain text; by default it is mutual TLS with a cluster CA and certificates dev mode makes under -data/cluster-tls")
	fs.BoolVar(&o.RaftMetrics, "raft-metrics", false, "collect Raft's timers (log writes, replication, commit, apply) and serve the last 10 s at /debug/raft-metrics on the HTTP listener")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: quorumbus dev [flags]\n\nRuns a whole replicated cluster in one process: storage nodes (Raft, fsync on),\nthe placement catalog and an AMQP front-end, on loopback. Prints the\nconnection string for the SDKs.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	o.HTTPAddr, o.Pprof = admin.Addr, admin.Pprof
	var queues []cluster.QueueSpec
	if config != "" {
		var err error
		if queues, err = cluster.LoadEmulatorConfig(config); err != nil {
			return err
		}
		o.Declare = queues
	}
	replicas := o.Nodes * replicasPerNode(o.Groups, min(o.Nodes, 3), o.Nodes, o.MaxReplicasPerNode)
	if err := applyMemoryLimit(*memLimit, baseMiB+frontendMiB+storageBudgetMiB(replicas, o.CacheMB), cluster.NewLogger(o.LogLevel)); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	dev, err := cluster.StartDev(ctx, o)
	if err != nil {
		return err
	}
	if config != "" {
		if err := cluster.CreateQueues(ctx, dev.NodeAddrs, dev.Creds, queues, cluster.NewLogger(o.LogLevel)); err != nil {
			dev.Close()
			return err
		}
		dev.Declared.Created()
	}
	fmt.Printf("quorumbus dev: %d storage nodes, AMQP on %s, HTTP and HTTPS (management API) on %s, data in %s\n", o.Nodes, dev.AMQPAddr, dev.Admin.Addr(), o.DataDir)
	fmt.Println(cluster.ConnectionString(dev.AMQPAddr))
	if dev.AMQPS != nil {
		fmt.Printf("quorumbus dev: AMQPS on %s\n", dev.AMQPSAddr)
		fmt.Println(cluster.TLSConnectionString(dev.AMQPSAddr, sas.DevKeyName, sas.DevKey))
	}
	if dev.Admin.Addr() != "" {
		fmt.Printf("quorumbus dev: management API (azservicebus/admin): Endpoint=sb://%s;SharedAccessKeyName=%s;SharedAccessKey=%s\n",
			dev.Admin.Addr(), sas.DevKeyName, sas.DevKey)
	}
	if cli, ok := dev.ClusterTLS["cli"]; ok {
		fmt.Printf("quorumbus dev: the cluster plane is mutual TLS; CLI commands (queue, topic, auth-rule, ...) need -cluster-tls-dir %s\n", filepath.Dir(cli.Cert))
	}
	if dev.CAFile != "" {
		fmt.Printf("quorumbus dev: the AMQPS and HTTPS certificate is signed by the CA in %s; trust it (Go: azservicebus.ClientOptions.TLSConfig.RootCAs, admin.ClientOptions.Transport or SSL_CERT_FILE; Node.js: NODE_EXTRA_CA_CERTS=%s)\n", dev.CAFile, dev.CAFile)
	}
	select {
	case <-ctx.Done():
		fmt.Println("quorumbus dev: shutting down")
		return dev.Close()
	case <-dev.AMQP.Dead():
		dev.Close()
		return fmt.Errorf("the AMQP listener on %s stopped: %w", dev.AMQPAddr, dev.AMQP.Err())
	}
}

const maxReplicasPerNodeUsage = "group replicas a storage node takes for groups beyond -groups: the cluster creates a partition group for each partition of its widest entity (as an entity is created, and as nodes join) while every node has room, spread over zones; 0: -groups only. The default memory limit counts them (docs/operations.md, Memory)"

const goneAfterUsage = "how long a storage node may stay dead (as gossip sees it) before placement re-creates its replicas on other nodes from the surviving ones, and replaces it as a meta-group voter; shorter re-replicates sooner, but also copies groups off a node that was only restarting"

const maxConnectionsUsage = "AMQP connections served at once; past it a client is refused with amqp:resource-limit-exceeded (0: 5000, negative: no limit)"
