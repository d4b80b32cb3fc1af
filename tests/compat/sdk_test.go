package compat

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	goamqp "github.com/Azure/go-amqp"
	"github.com/hashicorp/raft"

	"github.com/quorumbus/quorumbus/cmd/quorumbus/cluster"
	"github.com/quorumbus/quorumbus/placement/sas"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// These tests run the real thing in one process: three storage nodes
// (Raft, fsync on), the placement meta group and the AMQP front-end, as
// `quorumbus dev` does, and talk to it with the official Azure SDK and
// go-amqp.
//
// The clusters of startTestDev have their front-end reach the nodes over
// gRPC, as a `quorumbus frontend` process in production does; the tests
// that start a cluster themselves (admin, TLS, sessions across restarts,
// large messages) use dev mode's in-process calls. Both paths are thus
// exercised by the SDKs.

func startTestDev(t *testing.T, queues ...cluster.QueueSpec) *cluster.Dev {
	t.Helper()
	return startTestDevWith(t, nil, queues...)
}

// startTestDevWith is startTestDev with options changed by opts (nil:
// none).
func startTestDevWith(t *testing.T, opts func(*cluster.DevOptions), queues ...cluster.QueueSpec) *cluster.Dev {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	o := cluster.DevOptions{
		DataDir:          t.TempDir(),
		AMQPAddr:         "127.0.0.1:0",
		Nodes:            3,
		Groups:           3,
		CacheMB:          16,
		LogLevel:         "error",
		FrontendOverGRPC: true,
	}
	if opts != nil {
		opts(&o)
	}
	c, err := cluster.StartDev(ctx, o)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		cancel()
	})
	if err := cluster.CreateQueues(ctx, c.NodeAddrs, c.Creds, queues, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		t.Fatal(err)
	}
	// The front-end learns of the queues through the routing table.
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

func devClient(t *testing.T, c *cluster.Dev) *azservicebus.Client {
	t.Helper()
	client, err := azservicebus.NewClientFromConnectionString(cluster.ConnectionString(c.AMQPAddr), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(context.Background()) })
	return client
}

