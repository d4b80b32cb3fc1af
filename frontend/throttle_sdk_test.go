package frontend_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	goamqp "github.com/Azure/go-amqp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/quorumbus/quorumbus/frontend"
	"github.com/quorumbus/quorumbus/placement/sas"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// TestSDKThrottledBurstDelivered: a burst of sends beyond the namespace's
// credits is refused with server-busy in Azure's words, retried by the Go
// SDK with its default policy and finally delivered, each message once;
// receiving waits for credits instead of failing; the throttled counter
// moves for the entity.
func TestSDKThrottledBurstDelivered(t *testing.T) {
	b := newMemBackend("q")
	srv, addr := serveFrontend(t, frontend.Config{Backend: b, Rules: devRules(t), ReceiveWait: 500 * time.Millisecond, ThrottleCredits: 10})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// The raw refusal first: what the SDK sees and retries.
	snd := amqpSender(t, ctx, addr, "q")
	var busy *goamqp.Error
	for i := 0; i < 50 && busy == nil; i++ {
		err := snd.Send(ctx, goamqp.NewMessage([]byte("raw")), nil)
		if err != nil {
			if ae, ok := err.(*goamqp.Error); ok {
				busy = ae
				continue
			}
			t.Fatal(err)
		}
	}
	if busy == nil || busy.Condition != "com.microsoft:server-busy" ||
		!contains(busy.Description, "The request was terminated because the entity is being throttled. Error code: 50009. Please wait 2 seconds and try again.") ||
		!contains(busy.Description, "TrackingId:") {
		t.Fatalf("past the credits: %v, want server-busy in Azure's words", busy)
	}
	raw := b.left("q")

	c := sdkClient(t, addr)
	sender, err := c.NewSender("q", nil)
	if err != nil {
		t.Fatal(err)
	}
	const burst = 30
	var wg sync.WaitGroup
	errs := make(chan error, burst)
	for i := range burst {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- sender.SendMessage(ctx, &azservicebus.Message{Body: []byte(fmt.Sprint(i))}, nil)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("a throttled send was not retried to success: %v", err)
		}
	}
	if got := b.left("q") - raw; got != burst {
		t.Fatalf("%d of the burst's %d messages stored", got, burst)
	}
	rcv, err := c.NewReceiverForQueue("q", &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for len(seen) < burst {
		msgs, err := rcv.ReceiveMessages(ctx, burst, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			if string(m.Body) != "raw" {
				seen[string(m.Body)]++
			}
		}
	}
	for body, n := range seen {
		if n != 1 {
			t.Fatalf("message %s received %d times", body, n)
		}
	}
	if got := srv.Throttled()["q"]; got == 0 {
		t.Fatal("the throttled counter did not move")
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// filteredBackend makes one entity of a memBackend a topic with a number
// of filters, as the router reports them from the routing table.
type filteredBackend struct {
	*memBackend
	filters int
}

func (b filteredBackend) Filters(topic string) int { return b.filters }

// TestSDKTopicSendsPayPerFilter: a message sent to a topic costs a credit
// per filter it is evaluated against besides its own (seed 003), so a
// topic with 49 filters runs through a budget of 100 credits a second
// within a few sends, which the Go SDK retries to success; as many sends
// to a queue (1 credit each) are never throttled.
func TestSDKTopicSendsPayPerFilter(t *testing.T) {
	mem := newMemBackend("q", "t")
	mem.entities["t"].Kind = placementpb.EntityKind_ENTITY_KIND_TOPIC
	b := filteredBackend{mem, 49}
	srv, addr := serveFrontend(t, frontend.Config{Backend: b, Rules: devRules(t), ReceiveWait: 500 * time.Millisecond, ThrottleCredits: 100})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := sdkClient(t, addr)
	const n = 8 // 8 credits to the queue; 400 to the topic
	for _, entity := range []string{"q", "t"} {
		snd, err := c.NewSender(entity, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i := range n {
			if err := snd.SendMessage(ctx, &azservicebus.Message{Body: []byte(fmt.Sprint(i))}, nil); err != nil {
				t.Fatalf("send %d to %s: %v", i, entity, err)
			}
		}
		snd.Close(ctx)
	}
	if got := srv.Throttled()["q"]; got != 0 {
		t.Fatalf("%d sends of 1 credit each to the queue were throttled %d times", n, got)
	}
	if got := srv.Throttled()["t"]; got == 0 {
		t.Fatal("sends of 50 credits each to the topic were never throttled")
	}
	if mem.left("q") != n || mem.left("t") != n {
		t.Fatalf("stored %d in q and %d in t, want %d each", mem.left("q"), mem.left("t"), n)
	}
}

// heldBackend holds every Send until release is closed, as partitions
// that fall behind (a leader's long proposal queue) keep requests in
// flight.
type heldBackend struct {
	*memBackend
	release chan struct{}
	arrived *atomic.Int64 // messages of the requests held so far
}

func (b heldBackend) Send(ctx context.Context, e *placementpb.Entity, p uint32, msgs []*partitionpb.NewMessage) (*partitionpb.Result, error) {
	b.arrived.Add(int64(len(msgs)))
	select {
	case <-b.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return b.memBackend.Send(ctx, e, p, msgs)
}

// TestSDKPendingSendsBound: the resource-based mode (no credits): once the
// front-end has MaxPendingSends messages in flight to partitions that do
// not answer, a new send is refused with server-busy in Azure's words,
// which the Go SDK retries until the partitions catch up; nothing is lost
// and the throttled counter moves.
func TestSDKPendingSendsBound(t *testing.T) {
	mem := newMemBackend("q")
	b := heldBackend{mem, make(chan struct{}), new(atomic.Int64)}
	srv, addr := serveFrontend(t, frontend.Config{Backend: b, Rules: devRules(t), ReceiveWait: 500 * time.Millisecond, MaxPendingSends: 4})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// Four messages in flight, held by the partition.
	var held sync.WaitGroup
	heldErrs := make(chan error, 4)
	for i := range 4 {
		snd := amqpSender(t, ctx, addr, "q")
		held.Add(1)
		go func() {
			defer held.Done()
			heldErrs <- snd.Send(ctx, goamqp.NewMessage([]byte(fmt.Sprint("held", i))), nil)
		}()
	}
	snd := amqpSender(t, ctx, addr, "q")
	for b.arrived.Load() < 4 {
		if ctx.Err() != nil {
			t.Fatal("the four sends never reached the partition")
		}
		time.Sleep(10 * time.Millisecond)
	}
	var busy *goamqp.Error
	for busy == nil {
		err := snd.Send(ctx, goamqp.NewMessage([]byte("refused")), nil)
		if err == nil {
			t.Fatal("a send passed while the partition held every request")
		}
		if ae, ok := err.(*goamqp.Error); ok && ae.Condition == "com.microsoft:server-busy" {
			busy = ae
			break
		}
		t.Fatalf("past the pending bound: %v, want server-busy", err)
	}
	if !contains(busy.Description, "Error code: 50009") {
		t.Fatalf("server-busy says %q", busy.Description)
	}

	// The SDK retries until the partition answers again.
	c := sdkClient(t, addr)
	sender, err := c.NewSender("q", nil)
	if err != nil {
		t.Fatal(err)
	}
	sdkErr := make(chan error, 1)
	go func() { sdkErr <- sender.SendMessage(ctx, &azservicebus.Message{Body: []byte("retried")}, nil) }()
	deadline := time.Now().Add(30 * time.Second)
	for srv.Throttled()["q"] < 2 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond) // the SDK's first try is refused too
	}
	close(b.release)
	held.Wait()
	close(heldErrs)
	for err := range heldErrs {
		if err != nil {
			t.Fatalf("a held send: %v", err)
		}
	}
	if err := <-sdkErr; err != nil {
		t.Fatalf("the SDK's send was not retried to success: %v", err)
	}
	if got := mem.left("q"); got != 5 {
		t.Fatalf("%d messages stored, want the 4 held and the SDK's", got)
	}
	if got := srv.Throttled()["q"]; got < 2 {
		t.Fatalf("throttled counter %d, want the raw refusal and the SDK's", got)
	}
}

// busyBackend refuses the first refusals sends as a partition leader whose
// proposal queue is full does, storing nothing.
type busyBackend struct {
	*memBackend
	refusals *atomic.Int64
}

func (b busyBackend) Send(ctx context.Context, e *placementpb.Entity, p uint32, msgs []*partitionpb.NewMessage) (*partitionpb.Result, error) {
	if b.refusals.Add(-1) >= 0 {
		return nil, fmt.Errorf("%w: proposal queue full", frontend.ErrServerBusy)
	}
	return b.memBackend.Send(ctx, e, p, msgs)
}

// TestSDKBusyPartitionLeader: a partition leader that refuses a send
// because its proposal queue is full (credits off, no front-end bound)
// gives the client server-busy in Azure's words, which the Go SDK retries
// with its default policy until the send is stored once; the refusals are
// counted as throttled.
func TestSDKBusyPartitionLeader(t *testing.T) {
	mem := newMemBackend("q")
	refusals := new(atomic.Int64)
	refusals.Store(2)
	srv, addr := serveFrontend(t, frontend.Config{Backend: busyBackend{mem, refusals}, Rules: devRules(t), ReceiveWait: 500 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	raw := amqpSender(t, ctx, addr, "q")
	err := raw.Send(ctx, goamqp.NewMessage([]byte("refused")), nil)
	var ae *goamqp.Error
	if !errors.As(err, &ae) || ae.Condition != "com.microsoft:server-busy" || !contains(ae.Description, "Error code: 50009") {
		t.Fatalf("a send the partition leader refused as busy: %v, want server-busy with error code 50009", err)
	}
	sender, err := sdkClient(t, addr).NewSender("q", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := sender.SendMessage(ctx, &azservicebus.Message{Body: []byte("retried")}, nil); err != nil {
		t.Fatalf("the SDK's send was not retried to success: %v", err)
	}
	if got := mem.left("q"); got != 1 {
		t.Fatalf("%d messages stored, want only the SDK's retried one", got)
	}
	if got := srv.Throttled()["q"]; got != 2 {
		t.Fatalf("throttled counter %d, want the raw refusal and the SDK's first try", got)
	}
}

// peekBackend answers peeks with the messages a memBackend holds.
type peekBackend struct{ *memBackend }

func (b peekBackend) Peek(_ context.Context, e *placementpb.Entity, r *partitionpb.PeekRequest) ([]*partitionpb.Message, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []*partitionpb.Message
	for _, m := range b.msgs[e.Id] {
		if m.SequenceNumber >= r.FromSequenceNumber && len(out) < int(r.MaxCount) {
			out = append(out, m)
		}
	}
	return out, nil
}

// throttledMetric scrapes the front-end's Prometheus collector for
// quorumbus_throttled_requests_total of entity.
func throttledMetric(t *testing.T, srv *frontend.Server, entity string) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	if err := reg.Register(srv.Collector()); err != nil {
		t.Fatal(err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "quorumbus_throttled_requests_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "entity" && l.GetValue() == entity {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// TestSDKManagementThrottled: past the credits, $management operations
// answer 503 with server-busy's words, which the Go SDK retries with its
// default policy: concurrent peeks and schedules of ten messages (ten
// credits each, the whole second's budget) all succeed in the end, and
// the throttled counter, scraped as Prometheus does, moves for the entity.
func TestSDKManagementThrottled(t *testing.T) {
	b := peekBackend{newMemBackend("q")}
	srv, addr := serveFrontend(t, frontend.Config{Backend: b, Rules: devRules(t), ReceiveWait: 500 * time.Millisecond, ThrottleCredits: 10})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := sdkClient(t, addr)
	sender, err := c.NewSender("q", nil)
	if err != nil {
		t.Fatal(err)
	}
	batch, err := sender.NewMessageBatch(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if err := batch.AddMessage(&azservicebus.Message{Body: []byte(fmt.Sprint("m", i))}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := sender.SendMessageBatch(ctx, batch, nil); err != nil {
		t.Fatal(err)
	}

	// The raw refusal: what the SDK sees and retries.
	conn := claimConn(t, ctx, addr, sas.DevKeyName, sas.DevKey, "q")
	status, desc := int32(0), ""
	for i := 0; i < 20 && status != 503; i++ {
		status, desc = mgmtCall(t, ctx, conn, "q/$management", "com.microsoft:peek-message",
			map[string]any{"from-sequence-number": int64(1), "message-count": int32(10)})
	}
	if status != 503 || !contains(desc, "The request was terminated because the entity is being throttled. Error code: 50009. Please wait 2 seconds and try again.") {
		t.Fatalf("a peek past the credits: %d %q, want 503 in Azure's words", status, desc)
	}

	rcv, err := c.NewReceiverForQueue("q", nil)
	if err != nil {
		t.Fatal(err)
	}
	const each = 2
	var wg sync.WaitGroup
	errs := make(chan error, 2*each)
	for range each {
		wg.Add(2)
		go func() {
			defer wg.Done()
			msgs, err := rcv.PeekMessages(ctx, 10, &azservicebus.PeekMessagesOptions{FromSequenceNumber: to.Ptr(int64(1))})
			if err == nil && len(msgs) != 10 {
				err = fmt.Errorf("peeked %d messages, want 10", len(msgs))
			}
			errs <- err
		}()
		go func() {
			defer wg.Done()
			msgs := make([]*azservicebus.Message, 10)
			for i := range msgs {
				msgs[i] = &azservicebus.Message{Body: []byte("later")}
			}
			_, err := sender.ScheduleMessages(ctx, msgs, time.Now().Add(time.Hour), nil)
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("a throttled $management operation was not retried to success: %v", err)
		}
	}
	if got := b.left("q"); got != 10+each*10 {
		t.Fatalf("q holds %d messages, want the 10 sent and %d scheduled once each", got, each*10)
	}
	if got := throttledMetric(t, srv, "q"); got < 2 {
		t.Fatalf("quorumbus_throttled_requests_total{entity=\"q\"} = %v, want the raw refusal and the SDK's", got)
	}
}

// freshSecond sleeps into a second after the next, when a budget spent or
// owed has been refilled in full.
func freshSecond() {
	next := time.Unix(time.Now().Unix()+2, 0)
	time.Sleep(time.Until(next) + 10*time.Millisecond)
}

// TestSDKManagementCosts: $management operations cost what seed 003 says
// on a budget of 20 credits a second: peeks, schedules and settlements of
// one message cost 1 (fifteen pass in a row, which a flat 10 would
// refuse at the third), a peek pays for every message it returned, and
// rule operations cost 10.
func TestSDKManagementCosts(t *testing.T) {
	b := peekBackend{newMemBackend("q")}
	_, addr := serveFrontend(t, frontend.Config{Backend: b, Rules: devRules(t), ReceiveWait: 500 * time.Millisecond, ThrottleCredits: 20})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sender, err := sdkClient(t, addr).NewSender("q", nil)
	if err != nil {
		t.Fatal(err)
	}
	batch, err := sender.NewMessageBatch(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if err := batch.AddMessage(&azservicebus.Message{Body: []byte(fmt.Sprint("m", i))}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := sender.SendMessageBatch(ctx, batch, nil); err != nil {
		t.Fatal(err)
	}
	conn := claimConn(t, ctx, addr, sas.DevKeyName, sas.DevKey, "q")
	call := func(op string, body map[string]any) int32 {
		status, _ := mgmtCall(t, ctx, conn, "q/$management", op, body)
		return status
	}
	peek := func(n int32) int32 {
		return call("com.microsoft:peek-message", map[string]any{"from-sequence-number": int64(1), "message-count": n})
	}
	scheduled := func() map[string]any {
		return map[string]any{"messages": []any{map[string]any{"message-id": "s", "message": mustEncode(t, "later")}}}
	}

	for _, tc := range []struct {
		name string
		op   func() int32
	}{
		{"a peek of one message", func() int32 { return peek(1) }},
		{"a schedule of one message", func() int32 { return call("com.microsoft:schedule-message", scheduled()) }},
		{"a settlement", func() int32 {
			return call("com.microsoft:update-disposition", map[string]any{"lock-tokens": []goamqp.UUID{{1}}, "disposition-status": "completed"})
		}},
	} {
		freshSecond()
		for i := range 15 {
			if status := tc.op(); status == 503 {
				t.Fatalf("%s, number %d in a second of 20 credits: throttled", tc.name, i+1)
			}
		}
	}

	// What a peek returned is paid for: after 20 messages the second's
	// credits are gone. Rule operations cost 10: a third is refused.
	for _, tc := range []struct {
		name  string
		spend func() int32
		then  func() int32
	}{
		{"a peek after one of 20 messages", func() int32 { return peek(20) }, func() int32 { return peek(1) }},
		{"a third rule operation", func() int32 {
			if s := call("com.microsoft:enumerate-rules", map[string]any{}); s == 503 {
				return s
			}
			return call("com.microsoft:enumerate-rules", map[string]any{})
		}, func() int32 { return call("com.microsoft:enumerate-rules", map[string]any{}) }},
	} {
		for attempt := 0; ; attempt++ {
			freshSecond()
			start := time.Now().Unix()
			spent := tc.spend()
			status := tc.then()
			if time.Now().Unix() != start {
				if attempt == 5 {
					t.Fatalf("%s: never ran within one second", tc.name)
				}
				continue // a new second's credits came in between
			}
			if spent == 503 || status != 503 {
				t.Fatalf("%s: spending answered %d, then %d; want the spending to pass and then 503", tc.name, spent, status)
			}
			break
		}
	}
}

// mustEncode is an AMQP message with a string body, encoded as the
// schedule-message operation carries it.
func mustEncode(t *testing.T, body string) []byte {
	t.Helper()
	b, err := goamqp.NewMessage([]byte(body)).MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// countedBackend is a heldBackend that also counts the requests it holds.
type countedBackend struct {
	heldBackend
	requests *atomic.Int64
}

func (b countedBackend) Send(ctx context.Context, e *placementpb.Entity, p uint32, msgs []*partitionpb.NewMessage) (*partitionpb.Result, error) {
	b.requests.Add(1)
	return b.heldBackend.Send(ctx, e, p, msgs)
}

func waitFor(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		if ctx.Err() != nil {
			t.Fatalf("never: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestPendingSendsCountQueued: the pending work MaxPendingSends bounds
// counts a link's messages from when they are queued, not only once they
// are in flight to a partition: with every request slot of a link held
// by the partition, twelve more messages wait in the link's queue and
// count, so a send on another link and a schedule over $management are
// refused; when the link (or its
// connection) ends, what it queued is given back, and once the partition
// answers the pending work is back at 0.
func TestPendingSendsCountQueued(t *testing.T) {
	for _, end := range []string{"detach", "connection close"} {
		t.Run(end, func(t *testing.T) {
			mem := newMemBackend("q")
			b := countedBackend{heldBackend{mem, make(chan struct{}), new(atomic.Int64)}, new(atomic.Int64)}
			srv, addr := serveFrontend(t, frontend.Config{Backend: b, Rules: devRules(t), ReceiveWait: 500 * time.Millisecond, MaxPendingSends: 20})
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			conn, err := goamqp.Dial(ctx, "amqp://"+addr, &goamqp.ConnOptions{SASLType: goamqp.SASLTypePlain(sas.DevKeyName, sas.DevKey)})
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			s, err := conn.NewSession(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			snd, err := s.NewSender(ctx, "q", nil)
			if err != nil {
				t.Fatal(err)
			}
			sent := func() {
				go snd.Send(ctx, goamqp.NewMessage([]byte("x")), nil) // ends with the link
			}
			// Eight requests, the link's slots, held by the partition.
			for i := range 8 {
				sent()
				waitFor(t, ctx, fmt.Sprintf("request %d reaches the partition", i+1), func() bool { return b.requests.Load() == int64(i+1) })
			}
			for range 12 {
				sent()
			}
			waitFor(t, ctx, "20 messages pending", func() bool { return srv.PendingSends() == 20 })
			if got := b.arrived.Load(); got != 8 {
				t.Fatalf("%d messages reached the partition, want the 8 held", got)
			}
			other := amqpSender(t, ctx, addr, "q")
			if err := other.Send(ctx, goamqp.NewMessage([]byte("refused")), nil); !isCond(err, "com.microsoft:server-busy") {
				t.Fatalf("a send past 20 pending (8 in flight, 12 queued): %v, want server-busy", err)
			}
			mgmt := claimConn(t, ctx, addr, sas.DevKeyName, sas.DevKey, "q")
			schedule := map[string]any{"messages": []any{map[string]any{"message-id": "s", "message": mustEncode(t, "later")}}}
			if status, desc := mgmtCall(t, ctx, mgmt, "q/$management", "com.microsoft:schedule-message", schedule); status != 503 {
				t.Fatalf("a schedule past 20 pending: %d %q, want 503", status, desc)
			}
			if end == "detach" {
				cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
				snd.Close(cctx)
				ccancel()
			} else {
				conn.Close()
			}
			waitFor(t, ctx, "the queued messages given back after the "+end, func() bool { return srv.PendingSends() == 8 })
			close(b.release)
			waitFor(t, ctx, "no pending work once the partition answered", func() bool { return srv.PendingSends() == 0 })
			if got := srv.Throttled()["q"]; got != 2 {
				t.Fatalf("throttled counter %d, want the send's and the schedule's refusals", got)
			}
		})
	}
}
