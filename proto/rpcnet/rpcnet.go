// Package rpcnet is how quorumbus processes dial and serve each other's
// gRPC: storage nodes among themselves (Raft, PartitionService, group
// membership), front-ends, gateways and the CLI towards nodes, placement
// members towards each other. Every connection is made by Dial and every
// server takes ServerOptions, so that the options they share (mutual TLS,
// keepalive, reconnect backoff, pooled buffers) are set in one place.
package rpcnet

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/quorumbus/quorumbus/proto/rpcbuf"
)

// Creds is one process's side of the cluster's mutual TLS: the
// configuration it serves with (which must demand and verify a client
// certificate) and the one it dials with (which presents its own and
// verifies the server's). A nil *Creds is plain text both ways.
type Creds struct {
	server, client *tls.Config
	authorize      Authorizer
}

// NewCreds returns credentials from a server and a client configuration
// (frontend/certs.Cluster makes both from the certificate files).
func NewCreds(server, client *tls.Config) *Creds {
	return &Creds{server: server, client: client}
}

// Authorizer decides whether the peer that presented cert (verified by the
// handshake against the cluster CA) may call fullMethod
// ("/package.Service/Method"); an error refuses the call.
type Authorizer func(fullMethod string, cert *x509.Certificate) error

// WithAuthorizer returns a copy of c whose servers (ServerOptions) ask a
// before every call, unary or streaming, and refuse with PermissionDenied
// what it refuses.
func (c *Creds) WithAuthorizer(a Authorizer) *Creds {
	cp := *c
	cp.authorize = a
	return &cp
}

// check asks the authorizer about the call in ctx.
func (c *Creds) check(ctx context.Context, method string) error {
	var cert *x509.Certificate
	if p, ok := peer.FromContext(ctx); ok {
		if info, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(info.State.PeerCertificates) > 0 {
			cert = info.State.PeerCertificates[0]
		}
	}
	if err := c.authorize(method, cert); err != nil {
		return status.Error(codes.PermissionDenied, err.Error())
	}
	return nil
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
// fails the handshake and reaches no service; with an Authorizer, a member
// reaches only the methods its certificate's role admits), the keepalive
// policy that admits Dial's pings, and the pooled buffers.
func ServerOptions(creds *Creds) []grpc.ServerOption {
	opts := []grpc.ServerOption{
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
	}
	if creds != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(creds.server)))
	}
	if creds != nil && creds.authorize != nil {
		opts = append(opts,
			grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
				if err := creds.check(ctx, info.FullMethod); err != nil {
					return nil, err
				}
				return h(ctx, req)
			}),
			grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
				if err := creds.check(ss.Context(), info.FullMethod); err != nil {
					return err
				}
				return h(srv, ss)
			}))
	}
	return append(opts, rpcbuf.ServerOptions()...)
}
