package main

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quorumbus/quorumbus/cmd/quorumbus/cluster"
	"github.com/quorumbus/quorumbus/frontend/certs"
	"github.com/quorumbus/quorumbus/placement/sas"
	"github.com/quorumbus/quorumbus/proto/placementpb"
	"github.com/quorumbus/quorumbus/proto/raftpb"
	"github.com/quorumbus/quorumbus/proto/rpcnet"
)

// TestClusterMutualTLS runs three `quorumbus node` and a `quorumbus
// frontend` as separate processes with the cluster plane's mutual TLS and
// an encrypted gossip, and checks what an outsider gets:
//
//   - the Go SDK sends and receives through the front-end (Raft,
//     PartitionService, PlacementService all over mutual TLS; the queue's
//     three replicas prove the nodes found each other by encrypted gossip);
//   - a gRPC client without a certificate, or with one of another CA, is
//     refused by a node; the CLI's certificate is admitted; the front-end's
//     and the CLI's cannot call a node's Raft transport (roles);
//   - a fourth node with the cluster's certificate but another gossip key
//     is never heard of (not registered as a storage node);
//   - the admin listener serves HTTPS only;
//   - a node follows a rotation of its files without a restart: once its
//     CA file bundles another CA too, that CA's client gets in; once its
//     certificate and key are replaced, it serves the new certificate.
func TestClusterMutualTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	bin := buildBinary(t)
	dir := t.TempDir()
	// n1-next is the certificate n1's files are rotated to.
	members := []certs.DevMember{{Name: "frontend", Role: certs.RoleFrontend}, {Name: "cli", Role: certs.RoleCLI}}
	for _, id := range []string{"n1", "n2", "n3", "n4", "n1-next"} {
		members = append(members, certs.DevMember{Name: id, Role: certs.RoleNode})
	}
	files, err := certs.GenerateDevCluster(filepath.Join(dir, "tls"), members...)
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := certs.GenerateDevCluster(filepath.Join(dir, "foreign"), certs.DevMember{Name: "cli", Role: certs.RoleCLI})
	if err != nil {
		t.Fatal(err)
	}
	// n1 reads a CA file of its own, which the test rotates.
	n1CA := filepath.Join(dir, "n1-ca.crt")
	copyInto(t, n1CA, files["n1"].CA)
	gossipKey, wrongKey := filepath.Join(dir, "gossip.key"), filepath.Join(dir, "wrong.key")
	writeGossipKey(t, gossipKey)
	writeGossipKey(t, wrongKey)

	grpcAddrs, gossipAddrs := freeAddrs(t, 4), freeAddrs(t, 4)
	httpAddr := freeAddrs(t, 1)[0]
	var boot []string
	for i := range 3 {
		boot = append(boot, fmt.Sprintf("n%d=%s", i+1, grpcAddrs[i]))
	}
	tlsArgs := func(name, ca string) []string {
		return []string{"-cluster-tls-cert", files[name].Cert, "-cluster-tls-key", files[name].Key, "-cluster-ca", ca}
	}
	for i := range 4 {
		id := "n" + strconv.Itoa(i+1)
		args := []string{"node", "-id", id, "-data", filepath.Join(dir, id), "-grpc-addr", grpcAddrs[i],
			"-gossip-addr", gossipAddrs[i], "-join", strings.Join(gossipAddrs[:3], ","),
			"-bootstrap", strings.Join(boot, ","), "-log-level", "error", "-gossip-key-file", gossipKey}
		ca := files[id].CA
		switch id {
		case "n1":
			ca = n1CA
			args = append(args, "-http-addr", httpAddr)
		case "n4":
			args[len(args)-1] = wrongKey
		}
		startProcess(t, bin, append(args, tlsArgs(id, ca)...)...)
	}
	rules := filepath.Join(dir, "rules.json")
	if err := cluster.WriteRulesConfig(rules, sas.DevRule()); err != nil {
		t.Fatal(err)
	}
	amqpAddr := freeAddrs(t, 1)[0]
	startProcess(t, bin, append([]string{"frontend", "-amqp-addr", amqpAddr, "-http-addr", "", "-placement", strings.Join(grpcAddrs[:3], ","),
		"-sas-rules", rules, "-throttle-credits", "0", "-log-level", "error"}, tlsArgs("frontend", files["frontend"].CA)...)...)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	cli := loadCreds(t, files["cli"].Cert, files["cli"].Key, files["cli"].CA)
	if err := cluster.CreateQueues(ctx, grpcAddrs[:3], cli, []cluster.QueueSpec{{Name: "secure"}}, quiet); err != nil {
		t.Fatal(err)
	}

	// The SDK, end to end.
	client, err := azservicebus.NewClientFromConnectionString(cluster.ConnectionString(amqpAddr), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close(context.Background())
	snd, err := client.NewSender("secure", nil)
	if err != nil {
		t.Fatal(err)
	}
	const n = 20
	for i := 0; i < n; {
		err := snd.SendMessage(ctx, &azservicebus.Message{Body: []byte(strconv.Itoa(i))}, nil)
		if err == nil {
			i++
			continue
		}
		if ctx.Err() != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond) // the front-end learns of the queue
	}
	rcv, err := client.NewReceiverForQueue("secure", nil)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for len(seen) < n {
		msgs, err := rcv.ReceiveMessages(ctx, n, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			seen[string(m.Body)] = true
			if err := rcv.CompleteMessage(ctx, m, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	e, err := placementCall(ctx, grpcAddrs[0], cli)
	if err != nil {
		t.Fatalf("the CLI's certificate: %v", err)
	}
	if len(e.Entities) != 1 {
		t.Fatalf("entities %v", e.Entities)
	}

	// Outsiders.
	if _, err := placementCall(ctx, grpcAddrs[0], nil); err == nil {
		t.Fatal("a plain-text client listed the entities")
	}
	noCert := rpcnet.NewCreds(nil, &tls.Config{InsecureSkipVerify: true})
	if _, err := placementCall(ctx, grpcAddrs[0], noCert); err == nil {
		t.Fatal("a TLS client without a certificate listed the entities")
	}
	foreignCLI := loadCreds(t, foreign["cli"].Cert, foreign["cli"].Key, files["cli"].CA)
	if _, err := placementCall(ctx, grpcAddrs[0], foreignCLI); err == nil {
		t.Fatal("a client with a certificate of another CA listed the entities")
	}

	// The front-end's certificate is the cluster's, but its role does not
	// reach Raft: the forged TimeoutNow of issue 22 is refused before
	// raftmux sees it. The CLI's certificate cannot either.
	for _, name := range []string{"frontend", "cli"} {
		cc, err := rpcnet.Dial(grpcAddrs[1], loadCreds(t, files[name].Cert, files[name].Key, files[name].CA))
		if err != nil {
			t.Fatal(err)
		}
		cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
		_, err = raftpb.NewRaftClient(cc).TimeoutNow(cctx, &raftpb.TimeoutNowRequest{GroupId: 1})
		ccancel()
		cc.Close()
		if status.Code(err) != codes.PermissionDenied {
			t.Fatalf("the %s certificate's TimeoutNow: %v, want PermissionDenied", name, err)
		}
	}

	// n4 holds a certificate of the cluster but another gossip key.
	nodes := registeredNodes(t, ctx, grpcAddrs[0], cli)
	if !slices.Equal(nodes, []string{"n1", "n2", "n3"}) {
		t.Fatalf("storage nodes %v, want n1, n2, n3 (n4 gossips with another key)", nodes)
	}

	// The admin listener: HTTPS only.
	pool := x509.NewCertPool()
	caPEM, _ := os.ReadFile(files["cli"].CA)
	pool.AppendCertsFromPEM(caPEM)
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	if resp, err := hc.Get("http://" + httpAddr + "/healthz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Fatal("the admin listener answered plain HTTP")
		}
	}
	resp, err := hc.Get("https://" + httpAddr + "/healthz")
	if err != nil {
		t.Fatalf("HTTPS on the admin listener: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/healthz over HTTPS: %s", resp.Status)
	}

	// Rotation without a restart: n1's CA file gets the foreign CA too.
	copyInto(t, n1CA, files["n1"].CA, foreign["cli"].CA)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err = placementCall(ctx, grpcAddrs[0], foreignCLI); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("n1 did not follow its CA file's rotation: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if _, err := placementCall(ctx, grpcAddrs[1], foreignCLI); err == nil {
		t.Fatal("n2, whose CA file did not change, admitted the foreign CA")
	}

	// n1's own certificate rotated (the key first, as cert-manager's
	// atomic Secret update shows both at once; a half-written pair keeps
	// the old one): its next handshakes present the new certificate.
	nextPEM, _ := os.ReadFile(files["n1-next"].Cert)
	next, err := parseCertPEM(nextPEM)
	if err != nil {
		t.Fatal(err)
	}
	copyInto(t, files["n1"].Key, files["n1-next"].Key)
	copyInto(t, files["n1"].Cert, files["n1-next"].Cert)
	deadline = time.Now().Add(30 * time.Second)
	for {
		served, err := servedSerial(ctx, grpcAddrs[0], files["cli"])
		if err == nil && served == next.SerialNumber.String() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("n1 still serves serial %s (%v), want the rotated %s", served, err, next.SerialNumber)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func parseCertPEM(data []byte) (*x509.Certificate, error) {
	b, _ := pem.Decode(data)
	if b == nil {
		return nil, errors.New("no PEM block")
	}
	return x509.ParseCertificate(b.Bytes)
}

// servedSerial connects to a node as the CLI would and returns the serial
// number of the certificate the node presented.
func servedSerial(ctx context.Context, addr string, cli certs.DevFiles) (string, error) {
	cl, err := certs.NewCluster(cli.Cert, cli.Key, cli.CA, nil)
	if err != nil {
		return "", err
	}
	var serial atomic.Value
	cfg := cl.ClientConfig()
	verify := cfg.VerifyConnection
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		serial.Store(cs.PeerCertificates[0].SerialNumber.String())
		return verify(cs)
	}
	if _, err := placementCall(ctx, addr, rpcnet.NewCreds(nil, cfg)); err != nil {
		return "", err
	}
	s, _ := serial.Load().(string)
	return s, nil
}

// TestProcessesNeedClusterTLS: node, frontend and gateway refuse to start
// without the cluster's certificate flags unless -plain-cluster asks for
// plain text, and refuse both at once.
func TestProcessesNeedClusterTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildBinary(t)
	dir := t.TempDir()
	for _, args := range [][]string{
		{"node", "-id", "n1", "-data", filepath.Join(dir, "n1"), "-grpc-addr", "127.0.0.1:0", "-gossip-addr", "127.0.0.1:0"},
		{"frontend", "-amqp-addr", "127.0.0.1:0", "-http-addr", ""},
		{"gateway", "-http-addr", "127.0.0.1:0"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
		cancel()
		if err == nil || !strings.Contains(string(out), "-plain-cluster") {
			t.Errorf("%s without cluster TLS: %v\n%s\nwant a refusal that names -plain-cluster", args[0], err, out)
		}
		ctx, cancel = context.WithTimeout(context.Background(), 30*time.Second)
		out, err = exec.CommandContext(ctx, bin, append(args, "-plain-cluster", "-cluster-ca", "ca.crt")...).CombinedOutput()
		cancel()
		if err == nil || !strings.Contains(string(out), "exclude each other") {
			t.Errorf("%s with -plain-cluster and -cluster-ca: %v\n%s", args[0], err, out)
		}
	}
}

func loadCreds(t *testing.T, cert, key, ca string) *rpcnet.Creds {
	t.Helper()
	cl, err := certs.NewCluster(cert, key, ca, nil)
	if err != nil {
		t.Fatal(err)
	}
	return rpcnet.NewCreds(cl.ServerConfig(), cl.ClientConfig())
}

// placementCall lists the entities through one node, as the CLI does.
func placementCall(ctx context.Context, addr string, creds *rpcnet.Creds) (*placementpb.ListEntitiesResponse, error) {
	client, closeFn, err := cluster.DialPlacement(addr, creds)
	if err != nil {
		return nil, err
	}
	defer closeFn()
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return client.ListEntities(cctx, &placementpb.ListEntitiesRequest{})
}

// registeredNodes are the storage nodes of the routing table, after the
// meta leader had several rounds to register what gossip told it.
func registeredNodes(t *testing.T, ctx context.Context, addr string, creds *rpcnet.Creds) []string {
	t.Helper()
	time.Sleep(5 * time.Second) // n4's attempts to join; it must stay unheard
	client, closeFn, err := cluster.DialPlacement(addr, creds)
	if err != nil {
		t.Fatal(err)
	}
	defer closeFn()
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	stream, err := client.WatchRoutes(cctx, &placementpb.WatchRoutesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	table, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, nd := range table.Nodes {
		ids = append(ids, nd.Id)
	}
	slices.Sort(ids)
	return ids
}

// copyInto writes the concatenation of files to path through a rename, as
// a rotation of a mounted secret does.
func copyInto(t *testing.T, path string, files ...string) {
	t.Helper()
	var data []byte
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		data = append(data, b...)
	}
	if err := os.WriteFile(path+".tmp", data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
}

func writeGossipKey(t *testing.T, path string) {
	t.Helper()
	k := make([]byte, 32)
	rand.Read(k)
	if err := os.WriteFile(path, []byte(base64.StdEncoding.EncodeToString(k)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
}
