package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/quorumbus/quorumbus/cmd/quorumbus/cluster"
	"github.com/quorumbus/quorumbus/frontend/routing"
	"github.com/quorumbus/quorumbus/gateway"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// messagesCmd runs `quorumbus queue|subscription purge|redrive`: the
// gateway's purge and re-drive (the console's, one code path), driven
// from here through the partitions' leaders as the gateway drives them.
func messagesCmd(kind, verb string, args []string) error {
	names := 1
	usage := fmt.Sprintf("usage: quorumbus queue %s [flags] NAME", verb)
	if kind == "subscription" {
		names = 2
		usage = fmt.Sprintf("usage: quorumbus subscription %s [flags] TOPIC NAME", verb)
	}
	fs := flag.NewFlagSet(kind+" "+verb, flag.ContinueOnError)
	var pf placementFlags
	pf.register(fs) // -placement here may list several nodes, comma-separated
	dlq := fs.Bool("dlq", false, "purge: the dead-letter queue instead of the entity's messages")
	filter := fs.String("filter", "", "redrive: only dead-lettered messages this SQL filter matches (the rule language; DeadLetterReason and DeadLetterErrorDescription are properties)")
	max := fs.Int("max", 0, "redrive: at most this many messages (0: all)")
	rate := fs.Float64("rate", gateway.DefaultRedriveRate, "redrive: at most this many messages a second")
	timeout := fs.Duration("timeout", time.Hour, "give up after this long (what was done stays done)")
	// Accept the names before or after the flags.
	var pos []string
	for len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		pos, args = append(pos, args[0]), args[1:]
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	pos = append(pos, fs.Args()...)
	if len(pos) != names {
		return errors.New(usage)
	}
	name := pos[0]
	if kind == "subscription" {
		name = pos[0] + "/Subscriptions/" + pos[1]
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	addrs := splitList(pf.addr)
	files, err := pf.files()
	if err != nil {
		return err
	}
	ctls, err := files.Load(slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		return err
	}
	catalog, closeCatalog, err := cluster.DialPlacementMembers(addrs, ctls.Creds())
	if err != nil {
		return err
	}
	defer closeCatalog()
	e, err := catalog.GetEntity(ctx, &placementpb.GetEntityRequest{Name: name})
	if err != nil {
		return err
	}
	router, err := routing.New(routing.Config{Placement: addrs, Creds: ctls.Creds(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return err
	}
	router.Start(ctx)
	defer router.Close()
	select {
	case <-router.Ready():
	case <-ctx.Done():
		return fmt.Errorf("no routing table from %s: %w", pf.addr, ctx.Err())
	}
	switch verb {
	case "purge":
		n, err := gateway.Purge(ctx, router, e, gateway.PurgeOptions{DeadLetter: *dlq})
		fmt.Printf("purged %d messages of %s%s\n", n, name, map[bool]string{true: " (dead-letter queue)"}[*dlq])
		return err
	case "redrive":
		n, err := gateway.Redrive(ctx, router, e, gateway.RedriveOptions{Filter: *filter, Max: *max, Rate: *rate})
		fmt.Printf("re-drove %d dead-lettered messages back to %s\n", n, name)
		return err
	}
	return errors.New(usage)
}
