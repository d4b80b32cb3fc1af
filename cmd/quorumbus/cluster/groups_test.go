package cluster

import (
	"context"
	"slices"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"

	"github.com/quorumbus/quorumbus/placement/sas"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// TestDevPartitionedQueueGetsGroups: a dev cluster of three nodes with
// the default -groups and -max-replicas-per-node gives a queue of 16
// partitions 8 groups, no more (3 nodes x 8 replicas / 3 replicas a
// group), each on every node; every new group opens and elects a leader
// (the cluster is ready again), and messages sent to every partition come
// back.
func TestDevPartitionedQueueGetsGroups(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a dev cluster")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dev, err := StartDev(ctx, DevOptions{
		DataDir: t.TempDir(), AMQPAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0",
		Nodes: 3, NodePort: freeNodePort(t, 3), Groups: 3, MaxReplicasPerNode: DefaultMaxReplicasPerNode,
		CacheMB: 8, LogLevel: "error",
	})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	waitReady(t, dev)
	const queue, partitions = "wide", 16
	spec := QueueSpec{Name: queue, Props: &placementpb.QueueProperties{PartitionCount: partitions}}
	start := time.Now()
	if err := CreateQueues(ctx, dev.NodeAddrs, dev.Creds, []QueueSpec{spec}, testLogger()); err != nil {
		t.Fatal(err)
	}
	created := time.Since(start)
	waitReady(t, dev)
	t.Logf("created in %v, ready %v after the request", created.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))

	table := dev.Storage[0].Placement.Table()
	if len(table.Groups) != DefaultMaxReplicasPerNode {
		t.Fatalf("%d groups, want %d", len(table.Groups), DefaultMaxReplicasPerNode)
	}
	held := map[string]int{}
	for _, g := range table.Groups {
		for _, r := range g.Replicas {
			held[r.NodeId]++
		}
	}
	for id, n := range held {
		if n > DefaultMaxReplicasPerNode {
			t.Errorf("node %s holds %d replicas, over the cap", id, n)
		}
	}
	var e *placementpb.Entity
	for _, x := range table.Entities {
		if x.Name == queue {
			e = x
		}
	}
	if e == nil {
		t.Fatalf("%s missing from the routing table", queue)
	}
	if n := len(slices.Compact(slices.Sorted(slices.Values(e.PartitionGroups)))); n != DefaultMaxReplicasPerNode {
		t.Fatalf("16 partitions on %d groups %v, want %d", n, e.PartitionGroups, DefaultMaxReplicasPerNode)
	}

	conn, err := goamqp.Dial(ctx, "amqp://"+dev.AMQPAddr, &goamqp.ConnOptions{SASLType: goamqp.SASLTypePlain(sas.DevKeyName, sas.DevKey)})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	sess, err := conn.NewSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	snd, err := sess.NewSender(ctx, queue, nil)
	if err != nil {
		t.Fatal(err)
	}
	const count = 3 * partitions // unkeyed: round-robin over the partitions
	for i := range count {
		if err := snd.Send(ctx, goamqp.NewMessage([]byte{byte(i)}), nil); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	rcv, err := sess.NewReceiver(ctx, queue, &goamqp.ReceiverOptions{Credit: count, SettlementMode: goamqp.ReceiverSettleModeSecond.Ptr()})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[byte]bool{}
	for len(seen) < count {
		m, err := rcv.Receive(ctx, nil)
		if err != nil {
			t.Fatalf("received %d of %d: %v", len(seen), count, err)
		}
		if err := rcv.AcceptMessage(ctx, m); err != nil {
			t.Fatal(err)
		}
		seen[m.GetData()[0]] = true
	}
}
