package main

import (
	"errors"
	"flag"
	"io"
	"log/slog"
	"path/filepath"

	"github.com/quorumbus/quorumbus/cmd/quorumbus/cluster"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// placementFlags are how a CLI command reaches the catalog: any storage
// node's gRPC address, and the client certificate of the cluster CA that
// a node with mutual TLS demands before it answers.
type placementFlags struct {
	addr string
	dir  string
	tls  cluster.ClusterTLSFlags
}

func (p *placementFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&p.addr, "placement", "127.0.0.1:7101", "gRPC address of any storage node (placement member)")
	fs.StringVar(&p.dir, "cluster-tls-dir", "", "directory with ca.crt, cli.crt and cli.key (what quorumbus dev makes under -data/cluster-tls), instead of the three -cluster-* flags")
	p.tls.Register(fs)
}

// files are the cluster TLS files to present: the flags', or the
// directory's. Nothing is picked up implicitly: a CLI that presented dev
// mode's certificate to a plain-text cluster would fail obscurely.
func (p *placementFlags) files() (cluster.ClusterTLSFlags, error) {
	if p.dir == "" {
		return p.tls, nil
	}
	if p.tls != (cluster.ClusterTLSFlags{}) {
		return p.tls, errors.New("-cluster-tls-dir and the -cluster-* flags exclude each other")
	}
	return cluster.ClusterTLSFlags{Cert: filepath.Join(p.dir, "cli.crt"), Key: filepath.Join(p.dir, "cli.key"), CA: filepath.Join(p.dir, "ca.crt")}, nil
}

// dial returns a PlacementService client and a function that closes it.
func (p *placementFlags) dial() (placementpb.PlacementServiceClient, func(), error) {
	files, err := p.files()
	if err != nil {
		return nil, nil, err
	}
	ctls, err := files.Load(slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		return nil, nil, err
	}
	return cluster.DialPlacement(p.addr, ctls.Creds())
}
