package main

import (
	"flag"
	"io"
	"log/slog"

	"github.com/quorumbus/quorumbus/cmd/quorumbus/cluster"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// placementFlags are how a CLI command reaches the catalog: any storage
// node's gRPC address, and the client certificate of the cluster CA that
// a node with mutual TLS demands before it answers a catalog change.
type placementFlags struct {
	addr string
	tls  cluster.ClusterTLSFlags
}

func (p *placementFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&p.addr, "placement", "127.0.0.1:7101", "gRPC address of any storage node (placement member)")
	p.tls.Register(fs)
}

// dial returns a PlacementService client and a function that closes it.
func (p *placementFlags) dial() (placementpb.PlacementServiceClient, func(), error) {
	ctls, err := p.tls.Load(slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		return nil, nil, err
	}
	return cluster.DialPlacement(p.addr, ctls.Creds())
}
