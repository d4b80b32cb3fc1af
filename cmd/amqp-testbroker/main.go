// Command amqp-testbroker serves the engine's in-memory example broker:
// every address is a queue, created on first use. It exists so that a
// newcomer can point an AMQP 1.0 client at something before the replicated
// dev cluster (quorumbus dev) is built; it keeps nothing on disk.
package main

import (
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/quorumbus/quorumbus/frontend/amqp"
	"github.com/quorumbus/quorumbus/frontend/amqp/amqptest"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:5672", "address to listen on")
	maxMsg := flag.Uint64("max-message-size", 16<<20, "largest message accepted, in bytes")
	flag.Parse()

	srv := &amqp.Server{MaxMessageSize: *maxMsg, Logger: slog.New(slog.NewTextHandler(os.Stderr, nil))}
	_, bound, stop, err := amqptest.Listen(*addr, srv)
	if err != nil {
		fmt.Fprintln(os.Stderr, "amqp-testbroker:", err)
		os.Exit(1)
	}
	fmt.Printf("amqp-testbroker: in-memory AMQP 1.0 broker listening on amqp://%s (Ctrl-C stops it)\n", bound)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	<-sig
	stop()
}
