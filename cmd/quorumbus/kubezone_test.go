package main

import (
	"context"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// fakeAPIServer answers GET /api/v1/nodes/<name> as the Kubernetes API
// server does, for a bearer token it expects.
type fakeAPIServer struct {
	*httptest.Server
	dir      string // service account directory: token, ca.crt
	failures atomic.Int32
}

func newFakeAPIServer(t *testing.T, nodes map[string]map[string]string) *fakeAPIServer {
	t.Helper()
	f := &fakeAPIServer{dir: t.TempDir()}
	f.Server = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if f.failures.Load() > 0 {
			f.failures.Add(-1)
			http.Error(w, "etcd leader changed", http.StatusServiceUnavailable)
			return
		}
		tok, _ := os.ReadFile(filepath.Join(f.dir, "token"))
		if r.Header.Get("Authorization") != "Bearer "+strings.TrimSpace(string(tok)) {
			http.Error(w, `{"kind":"Status","code":401}`, http.StatusUnauthorized)
			return
		}
		name, ok := strings.CutPrefix(r.URL.Path, "/api/v1/nodes/")
		if !ok || r.Method != http.MethodGet {
			http.NotFound(w, r)
			return
		}
		if name == "forbidden" {
			http.Error(w, `{"kind":"Status","code":403}`, http.StatusForbidden)
			return
		}
		labels, ok := nodes[name]
		if !ok {
			http.Error(w, `{"kind":"Status","code":404}`, http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		lj := "{"
		first := true
		for k, v := range labels {
			if !first {
				lj += ","
			}
			first = false
			lj += fmt.Sprintf("%q:%q", k, v)
		}
		lj += "}"
		fmt.Fprintf(w, `{"kind":"Node","apiVersion":"v1","metadata":{"name":%q,"labels":%s},"status":{"images":[]}}`, name, lj)
	}))
	t.Cleanup(f.Close)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: f.Certificate().Raw})
	if err := os.WriteFile(filepath.Join(f.dir, "ca.crt"), ca, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(f.dir, "token"), []byte("token-1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fakeAPIServer) source(node string) kubeZoneSource {
	return kubeZoneSource{NodeName: node, Label: "topology.kubernetes.io/zone",
		APIServer: strings.TrimPrefix(f.URL, "https://"), AccountDir: f.dir}
}

func TestZoneFromKubernetesNode(t *testing.T) {
	f := newFakeAPIServer(t, map[string]map[string]string{
		"machine-a": {"topology.kubernetes.io/zone": "eu-1a", "kubernetes.io/hostname": "machine-a"},
		"machine-b": {"kubernetes.io/hostname": "machine-b"},
	})
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	if z, err := f.source("machine-a").zone(ctx, log); err != nil || z != "eu-1a" {
		t.Fatalf("machine-a: zone %q, %v; want eu-1a", z, err)
	}
	// A machine without the label is in no zone: not an error.
	if z, err := f.source("machine-b").zone(ctx, log); err != nil || z != "" {
		t.Fatalf("machine-b: zone %q, %v; want none", z, err)
	}

	// Transient failures are retried; the token is read again each time,
	// as Kubernetes rotates it in place.
	f.failures.Store(2)
	if err := os.WriteFile(filepath.Join(f.dir, "token"), []byte("token-2"), 0o600); err != nil {
		t.Fatal(err)
	}
	if z, err := f.source("machine-a").zone(ctx, log); err != nil || z != "eu-1a" {
		t.Fatalf("after two 503s: zone %q, %v; want eu-1a", z, err)
	}

	// Answers that will not change fail at once, naming the cause.
	for node, want := range map[string]string{
		"forbidden": "needs get on nodes",
		"missing":   "404",
	} {
		start := time.Now()
		_, err := f.source(node).zone(ctx, log)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("node %s: err %v, want one naming %q", node, err, want)
		}
		if time.Since(start) > 2*time.Second {
			t.Errorf("node %s: a permanent refusal was retried", node)
		}
	}
	src := f.source("machine-a")
	src.AccountDir = t.TempDir()
	if _, err := src.zone(ctx, log); err == nil || !strings.Contains(err.Error(), "CA") {
		t.Errorf("no service account: err %v", err)
	}
	src = f.source("")
	if _, err := src.zone(ctx, log); err == nil {
		t.Errorf("no node name: no error")
	}

	// An unreachable API server is retried until the deadline.
	src = f.source("machine-a")
	src.APIServer = "127.0.0.1:1"
	short, cancelShort := context.WithTimeout(context.Background(), 600*time.Millisecond)
	defer cancelShort()
	if _, err := src.zone(short, log); err == nil || !strings.Contains(err.Error(), "deadline") {
		t.Errorf("unreachable API server: err %v", err)
	}
}
