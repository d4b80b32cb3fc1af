package compat

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/quorumbus/quorumbus/cmd/quorumbus/cluster"
	"github.com/quorumbus/quorumbus/placement/sas"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// startTLSDev starts a dev cluster with its AMQPS listener and the CA it
// generates, and creates the queues.
func startTLSDev(t *testing.T, queues ...cluster.QueueSpec) *cluster.Dev {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	c, err := cluster.StartDev(ctx, cluster.DevOptions{
		DataDir: t.TempDir(), AMQPAddr: "127.0.0.1:0", AMQPSAddr: "127.0.0.1:0",
		Nodes: 3, Groups: 3, CacheMB: 16, LogLevel: "error",
	})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		cancel()
	})
	if c.CAFile == "" {
		t.Fatal("dev mode generated no CA")
	}
	if err := cluster.CreateQueues(ctx, c.NodeAddrs, c.Creds, queues, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, q := range queues {
		for {
			if _, err := c.Router.Entity(q.Name); err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("queue %s never reached the front-end's routing table", q.Name)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return c
}

// tlsEndpoint names the AMQPS listener as localhost, which the dev
// certificate covers.
func tlsEndpoint(t *testing.T, c *cluster.Dev) string {
	_, port, err := net.SplitHostPort(c.AMQPSAddr)
	if err != nil {
		t.Fatal(err)
	}
	return "localhost:" + port
}

// TestDevAMQPSGoSDK: the Go SDK without UseDevelopmentEmulator dials
// amqps:// and works with the generated CA trusted; without it the
// handshake is refused; a peer that sends garbage instead of a TLS
// handshake is cut off while others go on.
func TestDevAMQPSGoSDK(t *testing.T) {
	t.Parallel()
	c := startTLSDev(t, cluster.QueueSpec{Name: "secure", Props: &placementpb.QueueProperties{}})
	pem, err := os.ReadFile(c.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		t.Fatal("no CA certificate in " + c.CAFile)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cs := cluster.TLSConnectionString(tlsEndpoint(t, c), sas.DevKeyName, sas.DevKey)

	// Garbage on the TLS port first: the broker must keep serving.
	if nc, err := net.Dial("tcp", c.AMQPSAddr); err == nil {
		nc.Write([]byte("AMQP\x03\x01\x00\x00 this is not TLS"))
		nc.SetReadDeadline(time.Now().Add(5 * time.Second))
		io.Copy(io.Discard, nc)
		nc.Close()
	}

	// go-amqp takes the TLS server name from the endpoint's host with its
	// port ("localhost:41234") when the endpoint has one: a client of a
	// listener on another port than 5671 names the host itself.
	trusting := &tls.Config{RootCAs: pool, ServerName: "localhost"}
	client, err := azservicebus.NewClientFromConnectionString(cs, &azservicebus.ClientOptions{TLSConfig: trusting})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close(ctx)
	if err := send(ctx, client, "secure", "over-tls"); err != nil {
		t.Fatalf("send over AMQPS: %v", err)
	}
	r, err := client.NewReceiverForQueue("secure", nil)
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := r.ReceiveMessages(ctx, 1, nil)
	if err != nil || len(msgs) != 1 || string(msgs[0].Body) != "over-tls" {
		t.Fatalf("receive over AMQPS: %v, %v", msgs, err)
	}
	if err := r.CompleteMessage(ctx, msgs[0], nil); err != nil {
		t.Fatal(err)
	}
	// A wrong key is as unauthorized over TLS as in the clear.
	wrong, err := azservicebus.NewClientFromConnectionString(cluster.TLSConnectionString(tlsEndpoint(t, c), sas.DevKeyName, "nope"),
		&azservicebus.ClientOptions{TLSConfig: trusting})
	if err != nil {
		t.Fatal(err)
	}
	defer wrong.Close(ctx)
	if err := send(ctx, wrong, "secure", "wrong"); !unauthorized(err) {
		t.Fatalf("wrong key over AMQPS: %v, want unauthorized", err)
	}
	// A client that does not trust the CA gets no connection.
	untrusting, err := azservicebus.NewClientFromConnectionString(cs, &azservicebus.ClientOptions{
		TLSConfig:    &tls.Config{RootCAs: x509.NewCertPool(), ServerName: "localhost"},
		RetryOptions: azservicebus.RetryOptions{MaxRetries: -1},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer untrusting.Close(ctx)
	if err := send(ctx, untrusting, "secure", "untrusted"); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("a client that does not trust the CA: %v, want a certificate error", err)
	}
	if got := drain(t, ctx, c, "secure"); len(got) != 0 {
		t.Fatalf("the queue holds %q", got)
	}
}

// TestJSSDKOverAMQPS: the JavaScript SDK's essentials over TLS
// (amqps://, port from the connection string), trusting the generated CA
// through NODE_EXTRA_CA_CERTS.
func TestJSSDKOverAMQPS(t *testing.T) {
	t.Parallel()
	dir := requireJS(t)
	c := startTLSDev(t, cluster.QueueSpec{Name: "jstls", Props: &placementpb.QueueProperties{}})
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "essentials.mjs", cluster.TLSConnectionString(tlsEndpoint(t, c), sas.DevKeyName, sas.DevKey), "jstls")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "NODE_EXTRA_CA_CERTS="+c.CAFile)
	out, err := cmd.CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Fatalf("the JavaScript SDK over AMQPS failed: %v", err)
	}
}
