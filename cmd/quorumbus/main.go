// Command quorumbus is the one binary of the broker: each subcommand runs
// one part (or, with dev, all of them in one process). main only parses
// flags into component configs and wires components together.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/quorumbus/quorumbus/cmd/quorumbus/loadtool"
)

type subcommand struct {
	name    string
	summary string
	run     func(args []string) error
}

var subcommands = []subcommand{
	{"dev", "run a whole replicated cluster (3 storage nodes, placement, front-end) in one process", devCmd},
	{"node", "run a storage node (partition groups, placement member)", nodeCmd},
	{"frontend", "run a stateless AMQP front-end", frontendCmd},
	{"gateway", "run a stateless HTTP gateway: the Service Bus management API, health, metrics", gatewayCmd},
	{"queue", "create, list, get, delete, purge or re-drive (dead-lettered messages back) queues on a running cluster", queueCmd},
	{"topic", "create, list, get or delete topics on a running cluster", topicCmd},
	{"subscription", "create, list, get or delete a topic's subscriptions", subscriptionCmd},
	{"rule", "create, list or delete a subscription's rules (SQL, correlation, true/false filters; SQL actions)", ruleCmd},
	{"cluster-certs", "make a cluster CA and a certificate per role (node, frontend, gateway, cli) for the cluster plane's mutual TLS", clusterCertsCmd},
	{"auth-rule", "create, list, show keys of, regenerate keys of or delete Shared Access Signature rules", authRuleCmd},
	{"bench", "drive an AMQP 1.0 endpoint with load and report throughput and latency", loadtool.Command},
	{"version", "print the version this binary was built from (also -version, --version)", versionCmd},
}

func usage() {
	fmt.Fprintf(os.Stderr, "usage: quorumbus <command> [flags]\n\ncommands:\n")
	for _, s := range subcommands {
		fmt.Fprintf(os.Stderr, "  %-10s %s\n", s.name, s.summary)
	}
	fmt.Fprintf(os.Stderr, "\n`quorumbus <command> -help` lists a command's flags.\n")
}

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	if os.Args[1] == "-version" || os.Args[1] == "--version" {
		os.Args[1] = "version"
	}
	for _, s := range subcommands {
		if s.name == os.Args[1] {
			err := s.run(os.Args[2:])
			if errors.Is(err, flag.ErrHelp) {
				os.Exit(0)
			}
			if err != nil {
				fmt.Fprintf(os.Stderr, "quorumbus %s: %v\n", s.name, err)
				os.Exit(1)
			}
			return
		}
	}
	usage()
	os.Exit(2)
}
