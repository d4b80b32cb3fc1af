package adminhttp

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestHTTPSAndHTTPOnOnePort: the listener tells TLS from plain HTTP by
// the first byte; both reach the same routes, and the API handler gets
// requests with an api-version even where a route of the listener's own
// would match.
func TestHTTPSAndHTTPOnOnePort(t *testing.T) {
	dir := t.TempDir()
	cfg, certPath, err := TLSConfig("", "", dir)
	if err != nil {
		t.Fatal(err)
	}
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		proto := "http"
		if r.TLS != nil {
			proto = "https"
		}
		io.WriteString(w, "api "+proto+" "+r.URL.Path)
	})
	s := New(Config{Addr: "127.0.0.1:0", TLS: cfg, API: api, TLSAddr: "127.0.0.1:0"})
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown(context.Background())

	pemBytes, err := os.ReadFile(certPath)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pemBytes)
	https := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}

	for _, tc := range []struct {
		client *http.Client
		url    string
		want   string
	}{
		{http.DefaultClient, "http://" + s.Addr() + "/healthz", "ok\n"},
		{https, "https://" + s.Addr() + "/healthz", "ok\n"},
		{https, "https://localhost:" + port(s.Addr()) + "/q", "api https /q"},
		{http.DefaultClient, "http://" + s.Addr() + "/q", "api http /q"},
		{https, "https://" + s.Addr() + "/healthz?api-version=2024-05", "api https /healthz"},
		{https, "https://" + s.TLSAddr() + "/q", "api https /q"},
	} {
		resp, err := tc.client.Get(tc.url)
		if err != nil {
			t.Fatalf("%s: %v", tc.url, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(body) != tc.want {
			t.Errorf("%s: %q, want %q", tc.url, body, tc.want)
		}
	}

	// A client that connects and says nothing holds up nobody.
	silent, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	c := &http.Client{Timeout: 5 * time.Second}
	if resp, err := c.Get("http://" + s.Addr() + "/healthz"); err != nil {
		t.Fatalf("behind a silent connection: %v", err)
	} else {
		resp.Body.Close()
	}

	// The certificate is kept: a restart serves the same one.
	again, path2, err := TLSConfig("", "", dir)
	if err != nil || path2 != filepath.Join(dir, "admin-cert.pem") {
		t.Fatalf("second TLSConfig: %v, %s", err, path2)
	}
	if string(again.Certificates[0].Certificate[0]) != string(cfg.Certificates[0].Certificate[0]) {
		t.Fatal("a second start made a new certificate")
	}
}

func port(addr string) string {
	_, p, _ := net.SplitHostPort(addr)
	return p
}

func TestTLSConfigFromFiles(t *testing.T) {
	dir := t.TempDir()
	certPEM, keyPEM, err := SelfSignedCert([]string{"broker.example"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := filepath.Join(dir, "c.pem"), filepath.Join(dir, "k.pem")
	os.WriteFile(certFile, certPEM, 0o600)
	os.WriteFile(keyFile, keyPEM, 0o600)
	cfg, path, err := TLSConfig(certFile, keyFile, "")
	if err != nil || path != certFile || len(cfg.Certificates) != 1 {
		t.Fatalf("TLSConfig(files) = %v, %q, %v", cfg, path, err)
	}
	leaf, err := x509.ParseCertificate(cfg.Certificates[0].Certificate[0])
	if err != nil || leaf.DNSNames[0] != "broker.example" {
		t.Fatalf("served certificate %v, %v", leaf, err)
	}
	if _, _, err := TLSConfig(certFile, filepath.Join(dir, "missing.pem"), ""); err == nil {
		t.Fatal("a missing key file was accepted")
	}
}

// TestTLSOnly: with TLSOnly the listener answers HTTPS and refuses plain
// HTTP (what nodes and front-ends do with the cluster TLS flags).
func TestTLSOnly(t *testing.T) {
	cfg, certPath, err := TLSConfig("", "", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	s := New(Config{Addr: "127.0.0.1:0", TLS: cfg, TLSOnly: true})
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown(context.Background())
	pemBytes, err := os.ReadFile(certPath)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pemBytes)
	https := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	resp, err := https.Get("https://" + s.Addr() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("HTTPS /healthz: %s", resp.Status)
	}
	plain := &http.Client{Timeout: 5 * time.Second}
	if resp, err := plain.Get("http://" + s.Addr() + "/healthz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Fatal("plain HTTP was answered")
		}
	}
}
