package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/quorumbus/quorumbus/cmd/quorumbus/cluster"
)

// TestTopicSubscriptionRuleCommands runs the topic, subscription and rule
// commands against a dev cluster, as a user at a shell would.
func TestTopicSubscriptionRuleCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a dev cluster")
	}
	ctx, cancel := context.WithCancel(context.Background())
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
	cli := dev.ClusterTLS["cli"]
	p := []string{"-placement=" + dev.NodeAddrs[0], "-cluster-tls-dir=" + filepath.Dir(cli.Cert)}

	run := func(cmd func([]string) error, args ...string) (string, error) {
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
		return <-done, err
	}
	must := func(cmd func([]string) error, args ...string) string {
		t.Helper()
		out, err := run(cmd, args...)
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		return out
	}

	must(topicCmd, "create", "orders", "-partitions", "2", "-default-ttl", "1h")
	out := must(subscriptionCmd, "create", "orders", "red", "-sql", "color = 'red'", "-action", "SET sys.Label = 'red'", "-rule-name", "onlyred")
	if !strings.Contains(out, "orders/Subscriptions/red") || !strings.Contains(out, "onlyred") {
		t.Errorf("subscription create printed:\n%s", out)
	}
	must(subscriptionCmd, "create", "orders", "all", "-lock-duration", "30s")
	must(ruleCmd, "create", "orders", "all", "big", "-sql", "quantity > 100", "-action", "SET priority = 'high'")
	must(ruleCmd, "create", "orders", "all", "emea", "-correlation-id", "c1", "-property", "region=emea")
	out = must(ruleCmd, "list", "orders", "all")
	for _, want := range []string{"$Default", "true", "big", "sql: quantity > 100", "SET priority = 'high'", "emea", `CorrelationId=c1 region="emea"`} {
		if !strings.Contains(out, want) {
			t.Errorf("rule list lacks %q:\n%s", want, out)
		}
	}
	if _, err := run(ruleCmd, "create", "orders", "all", "bad", "-sql", "quantity > > 100"); err == nil || !strings.Contains(err.Error(), "position 12") {
		t.Errorf("a filter that does not parse: %v", err)
	}
	if _, err := run(ruleCmd, "create", "orders", "all", "two", "-sql", "1=1", "-true"); err == nil {
		t.Error("a rule with two filters was accepted")
	}
	must(ruleCmd, "delete", "orders", "all", "$Default")
	out = must(subscriptionCmd, "list", "orders")
	if !strings.Contains(out, "big,emea") || !strings.Contains(out, "orders/Subscriptions/red") || strings.Contains(out, "$Default") {
		t.Errorf("subscription list:\n%s", out)
	}
	if out := must(topicCmd, "list"); !strings.Contains(out, "orders") || !strings.Contains(out, "1h0m0s") {
		t.Errorf("topic list:\n%s", out)
	}
	must(topicCmd, "delete", "orders")
	if out := must(subscriptionCmd, "list", "orders"); strings.Contains(out, "orders/") {
		t.Errorf("subscriptions left after deleting the topic:\n%s", out)
	}
}

func freePorts(t *testing.T, n int) int {
	t.Helper()
	for range 100 {
		base := 20000 + rand.IntN(30000)
		var lns []net.Listener
		ok := true
		for i := range n {
			ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", base+i))
			if err != nil {
				ok = false
				break
			}
			lns = append(lns, ln)
		}
		for _, ln := range lns {
			ln.Close()
		}
		if ok {
			return base
		}
	}
	t.Fatal("no free ports")
	return 0
}
