// Package rpcnet is how quorumbus processes dial and serve each other's
// gRPC: storage nodes among themselves (Raft, PartitionService, group
// membership), front-ends, gateways and the CLI towards nodes, placement
// members towards each other. Every connection is made by Dial and every
// server takes ServerOptions, so that the options they share (mutual TLS,
// keepalive, reconnect backoff, pooled buffers) are set in one place.
package rpcnet

import (
	"crypto/tls"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"

	"github.com/quorumbus/quorumbus/proto/rpcbuf"
)

// Creds is one process's side of the cluster's mutual TLS: the
// configuration it serves with (which must demand and verify a client
// certificate) and the one it dials with (which presents its own and
// verifies the server's). A nil *Creds is plain text both ways.
type Creds struct {
	server, client *tls.Config
}

// NewCreds returns credentials from a server and a client configuration
// (frontend/certs.Cluster makes both from the certificate files).
func NewCreds(server, client *tls.Config) *Creds {
	return &Creds{server: server, client: client}
}

func (c *Creds) clientCredentials() credentials.TransportCredentials {
	if c == nil {
		return insecure.NewCredentials()
	}
	return credentials.NewTLS(c.client)
}

// Dial returns a client connection to target with the options every
// connection between quorumbus processes shares, then opts (a caller's
// message limits, idle timeout; tests' network), which win over the
// shared ones they repeat.
func Dial(target string, creds *Creds, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	all := []grpc.DialOption{
		grpc.WithTransportCredentials(creds.clientCredentials()),
		// A process that restarts on the same address is reachable again
		// within about a second, not after gRPC's default 120 s maximum
		// backoff.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: 2 * time.Second,
		}),
		// A peer that stops answering without closing the connection
		// (paused, frozen, cut off; the kernel of a paused process still
		// answers TCP's own keepalive) is noticed within 15 s. Servers
		// admit pings every 5 s (ServerOptions).
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 10 * time.Second, Timeout: 5 * time.Second, PermitWithoutStream: true}),
	}
	all = append(all, rpcbuf.DialOptions()...)
	all = append(all, opts...)
	return grpc.NewClient(target, all...)
}

// ServerOptions are the options every quorumbus gRPC server needs: the
// credentials (with Creds, a client without a certificate of the cluster
// fails the handshake and reaches no service), the keepalive policy that
// admits Dial's pings, and the pooled buffers.
func ServerOptions(creds *Creds) []grpc.ServerOption {
	opts := []grpc.ServerOption{
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
	}
	if creds != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(creds.server)))
	}
	return append(opts, rpcbuf.ServerOptions()...)
}
