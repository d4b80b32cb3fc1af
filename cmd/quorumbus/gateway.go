package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/quorumbus/quorumbus/cmd/quorumbus/adminhttp"
	"github.com/quorumbus/quorumbus/cmd/quorumbus/cluster"
	"github.com/quorumbus/quorumbus/frontend/routing"
	"github.com/quorumbus/quorumbus/gateway"
	"github.com/quorumbus/quorumbus/placement/credits"
	"github.com/quorumbus/quorumbus/placement/membership"
	"github.com/quorumbus/quorumbus/placement/sas"
)

// gatewayCmd runs a stateless HTTP gateway: the Service Bus management API
// (ATOM, HTTPS and HTTP on one port) beside the admin routes.
func gatewayCmd(args []string) error {
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	var admin adminhttp.Config
	admin.RegisterFlags(fs, "127.0.0.1:5300")
	placementAddrs := fs.String("placement", "127.0.0.1:7101", "comma-separated gRPC addresses of storage nodes (placement members)")
	httpsAddr := fs.String("https-addr", "", "a second listener that serves HTTPS only (the -http-addr listener serves HTTPS and HTTP on one port); empty: none")
	certFile := fs.String("tls-cert", "", "PEM certificate of the HTTPS side of the listener (default: a self-signed one for localhost, kept in -tls-dir)")
	keyFile := fs.String("tls-key", "", "PEM key of -tls-cert")
	tlsDir := fs.String("tls-dir", "", "directory to keep the generated self-signed certificate in (empty: made anew in memory at each start)")
	namespace := fs.String("namespace", "quorumbus", "namespace name the API reports")
	rulesPath := fs.String("sas-rules", "", "authorization rules file (JSON, docs/security.md) the gateway trusts besides the catalog's; without it the catalog must hold a rule. Requests need a token of a rule with the Manage right")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	throttleCredits := fs.Int64("throttle-credits", 1000, gatewayThrottleCreditsUsage+"; "+sharedCreditsUsage)
	frontends := fs.Int("frontends", 1, frontendsUsage)
	gateways := fs.Int("gateways", 1, gatewaysUsage)
	memberID := fs.String("id", "", "this gateway's name in the gossip, unique among its members (default gateway-<host name>)")
	join := fs.String("join", "", fmt.Sprintf(joinSpendersUsage, "gateway"))
	gossipAddr := fs.String("gossip-addr", "0.0.0.0:7946", "memberlist gossip address (UDP and TCP), with -join")
	gossipAdvertise := fs.String("gossip-advertise-addr", "", "gossip address other members reach this gateway at (default: memberlist picks one of the bound address's)")
	gossipKeyFile := fs.String("gossip-key-file", "", "the storage nodes' gossip keys (node -gossip-key-file), with -join")
	memLimit := memoryLimitFlag(fs)
	var clusterTLS cluster.ClusterTLSFlags
	clusterTLS.RegisterProcess(fs)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: quorumbus gateway [flags]\n\nRuns a stateless HTTP gateway: the Service Bus management API that the Azure\nadmin clients speak (HTTPS and plain HTTP on -http-addr), health, readiness\nand metrics.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if admin.Addr == "" {
		return errors.New("-http-addr is required: it is where the gateway serves")
	}
	log := cluster.NewLogger(*logLevel).With("part", "gateway")
	if err := applyMemoryLimit(*memLimit, baseMiB, log); err != nil {
		return err
	}
	ctls, err := clusterTLS.LoadProcess(log)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var rules []sas.Rule
	if *rulesPath != "" {
		if rules, err = cluster.LoadRulesConfig(*rulesPath); err != nil {
			return err
		}
	}
	addrs := splitList(*placementAddrs)
	router, err := routing.New(routing.Config{Placement: addrs, Creds: ctls.Creds(), Logger: log, Rules: rules})
	if err != nil {
		return err
	}
	router.Start(ctx)
	defer router.Close()
	// As a front-end: a gateway nobody could sign in to does not start.
	if err := requireRules(ctx, router, *rulesPath, rulesWait); err != nil {
		return err
	}
	catalog, closeCatalog, err := cluster.DialPlacementMembers(addrs, ctls.Creds())
	if err != nil {
		return err
	}
	defer closeCatalog()
	static := credits.Spenders{Frontends: *frontends, Gateways: *gateways}
	share := static.GatewayShare
	if *join != "" {
		ml, err := joinGossip(ctx, membership.RoleGateway, *memberID, *gossipAddr, *gossipAdvertise, *join, *gossipKeyFile, log)
		if err != nil {
			return err
		}
		defer ml.Close()
		share = cluster.GatewayShare(ml)
	}
	gw, err := gateway.New(gateway.Config{
		Catalog: catalog, Stats: router, Messages: router, Topology: router, Namespace: *namespace, Logger: log,
		Validator: gateway.RulesValidator{Rules: router},
		Credits:   credits.New(credits.Config{Budget: *throttleCredits, Share: share}),
	})
	if err != nil {
		return err
	}
	var certPath string
	if admin.TLS, certPath, err = adminhttp.TLSConfig(*certFile, *keyFile, *tlsDir); err != nil {
		return err
	}
	metrics, err := cluster.MetricsHandler(gw.Collector(), gw.ThrottledCollector())
	if err != nil {
		return err
	}
	admin.Logger, admin.Probes, admin.API = log, cluster.FrontendProbes(router), gw
	admin.Handlers = map[string]http.Handler{"/metrics": metrics}
	admin.TLSAddr = *httpsAddr
	hs := adminhttp.New(admin)
	hs.AddChecks(cluster.GatewayChecks(router)...)
	if err := hs.Start(ctx); err != nil {
		return err
	}
	fmt.Printf("quorumbus gateway: management API (HTTPS and HTTP) on %s", hs.Addr())
	if a := hs.TLSAddr(); a != "" {
		fmt.Printf(", HTTPS on %s", a)
	}
	if certPath != "" {
		fmt.Printf(", certificate %s", certPath)
	}
	fmt.Println()
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return hs.Shutdown(sctx)
}
