package compat

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	goamqp "github.com/Azure/go-amqp"
	"github.com/hashicorp/raft"

	"github.com/quorumbus/quorumbus/cmd/quorumbus/cluster"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// Message sessions through the official Go SDK against the replicated dev
// cluster.

func sessionQueue(name string) cluster.QueueSpec {
	return cluster.QueueSpec{Name: name, Props: &placementpb.QueueProperties{RequiresSession: true}}
}

func sendSession(t *testing.T, ctx context.Context, snd *azservicebus.Sender, sid string, bodies ...string) {
	t.Helper()
	for _, b := range bodies {
		for {
			err := snd.SendMessage(ctx, &azservicebus.Message{SessionID: &sid, Body: []byte(b)}, nil)
			if err == nil {
				break
			}
			// The routing table may name a new queue before its
			// partition group has applied it.
			if !strings.Contains(err.Error(), "entity not found") || ctx.Err() != nil {
				t.Fatalf("send %s to session %s: %v", b, sid, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// receiveN receives until n messages came, in the order they came.
//
// Each call waits for all it asks for rather than the SDK's default 20 ms
// after the first message. A ReceiveMessages of the Go SDK (v1.11) that
// returns short leaves its credit on the link and releases whatever
// arrives before the next call (its "releaser"); a released message goes
// back to the head of its session, but the messages after it that had
// reached the client already stay there, so the application sees it after
// them. Service Bus does the same (the .NET SDK drains a session
// receiver's credit instead for this reason: Azure/azure-sdk-for-net#35846,
// #40457). Under -race on a loaded machine the 20 ms ran out between a
// session's five deliveries in most runs of TestDevSessionsConcurrent,
// which then saw ["0" "1" "3" "4" "2"]: the SDK's order, not the broker's.
func receiveN(t *testing.T, ctx context.Context, r interface {
	ReceiveMessages(context.Context, int, *azservicebus.ReceiveMessagesOptions) ([]*azservicebus.ReceivedMessage, error)
}, n int) []*azservicebus.ReceivedMessage {
	t.Helper()
	var got []*azservicebus.ReceivedMessage
	for len(got) < n {
		msgs, err := r.ReceiveMessages(ctx, n-len(got), &azservicebus.ReceiveMessagesOptions{TimeAfterFirstMessage: time.Minute})
		if err != nil {
			t.Fatalf("receive after %d of %d: %v", len(got), n, err)
		}
		got = append(got, msgs...)
	}
	return got
}

func bodiesOf(msgs []*azservicebus.ReceivedMessage) []string {
	var out []string
	for _, m := range msgs {
		out = append(out, string(m.Body))
	}
	return out
}

func TestDevSessions(t *testing.T) {
	t.Parallel()
	c := startTestDev(t, sessionQueue("sq"), cluster.QueueSpec{Name: "plain", Props: &placementpb.QueueProperties{}})
	client := devClient(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// A message without a session id is refused; nothing is stored.
	snd, err := client.NewSender("sq", nil)
	if err != nil {
		t.Fatal(err)
	}
	err = snd.SendMessage(ctx, &azservicebus.Message{Body: []byte("no session")}, nil)
	var amqpErr *goamqp.Error
	if !errors.As(err, &amqpErr) || !strings.Contains(amqpErr.Description, "session id") {
		t.Fatalf("send without session id to a session queue: %v, want a refusal that says so", err)
	}
	// A session id on a plain queue is carried.
	psnd, _ := client.NewSender("plain", nil)
	sendSession(t, ctx, psnd, "carried", "p1")
	prcv, _ := client.NewReceiverForQueue("plain", nil)
	if got := receiveN(t, ctx, prcv, 1); got[0].SessionID == nil || *got[0].SessionID != "carried" {
		t.Fatalf("plain queue lost the session id: %v", got[0].SessionID)
	}
	// A plain receiver of a session queue is refused.
	if rcv, err := client.NewReceiverForQueue("sq", nil); err == nil {
		short, cancelShort := context.WithTimeout(ctx, 10*time.Second)
		_, err = rcv.ReceiveMessages(short, 1, nil)
		cancelShort()
		if err == nil {
			t.Fatal("a plain receiver received from a session queue")
		}
	}

	sendSession(t, ctx, snd, "s1", "a1", "a2", "a3")
	sendSession(t, ctx, snd, "s2", "b1")

	// Accept a given session: locked until a time in the future.
	s1, err := client.AcceptSessionForQueue(ctx, "sq", "s1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if s1.SessionID() != "s1" || !s1.LockedUntil().After(time.Now()) {
		t.Fatalf("accepted %q locked until %v", s1.SessionID(), s1.LockedUntil())
	}
	// Another receiver cannot have it.
	other := devClient(t, c)
	if _, err := other.AcceptSessionForQueue(ctx, "sq", "s1", nil); !errors.As(err, &amqpErr) || amqpErr.Condition != "com.microsoft:session-cannot-be-locked" {
		t.Fatalf("second accept of s1: %v, want session-cannot-be-locked", err)
	}

	// In order; an abandoned message comes back before the later ones.
	got := receiveN(t, ctx, s1, 1)
	if string(got[0].Body) != "a1" {
		t.Fatalf("first message %q, want a1", got[0].Body)
	}
	if err := s1.AbandonMessage(ctx, got[0], nil); err != nil {
		t.Fatal(err)
	}
	got = receiveN(t, ctx, s1, 3)
	if b := bodiesOf(got); !slices.Equal(b, []string{"a1", "a2", "a3"}) {
		t.Fatalf("after abandon: %q", b)
	}
	if got[0].DeliveryCount != 2 {
		t.Fatalf("abandoned message delivery count %d, want 2", got[0].DeliveryCount)
	}
	// Defer one, dead-letter one, complete one; the deferred one comes
	// back by sequence number under the session lock.
	if err := s1.DeferMessage(ctx, got[0], nil); err != nil {
		t.Fatal(err)
	}
	if err := s1.DeadLetterMessage(ctx, got[1], &azservicebus.DeadLetterOptions{Reason: strPtr("r")}); err != nil {
		t.Fatal(err)
	}
	if err := s1.CompleteMessage(ctx, got[2], nil); err != nil {
		t.Fatal(err)
	}
	deferred, err := s1.ReceiveDeferredMessages(ctx, []int64{*got[0].SequenceNumber}, nil)
	if err != nil || len(deferred) != 1 || string(deferred[0].Body) != "a1" {
		t.Fatalf("receive deferred: %v %v", deferred, err)
	}
	if err := s1.CompleteMessage(ctx, deferred[0], nil); err != nil {
		t.Fatal(err)
	}
	dlq, _ := client.NewReceiverForQueue("sq", &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter})
	if dl := receiveN(t, ctx, dlq, 1); string(dl[0].Body) != "a2" || dl[0].DeadLetterReason == nil || *dl[0].DeadLetterReason != "r" {
		t.Fatalf("dead-letter queue: %q", dl[0].Body)
	}

	// Later arrivals belong to the lock; peek shows the session's only.
	sendSession(t, ctx, snd, "s1", "a4")
	peeked, err := s1.PeekMessages(ctx, 10, nil)
	if err != nil || len(peeked) != 1 || string(peeked[0].Body) != "a4" {
		t.Fatalf("peek of s1: %v %v", bodiesOf(toReceived(peeked)), err)
	}
	if got := receiveN(t, ctx, s1, 1); string(got[0].Body) != "a4" {
		t.Fatalf("later arrival: %q", got[0].Body)
	} else if err := s1.CompleteMessage(ctx, got[0], nil); err != nil {
		t.Fatal(err)
	}

	// State: none at first, set, cleared, and kept while the session is
	// empty and unlocked.
	if st, err := s1.GetSessionState(ctx, nil); err != nil || st != nil {
		t.Fatalf("new session's state %q %v, want nil", st, err)
	}
	if err := s1.SetSessionState(ctx, []byte("x"), nil); err != nil {
		t.Fatal(err)
	}
	if st, _ := s1.GetSessionState(ctx, nil); string(st) != "x" {
		t.Fatalf("state %q, want x", st)
	}
	if err := s1.SetSessionState(ctx, nil, nil); err != nil {
		t.Fatal(err)
	}
	if st, _ := s1.GetSessionState(ctx, nil); st != nil {
		t.Fatalf("cleared state reads %q", st)
	}
	if err := s1.SetSessionState(ctx, []byte("kept"), nil); err != nil {
		t.Fatal(err)
	}
	before := s1.LockedUntil()
	time.Sleep(20 * time.Millisecond)
	if err := s1.RenewSessionLock(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if !s1.LockedUntil().After(before) {
		t.Fatalf("renew: locked until %v, before %v", s1.LockedUntil(), before)
	}
	if err := s1.Close(ctx); err != nil {
		t.Fatal(err)
	}
	again, err := other.AcceptSessionForQueue(ctx, "sq", "s1", nil)
	if err != nil {
		t.Fatalf("accept s1 after its receiver closed: %v", err)
	}
	if st, err := again.GetSessionState(ctx, nil); err != nil || string(st) != "kept" {
		t.Fatalf("state after close and accept: %q %v", st, err)
	}

	// Listing: s1 (state) and s2 (a message).
	var listed []string
	pager := client.NewListSessionsForQueuePager("sq", nil)
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		listed = append(listed, page.Sessions...)
	}
	if slices.Sort(listed); !slices.Equal(listed, []string{"s1", "s2"}) {
		t.Fatalf("listed sessions %q", listed)
	}

	// Accept-next takes the one session with messages, then times out
	// within the client's deadline.
	next, err := client.AcceptNextSessionForQueue(ctx, "sq", nil)
	if err != nil || next.SessionID() != "s2" {
		t.Fatalf("accept next: %v", err)
	}
	short, cancelShort := context.WithTimeout(ctx, 3*time.Second)
	defer cancelShort()
	start := time.Now()
	_, err = client.AcceptNextSessionForQueue(short, "sq", nil)
	var sbErr *azservicebus.Error
	if !errors.As(err, &sbErr) || sbErr.Code != azservicebus.CodeTimeout {
		t.Fatalf("accept next with none available: %v, want a timeout", err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("accept next answered after %v, past the client's 3s", took)
	}
}

func strPtr(s string) *string { return &s }

func toReceived(msgs []*azservicebus.ReceivedMessage) []*azservicebus.ReceivedMessage { return msgs }

// A pending accept-next gets a session whose first message arrives while
// it waits; concurrent accept-nexts each get a different session, and
// eight session receivers consume many sessions with every message once
// and in order per session.
func TestDevSessionsConcurrent(t *testing.T) {
	t.Parallel()
	c := startTestDev(t, sessionQueue("sq"))
	client := devClient(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	snd, _ := client.NewSender("sq", nil)

	pending := make(chan *azservicebus.SessionReceiver, 1)
	go func() {
		r, err := client.AcceptNextSessionForQueue(ctx, "sq", nil)
		if err != nil {
			t.Errorf("pending accept next: %v", err)
		}
		pending <- r
	}()
	time.Sleep(500 * time.Millisecond)
	sendSession(t, ctx, snd, "late", "l1")
	if r := <-pending; r == nil || r.SessionID() != "late" {
		t.Fatal("the waiting accept-next did not get the session that arrived")
	} else if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}

	const sessions, perSession, workers = 40, 5, 8
	for s := range sessions {
		var batch []string
		for i := range perSession {
			batch = append(batch, fmt.Sprintf("%d", i))
		}
		sendSession(t, ctx, snd, fmt.Sprintf("s%02d", s), batch...)
	}
	var mu sync.Mutex
	seen := map[string][]string{}
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				actx, acancel := context.WithTimeout(ctx, 10*time.Second)
				start := time.Now()
				r, err := client.AcceptNextSessionForQueue(actx, "sq", nil)
				acancel()
				if err != nil {
					t.Logf("accept next: %v after %v", err, time.Since(start))
				}
				var sbErr *azservicebus.Error
				if errors.As(err, &sbErr) && sbErr.Code == azservicebus.CodeTimeout {
					return // none left
				}
				if err != nil {
					t.Errorf("accept next: %v", err)
					return
				}
				sid := r.SessionID()
				want := perSession
				if sid == "late" {
					want = 1
				}
				msgs := receiveN(t, ctx, r, want)
				for _, m := range msgs {
					if err := r.CompleteMessage(ctx, m, nil); err != nil {
						t.Errorf("complete: %v", err)
					}
				}
				mu.Lock()
				if _, dup := seen[sid]; dup {
					t.Errorf("session %s accepted twice with messages", sid)
				}
				seen[sid] = bodiesOf(msgs)
				mu.Unlock()
				r.Close(ctx)
			}
		}()
	}
	wg.Wait()
	if len(seen) != sessions+1 {
		var missing []string
		for s := range sessions {
			if sid := fmt.Sprintf("s%02d", s); seen[sid] == nil {
				missing = append(missing, sid)
			}
		}
		if seen["late"] == nil {
			missing = append(missing, "late")
		}
		t.Fatalf("%d sessions consumed, want %d: not %q", len(seen), sessions+1, missing)
	}
	for sid, got := range seen {
		if sid == "late" {
			continue
		}
		if !slices.Equal(got, []string{"0", "1", "2", "3", "4"}) {
			t.Fatalf("session %s delivered %q", sid, got)
		}
	}
}

// The session lock, its messages' locks and the state survive the loss of
// the partition's leader.
func TestDevSessionLockSurvivesLeaderLoss(t *testing.T) {
	t.Parallel()
	c := startTestDev(t, sessionQueue("sq"))
	client := devClient(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	snd, _ := client.NewSender("sq", nil)
	sendSession(t, ctx, snd, "s", "m1", "m2")
	r, err := client.AcceptSessionForQueue(ctx, "sq", "s", nil)
	if err != nil {
		t.Fatal(err)
	}
	msgs := receiveN(t, ctx, r, 1)
	if err := r.SetSessionState(ctx, []byte("before"), nil); err != nil {
		t.Fatal(err)
	}
	e, err := c.Router.Entity("sq")
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
	if err := r.RenewSessionLock(ctx, nil); err != nil {
		t.Fatalf("renew the session lock on the new leader: %v", err)
	}
	if st, err := r.GetSessionState(ctx, nil); err != nil || string(st) != "before" {
		t.Fatalf("state on the new leader: %q %v", st, err)
	}
	if _, err := other(t, c).AcceptSessionForQueue(ctx, "sq", "s", nil); err == nil {
		t.Fatal("another receiver took the session after the leader change")
	}
	if err := r.CompleteMessage(ctx, msgs[0], nil); err != nil {
		t.Fatalf("complete on the new leader: %v", err)
	}
	if got := receiveN(t, ctx, r, 1); string(got[0].Body) != "m2" {
		t.Fatalf("next message %q", got[0].Body)
	}
}

func other(t *testing.T, c *cluster.Dev) *azservicebus.Client { return devClient(t, c) }

// A session lock that runs out ends by the leader's clock: another
// receiver can then accept the session and gets its unsettled messages
// again, each counting the delivery. (The first receiver's Go SDK answers
// the lost lock, on its next operation, by accepting the session again.)
func TestDevSessionLockExpiry(t *testing.T) {
	t.Parallel()
	c := startTestDev(t, cluster.QueueSpec{Name: "sq", Props: &placementpb.QueueProperties{RequiresSession: true, LockDurationMs: 2000}})
	client := devClient(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	snd, _ := client.NewSender("sq", nil)
	sendSession(t, ctx, snd, "s", "m1", "m2")
	r, err := client.AcceptSessionForQueue(ctx, "sq", "s", nil)
	if err != nil {
		t.Fatal(err)
	}
	got := receiveN(t, ctx, r, 2)
	if got[0].DeliveryCount != 1 {
		t.Fatalf("first delivery count %d", got[0].DeliveryCount)
	}
	time.Sleep(time.Until(r.LockedUntil()) + 1500*time.Millisecond)
	next, err := devClient(t, c).AcceptSessionForQueue(ctx, "sq", "s", nil)
	if err != nil {
		t.Fatalf("accept after the lock ran out: %v", err)
	}
	again := receiveN(t, ctx, next, 2)
	if b := bodiesOf(again); !slices.Equal(b, []string{"m1", "m2"}) || again[0].DeliveryCount != 2 {
		t.Fatalf("after expiry: %q, delivery count %d, want m1 m2 and 2", b, again[0].DeliveryCount)
	}
	for _, m := range again {
		if err := next.CompleteMessage(ctx, m, nil); err != nil {
			t.Fatal(err)
		}
	}
}

// A session's state is kept while the session has no messages and no
// receiver, and through a restart of the whole cluster.
func TestDevSessionStateSurvivesRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	port := freePortRun(t, 3)
	start := func() *cluster.Dev {
		c, err := cluster.StartDev(context.Background(), cluster.DevOptions{
			DataDir: dir, AMQPAddr: "127.0.0.1:0", Nodes: 3, NodePort: port, Groups: 3, CacheMB: 16, LogLevel: "error",
		})
		if err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if _, err := c.Router.Entity("sq"); err == nil {
				break
			}
			if time.Now().After(deadline) {
				c.Close()
				t.Fatal("queue sq never reached the front-end's routing table")
			}
		}
		return c
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := cluster.StartDev(context.Background(), cluster.DevOptions{
		DataDir: dir, AMQPAddr: "127.0.0.1:0", Nodes: 3, NodePort: port, Groups: 3, CacheMB: 16, LogLevel: "error",
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := cluster.CreateQueues(ctx, c.NodeAddrs, c.Creds, []cluster.QueueSpec{sessionQueue("sq")}, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		c.Close()
		t.Fatal(err)
	}
	c.Close()

	c = start()
	client, err := azservicebus.NewClientFromConnectionString(cluster.ConnectionString(c.AMQPAddr), nil)
	if err != nil {
		t.Fatal(err)
	}
	var r *azservicebus.SessionReceiver
	for {
		if r, err = client.AcceptSessionForQueue(ctx, "sq", "s", nil); err == nil || ctx.Err() != nil {
			break
		}
		time.Sleep(100 * time.Millisecond) // the queue's group may still be applying it
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := r.SetSessionState(ctx, []byte("kept"), nil); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}
	client.Close(ctx)
	c.Close()

	c = start()
	defer c.Close()
	client = devClient(t, c)
	var listed []string
	pager := client.NewListSessionsForQueuePager("sq", nil)
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		listed = append(listed, page.Sessions...)
	}
	if !slices.Equal(listed, []string{"s"}) {
		t.Fatalf("sessions after the restart: %q", listed)
	}
	r, err = client.AcceptSessionForQueue(ctx, "sq", "s", nil)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := r.GetSessionState(ctx, nil); err != nil || string(st) != "kept" {
		t.Fatalf("state after the restart: %q %v", st, err)
	}
}

// sessionOnPartition returns a session id that a queue of n partitions
// keeps on partition p.
func sessionOnPartition(prefix string, p, n uint32) string {
	for i := 0; ; i++ {
		if sid := fmt.Sprintf("%s-%d", prefix, i); partitionpb.PartitionForKey(sid, n) == p {
			return sid
		}
	}
}

// get-message-sessions lists a session whose only message is deferred,
// and with SessionStateUpdatedAfter only the sessions whose state changed
// since; a session receiver's peek shows its session's messages, the
// deferred one too, and no other session's.
func TestDevSessionsDeferredListAndPeek(t *testing.T) {
	t.Parallel()
	c := startTestDev(t, sessionQueue("sq"))
	client := devClient(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	snd, _ := client.NewSender("sq", nil)
	sendSession(t, ctx, snd, "d", "d1")
	sendSession(t, ctx, snd, "o", "o1")
	sendSession(t, ctx, snd, "d", "d2")
	r, err := client.AcceptSessionForQueue(ctx, "sq", "d", nil)
	if err != nil {
		t.Fatal(err)
	}
	got := receiveN(t, ctx, r, 2)
	if err := r.DeferMessage(ctx, got[0], nil); err != nil {
		t.Fatal(err)
	}
	if err := r.CompleteMessage(ctx, got[1], nil); err != nil {
		t.Fatal(err)
	}
	peeked, err := r.PeekMessages(ctx, 10, &azservicebus.PeekMessagesOptions{FromSequenceNumber: to.Ptr(int64(0))})
	if err != nil {
		t.Fatal(err)
	}
	if b := bodiesOf(peeked); !slices.Equal(b, []string{"d1"}) {
		t.Fatalf("peek of session d: %q, want its deferred d1 only", b)
	}
	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}
	ro, err := client.AcceptSessionForQueue(ctx, "sq", "o", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := ro.CompleteMessage(ctx, receiveN(t, ctx, ro, 1)[0], nil); err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	if err := ro.SetSessionState(ctx, []byte("st"), nil); err != nil {
		t.Fatal(err)
	}
	if err := ro.Close(ctx); err != nil {
		t.Fatal(err)
	}
	list := func(after *time.Time) []string {
		var ids []string
		p := client.NewListSessionsForQueuePager("sq", &azservicebus.ListSessionsOptions{SessionStateUpdatedAfter: after})
		for p.More() {
			page, err := p.NextPage(ctx)
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, page.Sessions...)
		}
		slices.Sort(ids)
		return ids
	}
	if ids := list(nil); !slices.Equal(ids, []string{"d", "o"}) {
		t.Fatalf("sessions %q, want d (only a deferred message) and o (only state)", ids)
	}
	if ids := list(&before); !slices.Equal(ids, []string{"o"}) {
		t.Fatalf("sessions whose state changed since %v: %q", before, ids)
	}
	later := time.Now().Add(time.Minute)
	if ids := list(&later); len(ids) != 0 {
		t.Fatalf("sessions whose state changed in the future: %q", ids)
	}
}

// bySequence returns msgs sorted by sequence number: the order the broker
// gave them, whatever order the SDK handed them over in (a message its
// releaser gave back arrives after later ones).
func bySequence(msgs []*azservicebus.ReceivedMessage) []*azservicebus.ReceivedMessage {
	out := slices.Clone(msgs)
	slices.SortFunc(out, func(a, b *azservicebus.ReceivedMessage) int {
		return cmp.Compare(*a.SequenceNumber, *b.SequenceNumber)
	})
	return out
}

// sessionHolds describes what a session receiver's session still holds,
// by peek, for a failure message.
func sessionHolds(ctx context.Context, r *azservicebus.SessionReceiver, max int) []string {
	var held []string
	if peeked, err := r.PeekMessages(ctx, max, nil); err == nil {
		for _, m := range peeked {
			held = append(held, fmt.Sprintf("%s(seq %d, deliveries %d, state %v, locked until %v)", m.Body, *m.SequenceNumber, m.DeliveryCount, m.State, m.LockedUntil))
		}
	}
	return held
}
