package certs

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func caPool(t *testing.T, path string) *x509.CertPool {
	t.Helper()
	pem, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		t.Fatal("no CA in " + path)
	}
	return pool
}

// handshake connects a client that trusts pool to a server with cfg, for
// serverName, and returns the server certificate the client saw.
func handshake(t *testing.T, cfg *tls.Config, pool *x509.CertPool, serverName string) (*x509.Certificate, error) {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			c.(*tls.Conn).Handshake()
			c.Close()
		}
	}()
	c, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: pool, ServerName: serverName})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0], nil
}

// TestGenerateDev: the dev CA and server certificate serve TLS to a
// client that trusts the CA, for localhost, loopback addresses and the
// extra hosts; a second start keeps them, and a client that does not
// trust the CA is refused.
func TestGenerateDev(t *testing.T) {
	dir := t.TempDir()
	f, err := GenerateDev(dir, "broker.example")
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewReloader(f.Cert, f.Key, nil)
	if err != nil {
		t.Fatal(err)
	}
	pool := caPool(t, f.CA)
	for _, host := range []string{"localhost", "127.0.0.1", "broker.example"} {
		if _, err := handshake(t, r.TLSConfig(), pool, host); err != nil {
			t.Fatalf("%s: %v", host, err)
		}
	}
	if _, err := handshake(t, r.TLSConfig(), pool, "other.example"); err == nil {
		t.Fatal("a host the certificate does not name passed")
	}
	if _, err := handshake(t, r.TLSConfig(), x509.NewCertPool(), "localhost"); err == nil {
		t.Fatal("a client that does not trust the CA passed")
	}
	before, _ := os.ReadFile(f.CA)
	beforeCert, _ := os.ReadFile(f.Cert)
	if _, err := GenerateDev(dir, "broker.example"); err != nil {
		t.Fatal(err)
	}
	after, _ := os.ReadFile(f.CA)
	afterCert, _ := os.ReadFile(f.Cert)
	if !bytes.Equal(before, after) || !bytes.Equal(beforeCert, afterCert) {
		t.Fatal("a second start replaced valid files")
	}
	// A new host needs a new server certificate from the same CA.
	if _, err := GenerateDev(dir, "broker.example", "second.example"); err != nil {
		t.Fatal(err)
	}
	if after, _ := os.ReadFile(f.CA); !bytes.Equal(before, after) {
		t.Fatal("the CA changed for a new host")
	}
	r2, err := NewReloader(f.Cert, f.Key, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := handshake(t, r2.TLSConfig(), pool, "second.example"); err != nil {
		t.Fatal(err)
	}
}

// TestReloaderFollowsRotation: new files are served after the check
// interval; files that do not load keep the previous pair in service.
func TestReloaderFollowsRotation(t *testing.T) {
	dir := t.TempDir()
	f, err := GenerateDev(filepath.Join(dir, "one"))
	if err != nil {
		t.Fatal(err)
	}
	g, err := GenerateDev(filepath.Join(dir, "two"))
	if err != nil {
		t.Fatal(err)
	}
	clock := time.Now()
	r, err := NewReloader(f.Cert, f.Key, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	r.now = func() time.Time { return clock }
	first, _ := r.GetCertificate(nil)

	copyFile := func(from, to string) {
		data, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(to, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// Half a rotation: a new key with the old certificate does not load.
	copyFile(g.Key, f.Key)
	clock = clock.Add(2 * checkInterval)
	if got, _ := r.GetCertificate(nil); got != first {
		t.Fatal("a pair that does not load replaced the served one")
	}
	copyFile(g.Cert, f.Cert)
	if got, _ := r.GetCertificate(nil); got != first {
		t.Fatal("the files were read again within the check interval")
	}
	clock = clock.Add(2 * checkInterval)
	got, _ := r.GetCertificate(nil)
	if got == first {
		t.Fatal("the rotated pair is not served")
	}
	leaf, _ := x509.ParseCertificate(got.Certificate[0])
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: caPool(t, g.CA), DNSName: "localhost"}); err != nil {
		t.Fatalf("the served certificate is not the new one: %v", err)
	}
	if _, err := NewReloader(filepath.Join(dir, "missing.crt"), f.Key, nil); err == nil {
		t.Fatal("a missing file loads")
	}
}

// FuzzHandshakeGarbage: whatever a peer sends instead of a ClientHello,
// the server's handshake fails without panicking.
func FuzzHandshakeGarbage(f *testing.F) {
	dir := f.TempDir()
	files, err := GenerateDev(dir)
	if err != nil {
		f.Fatal(err)
	}
	r, err := NewReloader(files.Cert, files.Key, nil)
	if err != nil {
		f.Fatal(err)
	}
	cfg := r.TLSConfig()
	f.Add([]byte("AMQP\x00\x01\x00\x00"))
	f.Add([]byte{0x16, 0x03, 0x01, 0x00, 0x05, 1, 0, 0, 1, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		client, server := net.Pipe()
		defer client.Close()
		// Drain what the server answers (an alert, a ServerHello): on a
		// synchronous pipe an unread answer would hold the handshake until
		// its deadline, a second per input.
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
