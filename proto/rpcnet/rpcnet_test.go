package rpcnet_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

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
	ours, err := certs.GenerateDevCluster(filepath.Join(dir, "ours"), certs.DevMember{Name: "server", Role: certs.RoleNode}, certs.DevMember{Name: "client", Role: certs.RoleFrontend})
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := certs.GenerateDevCluster(filepath.Join(dir, "theirs"), certs.DevMember{Name: "client", Role: certs.RoleFrontend})
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

// TestAuthorizer: with an Authorizer, a member's call reaches the service
// only when it admits the peer's certificate, unary and streaming alike;
// a refusal is PermissionDenied.
func TestAuthorizer(t *testing.T) {
	dir := t.TempDir()
	files, err := certs.GenerateDevCluster(dir, certs.DevMember{Name: "server", Role: certs.RoleNode},
		certs.DevMember{Name: "frontend", Role: certs.RoleFrontend}, certs.DevMember{Name: "cli", Role: certs.RoleCLI})
	if err != nil {
		t.Fatal(err)
	}
	var asked []string
	var mu sync.Mutex
	onlyFrontends := func(method string, cert *x509.Certificate) error {
		mu.Lock()
		asked = append(asked, method)
		mu.Unlock()
		if certs.RoleOf(cert) != certs.RoleFrontend {
			return fmt.Errorf("role %q refused", certs.RoleOf(cert))
		}
		return nil
	}
	addr := serve(t, creds(t, files["server"]).WithAuthorizer(onlyFrontends))
	if err := check(addr, creds(t, files["frontend"])); err != nil {
		t.Fatalf("an admitted role: %v", err)
	}
	err = check(addr, creds(t, files["cli"]))
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), `role "cli" refused`) {
		t.Fatalf("a refused role: %v, want PermissionDenied", err)
	}
	// A stream (Watch) is checked too.
	cc, err := rpcnet.Dial(addr, creds(t, files["cli"]))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	w, err := healthpb.NewHealthClient(cc).Watch(ctx, &healthpb.HealthCheckRequest{})
	if err == nil {
		_, err = w.Recv()
	}
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("a refused role's stream: %v, want PermissionDenied", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Contains(asked, "/grpc.health.v1.Health/Watch") || !slices.Contains(asked, "/grpc.health.v1.Health/Check") {
		t.Fatalf("the authorizer was asked about %v", asked)
	}
}
