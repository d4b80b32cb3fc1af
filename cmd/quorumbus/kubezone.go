package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// A storage node on Kubernetes learns its zone from the label of the
// machine (the Kubernetes Node) its pod runs on. Pods carry that label only
// where the PodTopologyLabelsAdmission feature copies it, so the node asks
// the API server itself: one GET of its Node object with the pod's service
// account, at start. The standard library is enough for one authenticated
// GET; client-go would more than double the binary for it.

// defaultServiceAccountDir is where Kubernetes mounts a pod's service
// account token and the cluster's CA.
const defaultServiceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// kubeZoneSource says how to ask the API server for a Node's zone label.
type kubeZoneSource struct {
	NodeName string // the Kubernetes Node the pod runs on (spec.nodeName)
	Label    string // e.g. topology.kubernetes.io/zone
	// APIServer is host:port; empty means the in-cluster address from
	// KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT.
	APIServer string
	// AccountDir holds token and ca.crt.
	AccountDir string
}

// maxNodeObjectBytes bounds the Node object read: real ones are a few KiB
// to a few tens (images lists); anything far larger is not an API server.
const maxNodeObjectBytes = 4 << 20

// zone asks the API server for the Node's label, retrying transient
// failures until ctx ends. A Node without the label has no zone: that is
// an answer (""), not an error, since clusters in one zone often lack it.
func (s kubeZoneSource) zone(ctx context.Context, log *slog.Logger) (string, error) {
	if s.NodeName == "" {
		return "", errors.New("no Kubernetes node name (the chart passes spec.nodeName as NODE_NAME)")
	}
	client, base, err := s.client()
	if err != nil {
		return "", err
	}
	u := base + "/api/v1/nodes/" + url.PathEscape(s.NodeName)
	delay := 250 * time.Millisecond
	for {
		zone, retry, err := s.fetch(ctx, client, u)
		if err == nil {
			return zone, nil
		}
		if !retry {
			return "", err
		}
		log.Warn("reading the node's zone from the Kubernetes API", "node", s.NodeName, "err", err, "retry_in", delay)
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("reading node %s's zone: %w (last error: %v)", s.NodeName, ctx.Err(), err)
		case <-time.After(delay):
		}
		delay = min(2*delay, 4*time.Second)
	}
}

func (s kubeZoneSource) client() (*http.Client, string, error) {
	dir := s.AccountDir
	if dir == "" {
		dir = defaultServiceAccountDir
	}
	caPEM, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil {
		return nil, "", fmt.Errorf("the service account's CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, "", fmt.Errorf("%s holds no PEM certificate", filepath.Join(dir, "ca.crt"))
	}
	server := s.APIServer
	if server == "" {
		host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
		if host == "" || port == "" {
			return nil, "", errors.New("KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set: not in a Kubernetes pod")
		}
		server = net.JoinHostPort(host, port)
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &bearerToken{path: filepath.Join(dir, "token"), next: tr}}
	return client, "https://" + server, nil
}

// fetch does one GET. retry says whether the error may go away: network
// errors, 429 and 5xx may; a refusal (401, 403) or a missing Node will not.
func (s kubeZoneSource) fetch(ctx context.Context, client *http.Client, u string) (zone string, retry bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return "", false, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return "", !errors.Is(err, errTokenUnreadable), err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxNodeObjectBytes+1))
	if err != nil {
		return "", true, err
	}
	switch {
	case resp.StatusCode == http.StatusOK:
	case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
		return "", true, fmt.Errorf("API server answered %s", resp.Status)
	case resp.StatusCode == http.StatusForbidden:
		return "", false, fmt.Errorf("API server refused to show node %s (%s): the service account needs get on nodes (the chart's ClusterRole)", s.NodeName, resp.Status)
	default:
		return "", false, fmt.Errorf("API server answered %s for node %s", resp.Status, s.NodeName)
	}
	if len(body) > maxNodeObjectBytes {
		return "", false, fmt.Errorf("node object larger than %d bytes", maxNodeObjectBytes)
	}
	var node struct {
		Kind     string `json:"kind"`
		Metadata struct {
			Name   string            `json:"name"`
			Labels map[string]string `json:"labels"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(body, &node); err != nil {
		return "", false, fmt.Errorf("decoding node %s: %w", s.NodeName, err)
	}
	if node.Kind != "Node" || node.Metadata.Name != s.NodeName {
		return "", false, fmt.Errorf("API server answered a %q named %q, not Node %s", node.Kind, node.Metadata.Name, s.NodeName)
	}
	return node.Metadata.Labels[s.Label], false, nil
}

var errTokenUnreadable = errors.New("service account token unreadable")

// bearerToken reads the token file on every request: Kubernetes rotates
// projected tokens in place.
type bearerToken struct {
	path string
	next http.RoundTripper
}

func (b *bearerToken) RoundTrip(req *http.Request) (*http.Response, error) {
	tok, err := os.ReadFile(b.path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errTokenUnreadable, err)
	}
	req = req.Clone(req.Context())
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	return b.next.RoundTrip(req)
}
