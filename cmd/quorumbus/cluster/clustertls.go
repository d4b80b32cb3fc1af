package cluster

import (
	"crypto/tls"
	"errors"
	"flag"
	"log/slog"

	"github.com/quorumbus/quorumbus/frontend/certs"
	"github.com/quorumbus/quorumbus/proto/rpcnet"
)

// ClusterTLSFlags are the flags of the cluster plane's mutual TLS, the
// same on every process and CLI command that reaches the nodes' gRPC.
type ClusterTLSFlags struct {
	Cert, Key, CA string
	// Plain is -plain-cluster, which only processes (node, frontend,
	// gateway) register: without it they refuse to start with no
	// certificate (LoadProcess).
	Plain bool
}

// Register adds -cluster-tls-cert, -cluster-tls-key and -cluster-ca to fs.
func (f *ClusterTLSFlags) Register(fs *flag.FlagSet) {
	fs.StringVar(&f.Cert, "cluster-tls-cert", "", "PEM certificate this process presents on the cluster plane (gRPC between nodes, front-ends, gateways and the CLI), signed by -cluster-ca, for server and client authentication; re-read when it changes. With the three -cluster-* flags, every gRPC connection is mutual TLS and the admin HTTP listener serves HTTPS only")
	fs.StringVar(&f.Key, "cluster-tls-key", "", "PEM key of -cluster-tls-cert, re-read with it")
	fs.StringVar(&f.CA, "cluster-ca", "", "PEM file of the cluster CA (or a bundle of the old and the new one during a rotation); a peer whose certificate it did not sign is refused. Re-read when it changes")
}

// RegisterProcess adds Register's flags and -plain-cluster, for the
// processes that serve or join the cluster plane.
func (f *ClusterTLSFlags) RegisterProcess(fs *flag.FlagSet) {
	f.Register(fs)
	fs.BoolVar(&f.Plain, "plain-cluster", false, "run the cluster plane (Raft, PartitionService, PlacementService with every SAS key) in plain text, open to anyone who reaches it, instead of mutual TLS: only on a network you trust (tests, a laptop). Without it, the three -cluster-* flags are required")
}

// ErrNoClusterTLS is a process started without cluster credentials and
// without -plain-cluster.
var ErrNoClusterTLS = errors.New("the cluster plane is mutual TLS: give -cluster-tls-cert, -cluster-tls-key and -cluster-ca (a certificate of the cluster CA naming this process's role, docs/security.md), or -plain-cluster to run it in plain text on a network you trust")

// LoadProcess is Load for a process (node, frontend, gateway): no flags at
// all is an error unless -plain-cluster says plain text is wanted, which
// is then logged as a warning; -plain-cluster with certificate flags is an
// error too.
func (f ClusterTLSFlags) LoadProcess(log *slog.Logger) (*ClusterTLS, error) {
	files := f.Cert != "" || f.Key != "" || f.CA != ""
	switch {
	case f.Plain && files:
		return nil, errors.New("-plain-cluster and the -cluster-* flags exclude each other")
	case f.Plain:
		WarnPlain(log)
		return nil, nil
	case !files:
		return nil, ErrNoClusterTLS
	}
	return f.Load(log)
}

// ClusterTLS is a process's loaded cluster credentials; a nil one is
// plain text.
type ClusterTLS struct {
	creds *rpcnet.Creds
	https *tls.Config
}

// Load returns the credentials the flags name, or nil when none is set
// (plain text; the caller warns). Some but not all of them is an error.
func (f ClusterTLSFlags) Load(log *slog.Logger) (*ClusterTLS, error) {
	if f.Cert == "" && f.Key == "" && f.CA == "" {
		return nil, nil
	}
	if f.Cert == "" || f.Key == "" || f.CA == "" {
		return nil, errors.New("-cluster-tls-cert, -cluster-tls-key and -cluster-ca go together")
	}
	cl, err := certs.NewCluster(f.Cert, f.Key, f.CA, log)
	if err != nil {
		return nil, err
	}
	return &ClusterTLS{creds: clusterCreds(cl), https: cl.HTTPSConfig()}, nil
}

// clusterCreds are the gRPC credentials of a cluster member: mutual TLS,
// and each call checked against the role its peer's certificate names.
func clusterCreds(cl *certs.Cluster) *rpcnet.Creds {
	return rpcnet.NewCreds(cl.ServerConfig(), cl.ClientConfig()).WithAuthorizer(AuthorizeRole)
}

// Creds are the gRPC credentials; nil for a nil t.
func (t *ClusterTLS) Creds() *rpcnet.Creds {
	if t == nil {
		return nil
	}
	return t.creds
}

// HTTPS serves the process's certificate on its admin listener; nil for
// a nil t.
func (t *ClusterTLS) HTTPS() *tls.Config {
	if t == nil {
		return nil
	}
	return t.https
}

// WarnPlain logs, once at start, that the cluster plane is plain text.
func WarnPlain(log *slog.Logger) {
	log.Warn("cluster plane in plain text (-plain-cluster), open to any process that reaches it: give -cluster-tls-cert, -cluster-tls-key and -cluster-ca instead for mutual TLS (docs/security.md)")
}
