package certs

import (
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func loadCluster(t *testing.T, f DevFiles) *Cluster {
	t.Helper()
	c, err := NewCluster(f.Cert, f.Key, f.CA, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// exchange runs one connection from a client with clientCfg to a server
// with serverCfg; the server writes a byte once its side of the handshake
// passed, which the client must read (with TLS 1.3 the client's handshake
// returns before the server has checked the client's certificate).
func exchange(t *testing.T, serverCfg, clientCfg *tls.Config) error {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", serverCfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if c.(*tls.Conn).Handshake() == nil {
			c.Write([]byte{1})
		}
	}()
	c, err := tls.Dial("tcp", ln.Addr().String(), clientCfg)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	var b [1]byte
	_, err = io.ReadFull(c, b[:])
	return err
}

// TestClusterMutualTLS: members of one cluster CA reach each other; a
// client without a certificate, or with one of another CA, is refused by
// the server, and a server of another CA is refused by the client.
func TestClusterMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ours, err := GenerateDevCluster(filepath.Join(dir, "ours"), DevMember{"n1", RoleNode}, DevMember{"cli", RoleCLI})
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := GenerateDevCluster(filepath.Join(dir, "theirs"), DevMember{"n1", RoleNode})
	if err != nil {
		t.Fatal(err)
	}
	n1, cli, foreign := loadCluster(t, ours["n1"]), loadCluster(t, ours["cli"]), loadCluster(t, theirs["n1"])

	if err := exchange(t, n1.ServerConfig(), cli.ClientConfig()); err != nil {
		t.Fatalf("a member was refused: %v", err)
	}
	noCert := &tls.Config{InsecureSkipVerify: true}
	if err := exchange(t, n1.ServerConfig(), noCert); err == nil {
		t.Fatal("a client without a certificate got in")
	}
	if err := exchange(t, n1.ServerConfig(), foreign.ClientConfig()); err == nil {
		t.Fatal("a client with a certificate of another CA got in")
	}
	if err := exchange(t, foreign.ServerConfig(), cli.ClientConfig()); !errors.Is(err, ErrNotMember) {
		t.Fatalf("a server of another CA: %v, want %v", err, ErrNotMember)
	}
	// Only nodes serve: a member of another role cannot pose as one.
	if err := exchange(t, cli.ServerConfig(), n1.ClientConfig()); !errors.Is(err, ErrRole) {
		t.Fatalf("a server with the cli role: %v, want %v", err, ErrRole)
	}
	// The admin listener's HTTPS needs no client certificate.
	if err := exchange(t, n1.HTTPSConfig(), noCert); err != nil {
		t.Fatalf("HTTPS without a client certificate: %v", err)
	}

	// A second start keeps the files.
	before, _ := os.ReadFile(ours["n1"].Cert)
	if _, err := GenerateDevCluster(filepath.Join(dir, "ours"), DevMember{"n1", RoleNode}, DevMember{"cli", RoleCLI}); err != nil {
		t.Fatal(err)
	}
	if after, _ := os.ReadFile(ours["n1"].Cert); string(after) != string(before) {
		t.Fatal("a second start replaced a valid certificate")
	}
	if _, err := NewCluster(ours["n1"].Cert, ours["n1"].Key, "", nil); err == nil {
		t.Fatal("no CA file loads")
	}
}

