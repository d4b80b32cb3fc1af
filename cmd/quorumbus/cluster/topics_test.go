package cluster

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	goamqp "github.com/Azure/go-amqp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// TestDevDeclaresTopicsFromConfig starts a dev cluster with the topics,
// subscriptions and rules of an emulator Config.json: they are created in
// the catalog with their rules (a subscription without rules gets
// $Default), the cluster becomes ready, a sender attaches to the topic and
// not to a subscription, and a Config.json whose filter does not parse fails with the position.
func TestDevDeclaresTopicsFromConfig(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a dev cluster")
	}
	path := filepath.Join(t.TempDir(), "Config.json")
	os.WriteFile(path, []byte(emulatorTopics), 0o644)
	specs, err := LoadEmulatorConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	opts := DevOptions{
		DataDir: t.TempDir(), AMQPAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0",
		Nodes: 3, NodePort: freeNodePort(t, 3), Groups: 2, CacheMB: 8, LogLevel: "error",
		Declare: specs,
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dev, err := StartDev(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	if err := CreateQueues(ctx, dev.NodeAddrs, dev.Creds, specs, testLogger()); err != nil {
		t.Fatal(err)
	}
	dev.Declared.Created()
	waitReady(t, dev)

	client, closeFn, err := DialPlacement(dev.NodeAddrs[0], dev.Creds)
	if err != nil {
		t.Fatal(err)
	}
	defer closeFn()
	sub, err := client.GetEntity(ctx, &placementpb.GetEntityRequest{Name: "topic.1/Subscriptions/subscription.1"})
	if err != nil {
		t.Fatal(err)
	}
	if sub.Kind != placementpb.EntityKind_ENTITY_KIND_SUBSCRIPTION || len(sub.Rules) != 2 ||
		sub.Rules[0].Name != "app-prop-filter-1" || sub.Rules[1].Action.GetExpression() != "SET sys.To = 'Entity'" {
		t.Fatalf("subscription.1: %v", sub)
	}
	sub2, err := client.GetEntity(ctx, &placementpb.GetEntityRequest{Name: "topic.1/Subscriptions/subscription.2"})
	if err != nil || len(sub2.Rules) != 1 || sub2.Rules[0].Name != "$Default" {
		t.Fatalf("subscription.2: %v, %v", sub2, err)
	}

	// A sender attaches to the topic; a subscription takes no senders.
	if err := attach(ctx, dev.AMQPAddr, "topic.1"); err != nil {
		t.Errorf("sender on topic.1: %v", err)
	}
	err = attach(ctx, dev.AMQPAddr, "topic.1/Subscriptions/subscription.1")
	var ae *goamqp.Error
	if !errors.As(err, &ae) || ae.Condition != goamqp.ErrCondNotAllowed {
		t.Errorf("sender on a subscription: %v, want amqp:not-allowed", err)
	}

	bad := []QueueSpec{{Name: "topic.1/Subscriptions/bad", Kind: placementpb.EntityKind_ENTITY_KIND_SUBSCRIPTION,
		Rules: []*placementpb.Rule{{Name: "r", Filter: &placementpb.Rule_SqlFilter{SqlFilter: &placementpb.SqlFilter{Expression: "a = 1 AND"}}}}}}
	err = CreateQueues(ctx, dev.NodeAddrs, dev.Creds, bad, testLogger())
	if status.Code(errors.Unwrap(err)) != codes.InvalidArgument || !strings.Contains(err.Error(), "position 10") {
		t.Fatalf("a filter that does not parse: %v", err)
	}
}
