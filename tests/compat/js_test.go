package compat

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/cmd/quorumbus/cluster"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// TestJSSDKEssentials drives the dev cluster with the official JavaScript
// SDK (@azure/service-bus, tests/compat/js). Without node or the npm
// modules it skips loudly on a developer's machine and fails in CI, whose
// .ci/run installs them.
func TestJSSDKEssentials(t *testing.T) {
	t.Parallel()
	dir := jsDir(t)
	c := startTestDev(t, cluster.QueueSpec{Name: "js", Props: &placementpb.QueueProperties{}})
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "essentials.mjs", cluster.ConnectionString(c.AMQPAddr), "js")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Fatalf("the JavaScript SDK script failed: %v", err)
	}
}

// TestJSSDKSessions drives message sessions with the JavaScript SDK
// (tests/compat/js/sessions.mjs).
func TestJSSDKSessions(t *testing.T) {
	t.Parallel()
	dir := jsDir(t)
	c := startTestDev(t, sessionQueue("jss"))
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "sessions.mjs", cluster.ConnectionString(c.AMQPAddr), "jss")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Fatalf("the JavaScript SDK script failed: %v", err)
	}
}

// jsDir returns the directory of the JavaScript SDK scripts. Without node
// or the npm modules it skips loudly on a developer's machine and fails
// in CI, whose .ci/run installs them.
func jsDir(t *testing.T) string {
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

// TestJSSDKTopics drives a topic and its subscriptions with the
// JavaScript SDK (tests/compat/js/topics.mjs): fan-out by a SQL filter,
// settlement and the dead-letter queue of a subscription, peek.
func TestJSSDKTopics(t *testing.T) {
	t.Parallel()
	dir := jsDir(t)
	c := startTestDev(t,
		cluster.QueueSpec{Name: "jst", Kind: placementpb.EntityKind_ENTITY_KIND_TOPIC, Props: &placementpb.QueueProperties{}},
		cluster.QueueSpec{Name: "jst/Subscriptions/all", Kind: placementpb.EntityKind_ENTITY_KIND_SUBSCRIPTION},
		cluster.QueueSpec{Name: "jst/Subscriptions/red", Kind: placementpb.EntityKind_ENTITY_KIND_SUBSCRIPTION, Rules: []*placementpb.Rule{
			{Name: "red", Filter: &placementpb.Rule_SqlFilter{SqlFilter: &placementpb.SqlFilter{Expression: "color = 'red'"}}},
		}})
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "topics.mjs", cluster.ConnectionString(c.AMQPAddr), "jst")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Fatalf("the JavaScript SDK script failed: %v", err)
	}
}
