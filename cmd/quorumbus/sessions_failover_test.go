package main

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/quorumbus/quorumbus/cmd/quorumbus/cluster"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// TestFailoverSessionLock runs three `quorumbus node` processes and a
// `quorumbus frontend`, accepts a session through the Go SDK, receives a
// message under it, sets the session's state, and kill -9s the leader of
// the queue's partition group. The session lock must survive: renewing it
// on the new leader works, another receiver still cannot take the session,
// the state is there, and the message received before the kill completes.
func TestFailoverSessionLock(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	pc := startPlainCluster(t)
	procs, grpcAddrs, amqpAddr := pc.procs, pc.grpcAddrs, pc.amqpAddr

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	props := &placementpb.QueueProperties{RequiresSession: true, LockDurationMs: 30_000}
	if err := cluster.CreateQueues(ctx, grpcAddrs, nil, []cluster.QueueSpec{{Name: "sfo", Props: props}}, quiet); err != nil {
		t.Fatal(err)
	}
	group := queueGroup(t, ctx, grpcAddrs[0], "sfo")
	dialUntil(t, ctx, amqpAddr).Close() // the front-end is up

	client, err := azservicebus.NewClientFromConnectionString(cluster.ConnectionString(amqpAddr), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close(context.Background())
	snd, err := client.NewSender("sfo", nil)
	if err != nil {
		t.Fatal(err)
	}
	sid := "order-7"
	for {
		err := snd.SendMessage(ctx, &azservicebus.Message{SessionID: &sid, Body: []byte("first")}, nil)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond) // the front-end learns of the queue
	}
	if err := snd.SendMessage(ctx, &azservicebus.Message{SessionID: &sid, Body: []byte("second")}, nil); err != nil {
		t.Fatal(err)
	}
	r, err := client.AcceptSessionForQueue(ctx, "sfo", sid, nil)
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := r.ReceiveMessages(ctx, 1, nil)
	if err != nil || len(msgs) != 1 || string(msgs[0].Body) != "first" {
		t.Fatalf("receive: %v %v", msgs, err)
	}
	if err := r.SetSessionState(ctx, []byte("kept"), nil); err != nil {
		t.Fatal(err)
	}

	leader := leaderIndex(t, ctx, grpcAddrs, group)
	procs[leader].kill9()
	t.Logf("killed n%d, the leader of group %d", leader+1, group)
	before := r.LockedUntil()
	if err := r.RenewSessionLock(ctx, nil); err != nil {
		t.Fatalf("renew the session lock after the leader's kill: %v", err)
	}
	if !r.LockedUntil().After(before) {
		t.Fatalf("renewed lock ends %v, before %v", r.LockedUntil(), before)
	}
	other, err := azservicebus.NewClientFromConnectionString(cluster.ConnectionString(amqpAddr), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(context.Background())
	if _, err := other.AcceptSessionForQueue(ctx, "sfo", sid, nil); err == nil {
		t.Fatal("another receiver took the session after the leader's kill")
	}
	if st, err := r.GetSessionState(ctx, nil); err != nil || string(st) != "kept" {
		t.Fatalf("state after the kill: %q %v", st, err)
	}
	if err := r.CompleteMessage(ctx, msgs[0], nil); err != nil {
		t.Fatalf("complete after the kill: %v", err)
	}
	next, err := r.ReceiveMessages(ctx, 1, nil)
	if err != nil || len(next) != 1 || string(next[0].Body) != "second" {
		t.Fatalf("next message after the kill: %v %v", next, err)
	}
}
