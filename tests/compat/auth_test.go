package compat

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quorumbus/quorumbus/cmd/quorumbus/cluster"
	"github.com/quorumbus/quorumbus/placement/sas"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// putRules creates rules in the dev cluster's catalog, as `quorumbus
// auth-rule create` does, and waits for the front-end to serve them.
func putRules(t *testing.T, c *cluster.Dev, rules ...sas.Rule) {
	t.Helper()
	client, closeFn, err := cluster.DialPlacement(c.NodeAddrs[0], c.Creds)
	if err != nil {
		t.Fatal(err)
	}
	defer closeFn()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, r := range rules {
		req := &placementpb.PutAuthorizationRuleRequest{Rule: &placementpb.AuthorizationRule{
			Name: r.Name, Entity: r.Entity, Rights: uint32(r.Rights), PrimaryKey: r.PrimaryKey, SecondaryKey: r.SecondaryKey,
		}}
		// UNAVAILABLE ("no meta leader known") is the answer while the
		// meta group elects, which a loaded machine can make it do right
		// after start: retried, as the CLI does. A put is idempotent.
		for {
			_, err := client.PutAuthorizationRule(ctx, req)
			if err == nil {
				break
			}
			if status.Code(err) != codes.Unavailable || ctx.Err() != nil {
				t.Fatalf("put rule %s: %v", r.Name, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	for c.Router.Ruleset().Len() < len(rules)+1 { // and the dev rule
		if ctx.Err() != nil {
			t.Fatal("the rules never reached the front-end")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func ruleClient(t *testing.T, c *cluster.Dev, name, key string) *azservicebus.Client {
	t.Helper()
	client, err := azservicebus.NewClientFromConnectionString(cluster.RuleConnectionString(c.AMQPAddr, name, key), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(context.Background()) })
	return client
}

func unauthorized(err error) bool {
	var sbErr *azservicebus.Error
	return errors.As(err, &sbErr) && sbErr.Code == azservicebus.CodeUnauthorizedAccess
}

func send(ctx context.Context, c *azservicebus.Client, queue, body string) error {
	s, err := c.NewSender(queue, nil)
	if err != nil {
		return err
	}
	defer s.Close(ctx)
	return s.SendMessage(ctx, &azservicebus.Message{Body: []byte(body)}, nil)
}

// drain receives and deletes what a queue holds, with the dev rule.
func drain(t *testing.T, ctx context.Context, c *cluster.Dev, queue string) []string {
	t.Helper()
	r, err := devClient(t, c).NewReceiverForQueue(queue, &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	var bodies []string
	for {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		msgs, err := r.ReceiveMessages(rctx, 10, nil)
		cancel()
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatal(err)
		}
		if len(msgs) == 0 {
			return bodies
		}
		for _, m := range msgs {
			bodies = append(bodies, string(m.Body))
		}
	}
}

// TestDevCatalogRules: rules created in the replicated catalog serve the
// Go SDK through the dev cluster's front-end: the dev rule refuses other
// keys, a Send rule on one queue sends there only, a Listen rule receives
// but does not send, and a deleted rule lets nobody in.
func TestDevCatalogRules(t *testing.T) {
	t.Parallel()
	c := startTestDev(t, cluster.QueueSpec{Name: "guarded", Props: &placementpb.QueueProperties{}}, cluster.QueueSpec{Name: "other", Props: &placementpb.QueueProperties{}})
	putRules(t, c,
		sas.Rule{Name: "reader", Rights: sas.Listen, PrimaryKey: "reader-key"},
		sas.Rule{Name: "writer", Entity: "guarded", Rights: sas.Send, PrimaryKey: "writer-key", SecondaryKey: "writer-key-2"},
	)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	if err := send(ctx, ruleClient(t, c, sas.DevKeyName, "not-the-key"), "guarded", "wrong"); !unauthorized(err) {
		t.Fatalf("the dev rule with another key: %v, want unauthorized", err)
	}
	writer := ruleClient(t, c, "writer", "writer-key-2")
	if err := send(ctx, writer, "guarded", "from-writer"); err != nil {
		t.Fatalf("the writer on its queue: %v", err)
	}
	if err := send(ctx, writer, "other", "misplaced"); !unauthorized(err) {
		t.Fatalf("the writer on another queue: %v, want unauthorized", err)
	}
	reader := ruleClient(t, c, "reader", "reader-key")
	if err := send(ctx, reader, "guarded", "from-reader"); !unauthorized(err) {
		t.Fatalf("the reader sending: %v, want unauthorized", err)
	}
	r, err := reader.NewReceiverForQueue("guarded", nil)
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := r.ReceiveMessages(ctx, 1, nil)
	if err != nil || len(msgs) != 1 || string(msgs[0].Body) != "from-writer" {
		t.Fatalf("the reader receiving: %v, %v", msgs, err)
	}
	if err := r.AbandonMessage(ctx, msgs[0], nil); err != nil {
		t.Fatal(err)
	}
	r.Close(ctx)

	client, closeFn, err := cluster.DialPlacement(c.NodeAddrs[0], c.Creds)
	if err != nil {
		t.Fatal(err)
	}
	defer closeFn()
	if _, err := client.DeleteAuthorizationRule(ctx, &placementpb.DeleteAuthorizationRuleRequest{Name: "writer", Entity: "guarded"}); err != nil {
		t.Fatal(err)
	}
	for c.Router.Ruleset().Len() != 2 {
		if ctx.Err() != nil {
			t.Fatal("the deleted rule still serves")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := send(ctx, ruleClient(t, c, "writer", "writer-key"), "guarded", "after-delete"); !unauthorized(err) {
		t.Fatalf("a deleted rule's key: %v, want unauthorized", err)
	}
	if got := drain(t, ctx, c, "guarded"); len(got) != 1 || got[0] != "from-writer" {
		t.Fatalf("guarded holds %q, want only the writer's message", got)
	}
	if got := drain(t, ctx, c, "other"); len(got) != 0 {
		t.Fatalf("other holds %q", got)
	}
}

// requireJS returns tests/compat/js, or skips (fails in CI) as
// TestJSSDKEssentials does when node or the npm modules are missing.
func requireJS(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("js")
	if err != nil {
		t.Fatal(err)
	}
	missing := ""
	if _, err := exec.LookPath("node"); err != nil {
		missing = "node is not installed"
	} else if _, err := os.Stat(filepath.Join(dir, "node_modules", "@azure", "service-bus")); err != nil {
		missing = "the npm modules are not installed (cd tests/compat/js && npm ci)"
	}
	if missing != "" {
		msg := "SKIP: the JavaScript SDK tests did not run: " + missing
		if os.Getenv("CI") != "" {
			t.Fatal(msg + "; CI must install them (.ci/run)")
		}
		fmt.Fprintln(os.Stderr, msg)
		t.Skip(msg)
	}
	return dir
}

// TestJSSDKAuthorization: the JavaScript SDK (its own token format:
// sb:// audiences, upper-case escapes) against catalog rules: a wrong key
// and a Listen rule cannot send, a Send rule cannot peek or receive, a
// Send rule of one queue and a SAS token (SharedAccessSignature= in the
// connection string) signed for it are refused on another queue, and
// only the allowed sends reach the queue; the other queue stays empty.
func TestJSSDKAuthorization(t *testing.T) {
	t.Parallel()
	dir := requireJS(t)
	c := startTestDev(t, cluster.QueueSpec{Name: "jsauth", Props: &placementpb.QueueProperties{}},
		cluster.QueueSpec{Name: "jsauth-other", Props: &placementpb.QueueProperties{}})
	putRules(t, c,
		sas.Rule{Name: "js-listen", Rights: sas.Listen, PrimaryKey: "js+listen/key="},
		sas.Rule{Name: "js-send", Entity: "jsauth", Rights: sas.Send, PrimaryKey: "js-send-key"},
	)
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "auth.mjs", c.AMQPAddr, "jsauth",
		"js-listen:js+listen/key=", "js-send:js-send-key", sas.DevKeyName+":"+sas.DevKey, "jsauth-other")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Fatalf("the JavaScript SDK script failed: %v", err)
	}
	// The JS SDK sends a string body as JSON in a data section.
	got := drain(t, ctx, c, "jsauth")
	for i := range got {
		got[i] = strings.Trim(got[i], `"`)
	}
	slices.Sort(got)
	if want := []string{"from-sender", "from-token"}; !slices.Equal(got, want) {
		t.Fatalf("the queue holds %q, want only %q (the root's was completed)", got, want)
	}
	if got := drain(t, ctx, c, "jsauth-other"); len(got) != 0 {
		t.Fatalf("the other queue holds %q, want nothing", got)
	}
}

// TestJSSDKTokenExpiry: a JavaScript SDK receiver with a SAS token in its
// connection string (which it cannot renew) receives until the token
// expires, about 3 s, then ends with UnauthorizedAccess (expiry.mjs).
func TestJSSDKTokenExpiry(t *testing.T) {
	t.Parallel()
	dir := requireJS(t)
	c := startTestDev(t, cluster.QueueSpec{Name: "jsexpiry", Props: &placementpb.QueueProperties{}})
	putRules(t, c, sas.Rule{Name: "js-listen", Entity: "jsexpiry", Rights: sas.Listen, PrimaryKey: "js-listen-key"})
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "expiry.mjs", c.AMQPAddr, "jsexpiry", "js-listen:js-listen-key", sas.DevKeyName+":"+sas.DevKey)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Fatalf("the JavaScript SDK script failed: %v", err)
	}
}

// TestJSSDKThrottledBurst: a dev cluster at 10 credits a second; 20
// concurrent sends of the JavaScript SDK with its default retry policy
// (throttle.mjs) all succeed, the throttled ones after the SDK retried
// server-busy, each message lands exactly once, and the throttled
// counter moved.
func TestJSSDKThrottledBurst(t *testing.T) {
	t.Parallel()
	dir := requireJS(t)
	c := startTestDevWith(t, func(o *cluster.DevOptions) { o.ThrottleCredits = 10 },
		cluster.QueueSpec{Name: "jsthrottle", Props: &placementpb.QueueProperties{}})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const sends = 20
	cmd := exec.CommandContext(ctx, "node", "throttle.mjs", c.AMQPAddr, "jsthrottle", sas.DevKeyName+":"+sas.DevKey, fmt.Sprint(sends))
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Fatalf("the JavaScript SDK script failed: %v", err)
	}
	if got := c.Frontend.Throttled()["jsthrottle"]; got == 0 {
		t.Fatal("the throttled counter did not move")
	}
	seen := map[string]int{}
	for _, body := range drain(t, ctx, c, "jsthrottle") {
		seen[strings.Trim(body, `"`)]++
	}
	for i := range sends {
		if n := seen[fmt.Sprint("m", i)]; n != 1 {
			t.Errorf("m%d arrived %d times, want once", i, n)
		}
	}
	if len(seen) != sends {
		t.Errorf("the queue held %d distinct messages, want %d: %v", len(seen), sends, seen)
	}
}