func TestDevSDKThousandMessages(t *testing.T) {
	t.Parallel()
	c := startTestDev(t, cluster.QueueSpec{Name: "orders", Props: &placementpb.QueueProperties{}})
	client := devClient(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	snd, err := client.NewSender("orders", nil)
	if err != nil {
		t.Fatal(err)
	}
	const n = 1000
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for w := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 20 {
				if err := snd.SendMessage(ctx, &azservicebus.Message{Body: []byte(fmt.Sprint(i))}, nil); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("send: %v", err)
	}

	rcv, err := client.NewReceiverForQueue("orders", nil)
	if err != nil {
		t.Fatal(err)
	}
	// Sequence numbers are not checked for order here: after
	// ReceiveMessages returns, the Go SDK (v1.11) releases every message
	// that still arrives on the link's open credit, and a released message
	// comes back after newer ones the SDK already holds. Service Bus
	// promises order only within a session. A receiver that keeps its
	// credit sees the partition's order (TestDevGoAMQPPipelinedSends).
	seen := make(map[string]bool, n)
	for len(seen) < n {
		msgs, err := rcv.ReceiveMessages(ctx, 100, nil)
		if err != nil {
			t.Fatalf("receive after %d: %v", len(seen), err)
		}
		for _, m := range msgs {
			if seen[string(m.Body)] {
				t.Fatalf("message %s delivered twice", m.Body)
			}
			seen[string(m.Body)] = true
			if err := rcv.CompleteMessage(ctx, m, nil); err != nil {
				t.Fatalf("complete: %v", err)
			}
		}
	}
	// Nothing is left: a peek-lock receive finds no message.
	short, cancelShort := context.WithTimeout(ctx, 2*time.Second)
	defer cancelShort()
	msgs, _ := rcv.ReceiveMessages(short, 1, nil)
	if len(msgs) != 0 {
		t.Fatalf("a message was left after completing all %d: %q", n, msgs[0].Body)
	}
}

func TestDevSDKAbandonAndReceiveAndDelete(t *testing.T) {
	t.Parallel()
	c := startTestDev(t, cluster.QueueSpec{Name: "work", Props: &placementpb.QueueProperties{}})
	client := devClient(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	snd, _ := client.NewSender("work", nil)
	if err := snd.SendMessage(ctx, &azservicebus.Message{Body: []byte("again")}, nil); err != nil {
		t.Fatal(err)
	}
	rcv, _ := client.NewReceiverForQueue("work", nil)
	msgs, err := rcv.ReceiveMessages(ctx, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if msgs[0].DeliveryCount != 1 {
		t.Fatalf("first delivery count %d, want 1", msgs[0].DeliveryCount)
	}
	if err := rcv.AbandonMessage(ctx, msgs[0], nil); err != nil {
		t.Fatal(err)
	}
	msgs, err = rcv.ReceiveMessages(ctx, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if msgs[0].DeliveryCount != 2 || string(msgs[0].Body) != "again" {
		t.Fatalf("after abandon: delivery count %d body %q, want 2 and again", msgs[0].DeliveryCount, msgs[0].Body)
	}
	if err := rcv.CompleteMessage(ctx, msgs[0], nil); err != nil {
		t.Fatal(err)
	}

	for i := range 5 {
		if err := snd.SendMessage(ctx, &azservicebus.Message{Body: []byte{byte(i)}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	rad, _ := client.NewReceiverForQueue("work", &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
	got := 0
	for got < 5 {
		msgs, err := rad.ReceiveMessages(ctx, 5, nil)
		if err != nil {
			t.Fatal(err)
		}
		got += len(msgs)
	}
	short, cancelShort := context.WithTimeout(ctx, time.Second)
	defer cancelShort()
	if msgs, _ := rad.ReceiveMessages(short, 1, nil); len(msgs) != 0 {
		t.Fatal("receive-and-delete left a message behind")
	}
}

func TestDevGoAMQPPipelinedSends(t *testing.T) {
	t.Parallel()
	c := startTestDev(t, cluster.QueueSpec{Name: "pipe", Props: &placementpb.QueueProperties{}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn, err := goamqp.Dial(ctx, "amqp://"+c.AMQPAddr, &goamqp.ConnOptions{SASLType: goamqp.SASLTypePlain(sas.DevKeyName, sas.DevKey)})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	sess, err := conn.NewSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	snd, err := sess.NewSender(ctx, "pipe", nil)
	if err != nil {
		t.Fatal(err)
	}
	const n = 5000
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	payload := make([]byte, 1024)
	for w := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 64 {
				if err := snd.Send(ctx, goamqp.NewMessage(payload), nil); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	rcv, err := sess.NewReceiver(ctx, "pipe", &goamqp.ReceiverOptions{Credit: 500, RequestedSenderSettleMode: goamqp.SenderSettleModeSettled.Ptr()})
	if err != nil {
		t.Fatal(err)
	}
	var last int64
	for i := range n {
		m, err := rcv.Receive(ctx, nil)
		if err != nil {
			t.Fatalf("receive %d of %d: %v", i, n, err)
		}
		seq, _ := m.Annotations["x-opt-sequence-number"].(int64)
		if seq <= last {
			t.Fatalf("receive %d of %d: sequence number %d after %d", i, n, seq, last)
		}
		last = seq
	}
}

func TestDevUnknownQueue(t *testing.T) {
	t.Parallel()
	c := startTestDev(t)
	client := devClient(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	snd, _ := client.NewSender("missing", nil)
	if err := snd.SendMessage(ctx, &azservicebus.Message{Body: []byte("x")}, nil); err == nil {
		t.Fatal("a send to a queue that does not exist succeeded")
	}
}

// Locks belong to the entity: a message received on one connection is
// renewed and completed through $management on another after the first
// receiver closed, and a second complete is refused as lock lost, never
// silently repeated.
func TestDevSettleThroughManagement(t *testing.T) {
	t.Parallel()
	c := startTestDev(t, cluster.QueueSpec{Name: "mgmt", Props: &placementpb.QueueProperties{}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	first := devClient(t, c)
	snd, _ := first.NewSender("mgmt", nil)
	if err := snd.SendMessage(ctx, &azservicebus.Message{Body: []byte("settle me elsewhere")}, nil); err != nil {
		t.Fatal(err)
	}
	rcv, _ := first.NewReceiverForQueue("mgmt", nil)
	msgs, err := rcv.ReceiveMessages(ctx, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := msgs[0]
	before := *m.LockedUntil
	time.Sleep(20 * time.Millisecond)
	if err := rcv.RenewMessageLock(ctx, m, nil); err != nil {
		t.Fatalf("renew lock: %v", err)
	}
	if !m.LockedUntil.After(before) {
		t.Fatalf("renewing did not extend the lock: %v then %v", before, *m.LockedUntil)
	}
	if err := rcv.Close(ctx); err != nil {
		t.Fatal(err)
	}

	second := devClient(t, c)
	other, _ := second.NewReceiverForQueue("mgmt", nil)
	if err := other.CompleteMessage(ctx, m, nil); err != nil {
		t.Fatalf("complete through $management on another connection: %v", err)
	}
	err = other.CompleteMessage(ctx, m, nil)
	var sbErr *azservicebus.Error
	if !errors.As(err, &sbErr) || sbErr.Code != azservicebus.CodeLockLost {
		t.Fatalf("second complete: %v, want lock lost", err)
	}
}

// Abandon with properties to modify, dead-letter with reason and
// description, and the dead-letter sub-queue: receivable, completable,
// each message keeping its reason, description and source.
func TestDevDeadLetterAndModifiedProperties(t *testing.T) {
	t.Parallel()
	c := startTestDev(t, cluster.QueueSpec{Name: "dlq", Props: &placementpb.QueueProperties{}})
	client := devClient(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	snd, _ := client.NewSender("dlq", nil)
	if err := snd.SendMessage(ctx, &azservicebus.Message{Body: []byte("poison"), ApplicationProperties: map[string]any{"kept": "yes"}}, nil); err != nil {
		t.Fatal(err)
	}
	rcv, _ := client.NewReceiverForQueue("dlq", nil)
	msgs, err := rcv.ReceiveMessages(ctx, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := rcv.AbandonMessage(ctx, msgs[0], &azservicebus.AbandonMessageOptions{PropertiesToModify: map[string]any{"hello": "world"}}); err != nil {
		t.Fatal(err)
	}
	msgs, err = rcv.ReceiveMessages(ctx, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := msgs[0]
	if m.ApplicationProperties["hello"] != "world" || m.ApplicationProperties["kept"] != "yes" || m.DeliveryCount != 2 {
		t.Fatalf("after abandon with properties: %v, delivery count %d", m.ApplicationProperties, m.DeliveryCount)
	}
	reason, desc := "BadPayload", "could not parse"
	if err := rcv.DeadLetterMessage(ctx, m, &azservicebus.DeadLetterOptions{Reason: &reason, ErrorDescription: &desc}); err != nil {
		t.Fatal(err)
	}
	dlq, err := client.NewReceiverForQueue("dlq", &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter})
	if err != nil {
		t.Fatal(err)
	}
	msgs, err = dlq.ReceiveMessages(ctx, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	d := msgs[0]
	if string(d.Body) != "poison" || d.DeadLetterReason == nil || *d.DeadLetterReason != reason ||
		d.DeadLetterErrorDescription == nil || *d.DeadLetterErrorDescription != desc ||
		d.DeadLetterSource == nil || *d.DeadLetterSource != "dlq" || d.ApplicationProperties["hello"] != "world" {
		t.Fatalf("dead-lettered message: body %q reason %v description %v source %v props %v",
			d.Body, d.DeadLetterReason, d.DeadLetterErrorDescription, d.DeadLetterSource, d.ApplicationProperties)
	}
	if err := dlq.CompleteMessage(ctx, d, nil); err != nil {
		t.Fatal(err)
	}
	short, cancelShort := context.WithTimeout(ctx, time.Second)
	defer cancelShort()
	if msgs, _ := dlq.ReceiveMessages(short, 1, nil); len(msgs) != 0 {
		t.Fatal("the dead-letter queue kept a completed message")
	}
}

// Scheduled messages (by ScheduledEnqueueTime and by ScheduleMessages),
// cancel, peek from a sequence number with their state, activation, and
// defer with receive-deferred by sequence number.
func TestDevScheduleDeferPeek(t *testing.T) {
	t.Parallel()
	c := startTestDev(t, cluster.QueueSpec{Name: "sched", Props: &placementpb.QueueProperties{}})
	client := devClient(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	snd, _ := client.NewSender("sched", nil)
	soon := time.Now().Add(3 * time.Second)
	later := time.Now().Add(time.Hour)
	seqs, err := snd.ScheduleMessages(ctx, []*azservicebus.Message{{Body: []byte("cancel me")}, {Body: []byte("keep me")}}, later, nil)
	if err != nil {
		t.Fatalf("schedule: %v", err)
	}
	if len(seqs) != 2 {
		t.Fatalf("schedule returned %v", seqs)
	}
	if err := snd.SendMessage(ctx, &azservicebus.Message{Body: []byte("soon"), ScheduledEnqueueTime: &soon}, nil); err != nil {
		t.Fatal(err)
	}
	if err := snd.CancelScheduledMessages(ctx, seqs[:1], nil); err != nil {
		t.Fatalf("cancel: %v", err)
	}
	rcv, _ := client.NewReceiverForQueue("sched", nil)
	peeked, err := rcv.PeekMessages(ctx, 10, &azservicebus.PeekMessagesOptions{FromSequenceNumber: &seqs[0]})
	if err != nil {
		t.Fatalf("peek: %v", err)
	}
	var bodies []string
	for _, m := range peeked {
		if m.State != azservicebus.MessageStateScheduled {
			t.Fatalf("peeked %q in state %v, want scheduled", m.Body, m.State)
		}
		bodies = append(bodies, string(m.Body))
	}
	if len(bodies) != 2 || bodies[0] != "keep me" || bodies[1] != "soon" {
		t.Fatalf("peek after cancel: %q", bodies)
	}
	// "soon" activates with a new sequence number and is received.
	msgs, err := rcv.ReceiveMessages(ctx, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if string(msgs[0].Body) != "soon" || *msgs[0].SequenceNumber <= *peeked[1].SequenceNumber {
		t.Fatalf("received %q with sequence number %d; scheduled one had %d", msgs[0].Body, *msgs[0].SequenceNumber, *peeked[1].SequenceNumber)
	}
	// Defer it, then fetch it back by its sequence number.
	if err := rcv.DeferMessage(ctx, msgs[0], nil); err != nil {
		t.Fatal(err)
	}
	deferred, err := rcv.ReceiveDeferredMessages(ctx, []int64{*msgs[0].SequenceNumber}, nil)
	if err != nil {
		t.Fatalf("receive deferred: %v", err)
	}
	if len(deferred) != 1 || string(deferred[0].Body) != "soon" || deferred[0].State != azservicebus.MessageStateDeferred {
		t.Fatalf("receive deferred: %v", deferred)
	}
	if err := rcv.CompleteMessage(ctx, deferred[0], nil); err != nil {
		t.Fatalf("complete a deferred message: %v", err)
	}
}

// Entity properties shortened through the entity, not test hooks: a lock
// that runs out puts the message back with DeliveryCount + 1 and the old
// lock is refused; MaxDeliveryCount dead-letters; TTL dead-letters with
// DeadLetteringOnMessageExpiration; duplicate detection drops a resend.
func TestDevLocksTTLAndDuplicates(t *testing.T) {
	t.Parallel()
	c := startTestDev(t,
		cluster.QueueSpec{Name: "shortlock", Props: &placementpb.QueueProperties{LockDurationMs: 1500, MaxDeliveryCount: 2}},
		cluster.QueueSpec{Name: "ttl", Props: &placementpb.QueueProperties{DeadLetteringOnMessageExpiration: true}},
		cluster.QueueSpec{Name: "dedup", Props: &placementpb.QueueProperties{RequiresDuplicateDetection: true, DuplicateDetectionWindowMs: 60000}},
	)
	client := devClient(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	t.Run("lock expiry and MaxDeliveryCount", func(t *testing.T) {
		snd, _ := client.NewSender("shortlock", nil)
		if err := snd.SendMessage(ctx, &azservicebus.Message{Body: []byte("slow")}, nil); err != nil {
			t.Fatal(err)
		}
		rcv, _ := client.NewReceiverForQueue("shortlock", nil)
		first, err := rcv.ReceiveMessages(ctx, 1, nil)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(2500 * time.Millisecond) // the 1.5 s lock runs out
		second, err := rcv.ReceiveMessages(ctx, 1, nil)
		if err != nil {
			t.Fatal(err)
		}
		if second[0].DeliveryCount != 2 {
			t.Fatalf("after lock expiry: delivery count %d, want 2", second[0].DeliveryCount)
		}
		var sbErr *azservicebus.Error
		if err := rcv.CompleteMessage(ctx, first[0], nil); !errors.As(err, &sbErr) || sbErr.Code != azservicebus.CodeLockLost {
			t.Fatalf("complete under the expired lock: %v, want lock lost", err)
		}
		// The second delivery was the last allowed: abandoning it
		// dead-letters the message.
		if err := rcv.AbandonMessage(ctx, second[0], nil); err != nil {
			t.Fatal(err)
		}
		dlq, _ := client.NewReceiverForQueue("shortlock", &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter})
		dead, err := dlq.ReceiveMessages(ctx, 1, nil)
		if err != nil {
			t.Fatal(err)
		}
		if dead[0].DeadLetterReason == nil || *dead[0].DeadLetterReason != "MaxDeliveryCountExceeded" {
			t.Fatalf("dead-letter reason %v, want MaxDeliveryCountExceeded", dead[0].DeadLetterReason)
		}
		if err := dlq.CompleteMessage(ctx, dead[0], nil); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("TTL to the dead-letter queue", func(t *testing.T) {
		snd, _ := client.NewSender("ttl", nil)
		ttl := time.Second
		if err := snd.SendMessage(ctx, &azservicebus.Message{Body: []byte("stale"), TimeToLive: &ttl}, nil); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second)
		dlq, _ := client.NewReceiverForQueue("ttl", &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter})
		dead, err := dlq.ReceiveMessages(ctx, 1, nil)
		if err != nil {
			t.Fatal(err)
		}
		if string(dead[0].Body) != "stale" || dead[0].DeadLetterReason == nil || *dead[0].DeadLetterReason != "TTLExpiredException" {
			t.Fatalf("expired message: %q reason %v", dead[0].Body, dead[0].DeadLetterReason)
		}
		rcv, _ := client.NewReceiverForQueue("ttl", nil)
		short, cancelShort := context.WithTimeout(ctx, time.Second)
		defer cancelShort()
		if msgs, _ := rcv.ReceiveMessages(short, 1, nil); len(msgs) != 0 {
			t.Fatal("an expired message was delivered")
		}
	})

	t.Run("duplicate detection", func(t *testing.T) {
		snd, _ := client.NewSender("dedup", nil)
		id := "order-42"
		for range 3 {
			if err := snd.SendMessage(ctx, &azservicebus.Message{MessageID: &id, Body: []byte("once")}, nil); err != nil {
				t.Fatal(err)
			}
		}
		rcv, _ := client.NewReceiverForQueue("dedup", nil)
		msgs, err := rcv.ReceiveMessages(ctx, 10, nil)
		if err != nil {
			t.Fatal(err)
		}
		short, cancelShort := context.WithTimeout(ctx, time.Second)
		defer cancelShort()
		more, _ := rcv.ReceiveMessages(short, 10, nil)
		if n := len(msgs) + len(more); n != 1 {
			t.Fatalf("%d copies of a message sent three times with one id, want 1", n)
		}
	})
}

// A 10 MB message on an entity that allows it (MaxMessageSizeInKilobytes),
// and a message over an entity's limit refused with message-size-exceeded
// instead of hanging.
func TestDevLargeMessages(t *testing.T) {
	t.Parallel()
	c := startTestDev(t,
		cluster.QueueSpec{Name: "big", Props: &placementpb.QueueProperties{MaxMessageSizeInKilobytes: 16 << 10}},
		cluster.QueueSpec{Name: "small", Props: &placementpb.QueueProperties{}},
	)
	client := devClient(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	body := make([]byte, 10<<20)
	for i := range body {
		body[i] = byte(i * 31)
	}
	snd, _ := client.NewSender("big", nil)
	if err := snd.SendMessage(ctx, &azservicebus.Message{Body: body}, nil); err != nil {
		t.Fatalf("send 10 MB: %v", err)
	}
	rcv, _ := client.NewReceiverForQueue("big", nil)
	msgs, err := rcv.ReceiveMessages(ctx, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs[0].Body) != len(body) || string(msgs[0].Body) != string(body) {
		t.Fatalf("received %d bytes, not the 10 MB sent", len(msgs[0].Body))
	}
	if err := rcv.CompleteMessage(ctx, msgs[0], nil); err != nil {
		t.Fatal(err)
	}
	small, _ := client.NewSender("small", nil)
	err = small.SendMessage(ctx, &azservicebus.Message{Body: make([]byte, 300<<10)}, nil)
	if !errors.Is(err, azservicebus.ErrMessageTooLarge) {
		t.Fatalf("a 300 KB message on a 256 KB queue: %v, want ErrMessageTooLarge", err)
	}
}

// Locks and the duplicate-detection window are replicated state: after the
// leader of the queue's group stops, the lock taken before can be renewed
// and settled on the new leader, and a resend of an id seen before is still
// dropped. (node's tests do the same with kill -9 of real processes.)
func TestDevLockAndDedupSurviveLeaderLoss(t *testing.T) {
	t.Parallel()
	c := startTestDev(t, cluster.QueueSpec{Name: "ha", Props: &placementpb.QueueProperties{RequiresDuplicateDetection: true}})
	client := devClient(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	snd, _ := client.NewSender("ha", nil)
	id := "only-once"
	if err := snd.SendMessage(ctx, &azservicebus.Message{MessageID: &id, Body: []byte("held")}, nil); err != nil {
		t.Fatal(err)
	}
	rcv, _ := client.NewReceiverForQueue("ha", nil)
	msgs, err := rcv.ReceiveMessages(ctx, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	e, err := c.Router.Entity("ha")
	if err != nil {
		t.Fatal(err)
	}
	group := e.PartitionGroups[0]
	stopped := false
	for _, s := range c.Storage {
		if st, err := s.Node.Group(group); err == nil && st.State == raft.Leader {
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			stopped = true
			break
		}
	}
	if !stopped {
		t.Fatal("found no leader to stop")
	}
	if err := rcv.RenewMessageLock(ctx, msgs[0], nil); err != nil {
		t.Fatalf("renew on the new leader: %v", err)
	}
	if err := snd.SendMessage(ctx, &azservicebus.Message{MessageID: &id, Body: []byte("again")}, nil); err != nil {
		t.Fatal(err)
	}
	if err := rcv.CompleteMessage(ctx, msgs[0], nil); err != nil {
		t.Fatalf("complete on the new leader: %v", err)
	}
	short, cancelShort := context.WithTimeout(ctx, 2*time.Second)
	defer cancelShort()
	if more, _ := rcv.ReceiveMessages(short, 1, nil); len(more) != 0 {
		t.Fatalf("the resend of %s after the leader change was not dropped: %q", id, more[0].Body)
	}
}

// Entity status and size quota: a send-disabled queue refuses senders and
// still serves receivers, a receive-disabled one the reverse, a disabled
// one both; a full queue refuses sends with quota exceeded and keeps what
// it has.
func TestStatusAndQuota(t *testing.T) {
	t.Parallel()
	c := startTestDev(t, cluster.QueueSpec{Name: "tiny", Props: &placementpb.QueueProperties{MaxSizeInMegabytes: 1}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin, closeAdmin, err := cluster.DialPlacement(c.NodeAddrs[0], c.Creds)
	if err != nil {
		t.Fatal(err)
	}
	defer closeAdmin()
	for _, q := range []struct {
		name   string
		status placementpb.EntityStatus
	}{
		{"nosend", placementpb.EntityStatus_ENTITY_STATUS_SEND_DISABLED},
		{"noreceive", placementpb.EntityStatus_ENTITY_STATUS_RECEIVE_DISABLED},
		{"off", placementpb.EntityStatus_ENTITY_STATUS_DISABLED},
	} {
		if _, err := admin.CreateEntity(ctx, &placementpb.CreateEntityRequest{Name: q.name, Status: q.status, Properties: &placementpb.QueueProperties{}}); err != nil {
			t.Fatal(err)
		}
	}
	client := devClient(t, c)
	send := func(queue string) error {
		snd, _ := client.NewSender(queue, nil)
		return snd.SendMessage(ctx, &azservicebus.Message{Body: []byte("x")}, nil)
	}
	receive := func(queue string) error {
		rcv, _ := client.NewReceiverForQueue(queue, nil)
		short, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_, err := rcv.ReceiveMessages(short, 1, nil)
		if errors.Is(err, context.DeadlineExceeded) {
			return nil // attached and waited: receiving is allowed
		}
		return err
	}
	disabled := func(err error) bool {
		return err != nil && strings.Contains(err.Error(), "com.microsoft:entity-disabled")
	}
	if err := send("nosend"); !disabled(err) {
		t.Errorf("send to a send-disabled queue: %v", err)
	}
	if err := receive("nosend"); err != nil {
		t.Errorf("receive from a send-disabled queue: %v", err)
	}
	if err := send("noreceive"); err != nil {
		t.Errorf("send to a receive-disabled queue: %v", err)
	}
	if err := receive("noreceive"); !disabled(err) {
		t.Errorf("receive from a receive-disabled queue: %v", err)
	}
	if err := send("off"); !disabled(err) {
		t.Errorf("send to a disabled queue: %v", err)
	}

	// 1 MB of room: 64 KiB messages fill it within 16 sends.
	snd, _ := client.NewSender("tiny", nil)
	body := make([]byte, 64<<10)
	sent := 0
	for ; sent < 40; sent++ {
		err := snd.SendMessage(ctx, &azservicebus.Message{Body: body}, nil)
		if err == nil {
			continue
		}
		if !strings.Contains(err.Error(), "amqp:resource-limit-exceeded") {
			t.Fatalf("send %d to a full queue: %v, want quota exceeded", sent, err)
		}
		break
	}
	if sent == 0 || sent == 40 {
		t.Fatalf("%d sends of 64 KiB to a 1 MB queue succeeded", sent)
	}
	rcv, _ := client.NewReceiverForQueue("tiny", &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
	got := 0
	for got < sent {
		msgs, err := rcv.ReceiveMessages(ctx, sent-got, nil)
		if err != nil {
			t.Fatal(err)
		}
		got += len(msgs)
	}
}
