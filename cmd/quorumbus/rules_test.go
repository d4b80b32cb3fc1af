package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/frontend/routing"
	"github.com/quorumbus/quorumbus/placement/sas"
)

// TestFrontendRequiresARule: a front-end starts with a rule from its file
// at once, and refuses to start when neither the file nor the catalog
// (here unreachable) gives one.
func TestFrontendRequiresARule(t *testing.T) {
	ctx := context.Background()
	with, err := routing.New(routing.Config{Placement: []string{"127.0.0.1:1"}, Rules: []sas.Rule{sas.DevRule()}})
	if err != nil {
		t.Fatal(err)
	}
	if err := requireRules(ctx, with, "rules.json", time.Hour); err != nil {
		t.Fatalf("with a configured rule: %v", err)
	}
	without, err := routing.New(routing.Config{Placement: []string{"127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	err = requireRules(ctx, without, "", 50*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "no authorization rule") {
		t.Fatalf("without any rule: %v", err)
	}
}
