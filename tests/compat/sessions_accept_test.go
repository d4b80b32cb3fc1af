package compat

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"google.golang.org/protobuf/proto"

	"github.com/quorumbus/quorumbus/cmd/quorumbus/cluster"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// On a partitioned session queue a waiting accept-next gets the first
// session that becomes available on any partition, not only on the last
// one; the partitions it waited on keep no lock: the next sessions can be
// accepted, by id and by accept-next, at once. Concurrent waiting
// accept-nexts each get a different session; with none available the
// accept times out within the client's budget.
func TestDevSessionsPartitionedAcceptNext(t *testing.T) {
	t.Parallel()
	const parts = 4
	c := startTestDev(t, cluster.QueueSpec{Name: "sq4", Props: &placementpb.QueueProperties{RequiresSession: true, PartitionCount: parts}})
	client := devClient(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	snd, _ := client.NewSender("sq4", nil)
	// The partitions' groups may apply the queue after the routing table
	// names it: a send to each partition waits for that.
	for p := range uint32(parts) {
		sid := sessionOnPartition("warm", p, parts)
		sendSession(t, ctx, snd, sid, "w")
		r, err := client.AcceptSessionForQueue(ctx, "sq4", sid, &azservicebus.SessionReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
		if err != nil {
			t.Fatal(err)
		}
		receiveN(t, ctx, r, 1)
		r.Close(ctx)
	}

	acceptAsync := func() chan *azservicebus.SessionReceiver {
		got := make(chan *azservicebus.SessionReceiver, 1)
		go func() {
			r, err := client.AcceptNextSessionForQueue(ctx, "sq4", nil)
			if err != nil {
				t.Errorf("pending accept next: %v", err)
			}
			got <- r
		}()
		return got
	}
	pending := acceptAsync()
	time.Sleep(time.Second)
	first := sessionOnPartition("first", 0, parts)
	sendSession(t, ctx, snd, first, "f1")
	r := <-pending
	if r == nil || r.SessionID() != first {
		t.Fatalf("the waiting accept-next did not get session %s of partition 0", first)
	}
	if got := receiveN(t, ctx, r, 1); string(got[0].Body) != "f1" {
		t.Fatalf("got %q", got[0].Body)
	} else if err := r.CompleteMessage(ctx, got[0], nil); err != nil {
		t.Fatal(err)
	}

	// Nothing else stays locked: sessions of the other partitions are had
	// at once, by id and by accept-next.
	byID := sessionOnPartition("byid", 1, parts)
	next := sessionOnPartition("next", 2, parts)
	sendSession(t, ctx, snd, byID, "b1")
	sendSession(t, ctx, snd, next, "n1")
	rb, err := client.AcceptSessionForQueue(ctx, "sq4", byID, nil)
	if err != nil {
		t.Fatalf("accept %s by id: %v", byID, err)
	}
	short, cancelShort := context.WithTimeout(ctx, 5*time.Second)
	rn, err := client.AcceptNextSessionForQueue(short, "sq4", nil)
	cancelShort()
	if err != nil || rn.SessionID() != next {
		t.Fatalf("accept next: %v, want session %s", err, next)
	}
	for _, rr := range []*azservicebus.SessionReceiver{r, rb, rn} {
		if rr != r {
			if err := rr.CompleteMessage(ctx, receiveN(t, ctx, rr, 1)[0], nil); err != nil {
				t.Fatal(err)
			}
		}
		if err := rr.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}

	// Concurrent waiting accept-nexts, one session arriving on each
	// partition: each gets a different one.
	var waiting []chan *azservicebus.SessionReceiver
	for range parts {
		waiting = append(waiting, acceptAsync())
	}
	time.Sleep(time.Second)
	want := map[string]bool{}
	for p := range uint32(parts) {
		sid := sessionOnPartition("late", p, parts)
		want[sid] = true
		sendSession(t, ctx, snd, sid, "l")
	}
	for _, w := range waiting {
		rr := <-w
		if rr == nil {
			t.FailNow()
		}
		if !want[rr.SessionID()] {
			t.Fatalf("accept next got session %s twice or unexpected", rr.SessionID())
		}
		delete(want, rr.SessionID())
		defer rr.Close(ctx)
	}

	short, cancelShort = context.WithTimeout(ctx, 3*time.Second)
	defer cancelShort()
	start := time.Now()
	_, err = client.AcceptNextSessionForQueue(short, "sq4", nil)
	var sbErr *azservicebus.Error
	if !errors.As(err, &sbErr) || sbErr.Code != azservicebus.CodeTimeout {
		t.Fatalf("accept next with none available: %v, want a timeout", err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("accept next answered after %v, past the client's 3s", took)
	}
}

// An accept-next whose client names no timeout waits the front-end's
// SessionAcceptWait (`quorumbus dev -session-accept-wait`), then times
// out; session ids over 128 characters (on send, schedule and accept)
// and a state over the entity's maximum message size are refused with a
// clear error, and nothing is stored.
func TestDevSessionAcceptWaitAndLimits(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := cluster.StartDev(ctx, cluster.DevOptions{
		DataDir: t.TempDir(), AMQPAddr: "127.0.0.1:0", Nodes: 3, Groups: 3, CacheMB: 16, LogLevel: "error",
		SessionAcceptWait: 1500 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	q := cluster.QueueSpec{Name: "sq", Props: &placementpb.QueueProperties{RequiresSession: true, MaxMessageSizeInKilobytes: 1}}
	if err := cluster.CreateQueues(ctx, c.NodeAddrs, c.Creds, []cluster.QueueSpec{q}, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := c.Router.Entity("sq"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("queue sq never reached the routing table")
		}
	}
	client := devClient(t, c)
	snd, r := warmSessions(t, ctx, client, "sq")
	// No deadline on the context: the SDK sends no com.microsoft:timeout.
	start := time.Now()
	_, err = client.AcceptNextSessionForQueue(context.Background(), "sq", nil)
	var sbErr *azservicebus.Error
	if !errors.As(err, &sbErr) || sbErr.Code != azservicebus.CodeTimeout {
		t.Fatalf("accept next with none available and no client timeout: %v, want a timeout", err)
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Fatalf("waited %v", took)
	}

	long := strings.Repeat("é", 129) // 129 characters, 258 bytes
	err = snd.SendMessage(ctx, &azservicebus.Message{SessionID: &long, Body: []byte("x")}, nil)
	if err == nil || !strings.Contains(err.Error(), "at most 128") {
		t.Fatalf("send with a session id of 129 characters: %v", err)
	}
	// Scheduled: the whole request is refused, the message with a valid
	// session id in it too. The SDK takes a 400 from $management for a
	// connection failure and retries it (about 30 s with its defaults,
	// against Service Bus too): the refusals below go through a client
	// that does not.
	once, err := azservicebus.NewClientFromConnectionString(cluster.ConnectionString(c.AMQPAddr),
		&azservicebus.ClientOptions{RetryOptions: azservicebus.RetryOptions{MaxRetries: -1}})
	if err != nil {
		t.Fatal(err)
	}
	defer once.Close(ctx)
	osnd, err := once.NewSender("sq", nil)
	if err != nil {
		t.Fatal(err)
	}
	warm := "warm"
	_, err = osnd.ScheduleMessages(ctx, []*azservicebus.Message{
		{SessionID: &warm, Body: []byte("scheduled with a refused one")},
		{SessionID: &long, Body: []byte("x")},
	}, time.Now().Add(time.Hour), nil)
	if err == nil || !strings.Contains(err.Error(), "at most 128") {
		t.Fatalf("schedule with a session id of 129 characters: %v", err)
	}
	if peeked, err := r.PeekMessages(ctx, 10, nil); err != nil || len(peeked) != 1 || string(peeked[0].Body) != "w" {
		t.Fatalf("session warm after the refused schedule: %q %v, want only w", bodiesOf(peeked), err)
	}
	ok128 := strings.Repeat("é", 128)
	sendSession(t, ctx, snd, ok128, "y")
	if _, err := client.AcceptSessionForQueue(ctx, "sq", long, nil); err == nil || !strings.Contains(err.Error(), "at most 128") {
		t.Fatalf("accept a session id of 129 characters: %v", err)
	}

	s128, err := once.AcceptSessionForQueue(ctx, "sq", ok128, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s128.SetSessionState(ctx, make([]byte, 1024), nil); err != nil {
		t.Fatalf("a state of the maximum message size: %v", err)
	}
	if err := s128.SetSessionState(ctx, make([]byte, 1025), nil); err == nil || !strings.Contains(err.Error(), "maximum message size") {
		t.Fatalf("a state over the maximum message size: %v", err)
	}
	if st, err := s128.GetSessionState(ctx, nil); err != nil || len(st) != 1024 {
		t.Fatalf("state after the refused set: %d bytes, %v", len(st), err)
	}
	pager := client.NewListSessionsForQueuePager("sq", nil)
	var listed []string
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		listed = append(listed, page.Sessions...)
	}
	if slices.Sort(listed); !slices.Equal(listed, []string{"warm", ok128}) {
		t.Fatalf("listed %q: the refused session must not be there", listed)
	}
}

// TestDevSessionAcceptWaitOfTheEntity: an entity's own accept-next wait
// (quorumbus's SessionAcceptWait) shortens the front-end's minute for a
// client that names no timeout; another entity keeps the minute.
func TestDevSessionAcceptWaitOfTheEntity(t *testing.T) {
	t.Parallel()
	c := startTestDev(t, cluster.QueueSpec{Name: "impatient", Props: &placementpb.QueueProperties{RequiresSession: true, SessionAcceptWaitMs: proto.Int64(1_000)}})
	e, err := c.Router.Entity("impatient")
	if err != nil || e.GetProperties().GetSessionAcceptWaitMs() != 1_000 {
		t.Fatalf("the routing table's entity: %v, %v; want a wait of 1,000 ms", e, err)
	}
	client := devClient(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	warmSessions(t, ctx, client, "impatient")

	start := time.Now() // no deadline: the SDK sends no com.microsoft:timeout
	_, err = client.AcceptNextSessionForQueue(context.Background(), "impatient", nil)
	took := time.Since(start)
	var sbErr *azservicebus.Error
	if !errors.As(err, &sbErr) || sbErr.Code != azservicebus.CodeTimeout {
		t.Fatalf("accept next with none available: %v, want a timeout", err)
	}
	if took < 900*time.Millisecond || took > 20*time.Second {
		t.Fatalf("answered after %v, want about the entity's second", took)
	}
}

// warmSessions sends a message of session "warm" to queue, which then
// has reached its partition, accepts that session next and takes the
// message (peek-locked, not settled), so that no other session is
// available; it returns the sender and the receiver of "warm".
func warmSessions(t *testing.T, ctx context.Context, client *azservicebus.Client, queue string) (*azservicebus.Sender, *azservicebus.SessionReceiver) {
	t.Helper()
	snd, err := client.NewSender(queue, nil)
	if err != nil {
		t.Fatal(err)
	}
	sendSession(t, ctx, snd, "warm", "w")
	r, err := client.AcceptNextSessionForQueue(ctx, queue, nil)
	if err != nil || r.SessionID() != "warm" {
		t.Fatalf("accept next: %v", err)
	}
	receiveN(t, ctx, r, 1)
	return snd, r
}
