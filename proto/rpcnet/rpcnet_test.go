package rpcnet_test

import (
	"context"
	"crypto/tls"
	"net"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/quorumbus/quorumbus/frontend/certs"
	"github.com/quorumbus/quorumbus/proto/rpcnet"
)

func creds(t *testing.T, f certs.DevFiles) *rpcnet.Creds {
	t.Helper()
	c, err := certs.NewCluster(f.Cert, f.Key, f.CA, nil)
	if err != nil {
		t.Fatal(err)
	}
	return rpcnet.NewCreds(c.ServerConfig(), c.ClientConfig())
}

// serve starts a gRPC server with ServerOptions(c) and the health service.
func serve(t *testing.T, c *rpcnet.Creds) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(rpcnet.ServerOptions(c)...)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	return ln.Addr().String()
}

func check(addr string, c *rpcnet.Creds) error {
	cc, err := rpcnet.Dial(addr, c)
	if err != nil {
		return err
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
	return err
}

// TestDialAndServe: with Creds, a server answers members of its cluster
// CA only; without, Dial and ServerOptions speak plain text.
func TestDialAndServe(t *testing.T) {
	dir := t.TempDir()
	ours, err := certs.GenerateDevCluster(filepath.Join(dir, "ours"), "server", "client")
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := certs.GenerateDevCluster(filepath.Join(dir, "theirs"), "client")
	if err != nil {
		t.Fatal(err)
	}
	secure := serve(t, creds(t, ours["server"]))
	if err := check(secure, creds(t, ours["client"])); err != nil {
		t.Fatalf("a member: %v", err)
	}
	for name, c := range map[string]*rpcnet.Creds{
		"plain text":          nil,
		"no certificate":      rpcnet.NewCreds(nil, &tls.Config{InsecureSkipVerify: true}),
		"another CA's client": creds(t, theirs["client"]),
	} {
		if err := check(secure, c); err == nil {
			t.Errorf("%s was answered", name)
		}
	}
	plain := serve(t, nil)
	if err := check(plain, nil); err != nil {
		t.Fatalf("plain text: %v", err)
	}
}
