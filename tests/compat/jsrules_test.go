package compat

import (
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/cmd/quorumbus/cluster"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// TestJSSDKRuleManager drives a subscription's rules with the JavaScript
// SDK's rule manager (tests/compat/js/rules.mjs): add-rule (SQL with an
// action, correlation), remove-rule and enumerate-rules on the
// subscription's $management node, the refusals (duplicate name, a filter
// or action that does not parse, a rule that is not there), and sends to
// the topic that follow the new rules.
func TestJSSDKRuleManager(t *testing.T) {
	t.Parallel()
	dir := jsDir(t)
	c := startTestDev(t,
		cluster.QueueSpec{Name: "jsr", Kind: placementpb.EntityKind_ENTITY_KIND_TOPIC, Props: &placementpb.QueueProperties{}},
		cluster.QueueSpec{Name: "jsr/Subscriptions/s", Kind: placementpb.EntityKind_ENTITY_KIND_SUBSCRIPTION})
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "rules.mjs", cluster.ConnectionString(c.AMQPAddr), "jsr", "s")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Fatalf("the JavaScript SDK script failed: %v", err)
	}
}
