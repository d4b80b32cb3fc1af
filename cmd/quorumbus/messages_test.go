package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/quorumbus/quorumbus/cmd/quorumbus/cluster"
)

// TestPurgeAndRedriveCommands runs `quorumbus queue|subscription purge`
// and `redrive` against a dev cluster, with messages sent, dead-lettered
// and received back through the Go SDK.
func TestPurgeAndRedriveCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a dev cluster")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dev, err := cluster.StartDev(ctx, cluster.DevOptions{
		DataDir: t.TempDir(), AMQPAddr: "127.0.0.1:0", Nodes: 3, NodePort: freePorts(t, 3),
		Groups: 2, CacheMB: 8, LogLevel: "error",
	})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	// The CLI presents dev mode's "cli" certificate of the cluster CA.
	p := []string{"-placement=" + dev.NodeAddrs[0], "-cluster-tls-dir=" + filepath.Dir(dev.ClusterTLS["cli"].Cert)}
	must := func(cmd func([]string) error, args ...string) string {
		t.Helper()
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		stdout := os.Stdout
		os.Stdout = w
		done := make(chan string)
		go func() { b, _ := io.ReadAll(r); done <- string(b) }()
		err = cmd(append(args, p...))
		os.Stdout = stdout
		w.Close()
		out := <-done
		if err != nil {
			t.Fatalf("%v: %v (%s)", args, err, out)
		}
		return out
	}
	client, err := azservicebus.NewClientFromConnectionString(cluster.ConnectionString(dev.AMQPAddr), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close(ctx)
	waitFor := func(name string) {
		for deadline := time.Now().Add(30 * time.Second); !dev.Router.HasEntity(name); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s never reached the routing table", name)
			}
		}
	}
	// send sends bodies; deadLetter receives n from rcv and dead-letters
	// them with the reason their body's first word names.
	send := func(to string, bodies ...string) {
		t.Helper()
		s, err := client.NewSender(to, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close(ctx)
		for _, b := range bodies {
			if err := s.SendMessage(ctx, &azservicebus.Message{Body: []byte(b)}, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	settle := func(rcv *azservicebus.Receiver, n int, deadLetter bool) []string {
		t.Helper()
		defer rcv.Close(ctx)
		var got []string
		for len(got) < n {
			msgs, err := rcv.ReceiveMessages(ctx, n-len(got), nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range msgs {
				got = append(got, string(m.Body))
				if deadLetter {
					reason, _, _ := strings.Cut(string(m.Body), " ")
					err = rcv.DeadLetterMessage(ctx, m, &azservicebus.DeadLetterOptions{Reason: &reason})
				} else {
					err = rcv.CompleteMessage(ctx, m, nil)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
		}
		return got
	}
	queueReceiver := func(name string) *azservicebus.Receiver {
		r, err := client.NewReceiverForQueue(name, nil)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}

	must(queueCmd, "create", "jobs", "-partitions", "2")
	waitFor("jobs")
	send("jobs", "poison 1", "timeout 2", "timeout 3")
	settle(queueReceiver("jobs"), 3, true)
	if out := must(queueCmd, "redrive", "jobs", "-filter", "DeadLetterReason = 'timeout'", "-rate", "50"); !strings.Contains(out, "re-drove 2 ") {
		t.Fatalf("redrive: %q", out)
	}
	if got := strings.Join(slices.Sorted(slices.Values(settle(queueReceiver("jobs"), 2, false))), ","); got != "timeout 2,timeout 3" {
		t.Fatalf("received after the re-drive: %s", got)
	}
	if out := must(queueCmd, "purge", "jobs", "-dlq"); !strings.Contains(out, "purged 1 ") {
		t.Fatalf("purge -dlq: %q", out)
	}
	send("jobs", "a", "b")
	if out := must(queueCmd, "purge", "jobs"); !strings.Contains(out, "purged 2 ") {
		t.Fatalf("purge: %q", out)
	}

	must(topicCmd, "create", "events")
	must(subscriptionCmd, "create", "events", "audit")
	waitFor("events/Subscriptions/audit")
	send("events", "bad x")
	sr, err := client.NewReceiverForSubscription("events", "audit", nil)
	if err != nil {
		t.Fatal(err)
	}
	settle(sr, 1, true)
	if out := must(subscriptionCmd, "redrive", "events", "audit"); !strings.Contains(out, "re-drove 1 ") {
		t.Fatalf("subscription redrive: %q", out)
	}
	sr, err = client.NewReceiverForSubscription("events", "audit", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := settle(sr, 1, false); got[0] != "bad x" {
		t.Fatalf("received from the subscription after the re-drive: %v", got)
	}
	if out := must(subscriptionCmd, "purge", "events", "audit", "-dlq"); !strings.Contains(out, "purged 0 ") {
		t.Fatalf("subscription purge -dlq: %q", out)
	}
}