// TestClusterRotation: a running process follows a rotation of its files
// without a restart. Its CA file becomes a bundle of the old and a new CA
// (both admitted), then the new CA only (the old refused), and its own
// certificate is replaced by one of the new CA, which clients that trust
// only the new CA then accept.
func TestClusterRotation(t *testing.T) {
	dir := t.TempDir()
	old, err := GenerateDevCluster(filepath.Join(dir, "old"), DevMember{"n1", RoleNode}, DevMember{"cli", RoleCLI})
	if err != nil {
		t.Fatal(err)
	}
	next, err := GenerateDevCluster(filepath.Join(dir, "new"), DevMember{"n1", RoleNode}, DevMember{"cli", RoleCLI})
	if err != nil {
		t.Fatal(err)
	}
	// The running process's files, a copy it is given and that rotates.
	live := DevFiles{CA: filepath.Join(dir, "ca.crt"), Cert: filepath.Join(dir, "n1.crt"), Key: filepath.Join(dir, "n1.key")}
	put := func(to string, from ...string) {
		var data []byte
		for _, f := range from {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			data = append(data, b...)
		}
		tmp := to + ".tmp"
		if err := os.WriteFile(tmp, data, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, to); err != nil {
			t.Fatal(err)
		}
	}
	put(live.CA, old["n1"].CA)
	put(live.Cert, old["n1"].Cert)
	put(live.Key, old["n1"].Key)
	clock := time.Now()
	n1 := loadCluster(t, live)
	n1.pair.now = func() time.Time { return clock }
	n1.ca.now = func() time.Time { return clock }
	oldCLI, newCLI := loadCluster(t, old["cli"]), loadCluster(t, next["cli"])

	if err := exchange(t, n1.ServerConfig(), newCLI.ClientConfig()); err == nil {
		t.Fatal("a client of the new CA got in before the rotation")
	}
	// Every process gets the bundle first, the CLI with a certificate of
	// the new CA too.
	put(live.CA, old["n1"].CA, next["n1"].CA)
	bundle := filepath.Join(dir, "bundle.crt")
	put(bundle, old["n1"].CA, next["n1"].CA)
	newCLIBundle := loadCluster(t, DevFiles{CA: bundle, Cert: next["cli"].Cert, Key: next["cli"].Key})
	clock = clock.Add(2 * checkInterval)
	for name, c := range map[string]*Cluster{"old": oldCLI, "new": newCLIBundle} {
		if err := exchange(t, n1.ServerConfig(), c.ClientConfig()); err != nil {
			t.Fatalf("with the bundle, a client of the %s CA: %v", name, err)
		}
	}
	put(live.Key, next["n1"].Key)
	put(live.Cert, next["n1"].Cert)
	put(live.CA, next["n1"].CA)
	clock = clock.Add(2 * checkInterval)
	if err := exchange(t, n1.ServerConfig(), oldCLI.ClientConfig()); err == nil {
		t.Fatal("a client of the dropped CA got in")
	}
	if err := exchange(t, n1.ServerConfig(), newCLI.ClientConfig()); err != nil {
		t.Fatalf("after the rotation, a client of the new CA (which checks the server's new certificate): %v", err)
	}
	// The process dials with its new certificate too.
	newServer := loadCluster(t, next["n1"])
	if err := exchange(t, newServer.ServerConfig(), n1.ClientConfig()); err != nil {
		t.Fatalf("dialing with the rotated certificate: %v", err)
	}
	// A CA file that no longer parses keeps the CA in use.
	if err := os.WriteFile(live.CA, []byte("not PEM"), 0o600); err != nil {
		t.Fatal(err)
	}
	clock = clock.Add(2 * checkInterval)
	if err := exchange(t, n1.ServerConfig(), newCLI.ClientConfig()); err != nil {
		t.Fatalf("a broken CA file dropped the CA in use: %v", err)
	}
}

// FuzzClusterHandshakeGarbage: whatever a peer sends to a cluster
// listener instead of a ClientHello (with or without a certificate), the
// handshake fails without panicking.
func FuzzClusterHandshakeGarbage(f *testing.F) {
	files, err := GenerateDevCluster(f.TempDir(), DevMember{"n1", RoleNode})
	if err != nil {
		f.Fatal(err)
	}
	c, err := NewCluster(files["n1"].Cert, files["n1"].Key, files["n1"].CA, quietLog())
	if err != nil {
		f.Fatal(err)
	}
	cfg := c.ServerConfig()
	f.Add([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"))
	f.Add([]byte{0x16, 0x03, 0x01, 0x00, 0x05, 1, 0, 0, 1, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		client, server := net.Pipe()
		defer client.Close()
		go io.Copy(io.Discard, client)
		go func() {
			client.Write(data)
			client.Close()
		}()
		s := tls.Server(server, cfg)
		s.SetDeadline(time.Now().Add(time.Second))
		if err := s.Handshake(); err == nil {
			t.Fatal("a handshake of garbage succeeded")
		}
		s.Close()
	})
}
