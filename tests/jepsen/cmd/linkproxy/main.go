// Command linkproxy is the chaos suite's proxy in front of one storage
// node: every peer and the front-end reach the node through it (the node
// advertises the proxy's address), and the suite slows, chokes or breaks
// those links by adding toxiproxy toxics. It runs as a process of its own
// so that it can live in the node's network namespace, where both its
// listener and its dials to the node are; the suite drives it over stdin.
//
// Usage: linkproxy -listen ADDR -upstream ADDR. Each line on stdin is a
// command, each answered by one line on stdout, "ok" or "err <why>":
//
//	toxic {toxiproxy toxic JSON}   add a toxic
//	clear                          remove every toxic
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

func main() {
	listen := flag.String("listen", "", "address to listen on")
	upstream := flag.String("upstream", "", "address of the node")
	flag.Parse()
	if *listen == "" || *upstream == "" {
		fmt.Fprintln(os.Stderr, "usage: linkproxy -listen ADDR -upstream ADDR")
		os.Exit(2)
	}
	// toxiproxy logs every connection it accepts and every failed dial
	// (each try of a peer while the node is down): errors only.
	log := zerolog.New(os.Stderr).Level(zerolog.ErrorLevel).With().Timestamp().Logger()
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), log)
	p := toxiproxy.NewProxy(srv, "node", *listen, *upstream)
	if err := p.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "linkproxy: %v\n", err)
		os.Exit(1)
	}
	fmt.Println("ok") // listening: the suite waits for this line
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 64<<10), 64<<10)
	for in.Scan() {
		verb, arg, _ := strings.Cut(in.Text(), " ")
		var err error
		switch verb {
		case "toxic":
			_, err = p.Toxics.AddToxicJson(strings.NewReader(arg))
		case "clear":
			// RemoveToxic and ResetToxics log through the context's
			// logger and panic on a nil one.
			p.Toxics.ResetToxics(log.WithContext(context.Background()))
		default:
			err = fmt.Errorf("unknown command %q", verb)
		}
		if err != nil {
			fmt.Printf("err %v\n", err)
		} else {
			fmt.Println("ok")
		}
	}
	// stdin closed: the suite is done (or gone).
	p.Stop()
}
