package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/cmd/quorumbus/cluster"
	"github.com/quorumbus/quorumbus/frontend/certs"
	"github.com/quorumbus/quorumbus/placement/sas"
)

// TestFrontendAdminHTTPSWithPlainCluster: a `quorumbus frontend` with a
// plain cluster plane and -tls-cert/-tls-key serves its admin listener
// (health, metrics) over HTTPS with that certificate, and plain HTTP
// still for probes that do not speak TLS.
func TestFrontendAdminHTTPSWithPlainCluster(t *testing.T) {
	bin := buildBinary(t)
	dir := t.TempDir()
	files, err := certs.GenerateDev(filepath.Join(dir, "tls"))
	if err != nil {
		t.Fatal(err)
	}
	rules := filepath.Join(dir, "rules.json")
	if err := cluster.WriteRulesConfig(rules, sas.DevRule()); err != nil {
		t.Fatal(err)
	}
	addrs := freeAddrs(t, 3) // AMQP, HTTP, and a placement address nobody serves
	startProcess(t, bin, "frontend", "-plain-cluster", "-amqp-addr", addrs[0], "-http-addr", addrs[1], "-placement", addrs[2],
		"-sas-rules", rules, "-tls-cert", files.Cert, "-tls-key", files.Key, "-throttle-credits", "0", "-log-level", "error")

	pool := x509.NewCertPool()
	caPEM, err := os.ReadFile(files.CA)
	if err != nil {
		t.Fatal(err)
	}
	pool.AppendCertsFromPEM(caPEM)
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	get := func(url string) (int, error) {
		resp, err := hc.Get(url)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	var status int
	for {
		if status, err = get("https://" + addrs[1] + "/healthz"); err == nil || ctx.Err() != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil || status != http.StatusOK {
		t.Fatalf("/healthz over HTTPS: %d, %v", status, err)
	}
	if status, err := get("http://" + addrs[1] + "/healthz"); err != nil || status != http.StatusOK {
		t.Fatalf("/healthz over plain HTTP: %d, %v", status, err)
	}
}
