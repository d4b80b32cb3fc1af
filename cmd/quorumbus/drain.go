package main

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// drainCmd is `quorumbus node drain|undrain ID`: placement moves every
// replica off the node (or stops doing so). With -wait, drain returns once
// the node holds no replica.
func drainCmd(verb string, args []string) error {
	var id string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		id, args = args[0], args[1:]
	}
	fs := flag.NewFlagSet("node "+verb, flag.ContinueOnError)
	var pf placementFlags
	pf.register(fs)
	wait := fs.Duration("wait", 0, "with drain: wait up to this long for the node to hold no replica")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if id == "" {
		id = fs.Arg(0)
	}
	if id == "" {
		return fmt.Errorf("usage: quorumbus node %s [-placement addr] [-wait 10m] NODE-ID", verb)
	}
	client, closeFn, err := pf.dial()
	if err != nil {
		return err
	}
	defer closeFn()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second+*wait)
	defer cancel()
	n, err := client.DrainNode(ctx, &placementpb.DrainNodeRequest{NodeId: id, Draining: verb == "drain"})
	if err != nil {
		return err
	}
	fmt.Printf("node %s: draining %v\n", n.Id, n.Draining)
	if verb != "drain" || *wait == 0 {
		return nil
	}
	for {
		held, err := replicasOn(ctx, client, id)
		if err != nil {
			return err
		}
		if held == 0 {
			fmt.Printf("node %s holds no replica\n", id)
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("node %s still holds %d replicas", id, held)
		case <-time.After(time.Second):
		}
	}
}

// replicasOn counts the replicas the routing table places on a node.
func replicasOn(ctx context.Context, client placementpb.PlacementServiceClient, id string) (int, error) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := client.WatchRoutes(sctx, &placementpb.WatchRoutesRequest{})
	if err != nil {
		return 0, err
	}
	t, err := stream.Recv()
	if err != nil {
		return 0, err
	}
	held := 0
	for _, g := range t.Groups {
		for _, r := range g.Replicas {
			if r.NodeId == id {
				held++
			}
		}
	}
	return held, nil
}
