package frontend_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/quorumbus/quorumbus/frontend"
	"github.com/quorumbus/quorumbus/placement/sas"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// These tests check the front-end's Service Bus protocol with the official
// Go SDK against memBackend, a single-process stand-in for the partition
// groups that keeps just enough state (FIFO, locks, delivery counts). The
// replicated path is tested end to end in cmd/quorumbus.

type memBackend struct {
	mu       sync.Mutex
	entities map[string]*placementpb.Entity
	msgs     map[uint64][]*partitionpb.Message // by entity id, in sequence order
	seq      map[uint64]uint64
	changed  chan struct{}
	now      func() time.Time
}

func newMemBackend(queues ...string) *memBackend {
	b := &memBackend{entities: map[string]*placementpb.Entity{}, msgs: map[uint64][]*partitionpb.Message{}, seq: map[uint64]uint64{}, changed: make(chan struct{}), now: time.Now}
	for i, q := range queues {
		b.entities[strings.ToLower(q)] = &placementpb.Entity{Id: uint64(i + 1), Name: q, PartitionGroups: []uint64{1}, Properties: &placementpb.QueueProperties{}}
	}
	return b
}

func (b *memBackend) Entity(name string) (*placementpb.Entity, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if e := b.entities[strings.ToLower(name)]; e != nil {
		return e, nil
	}
	return nil, frontend.ErrEntityNotFound
}

func (b *memBackend) Send(_ context.Context, e *placementpb.Entity, _ uint32, msgs []*partitionpb.NewMessage) (*partitionpb.Result, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	res := &partitionpb.Result{}
	for _, m := range msgs {
		b.seq[e.Id]++
		b.msgs[e.Id] = append(b.msgs[e.Id], &partitionpb.Message{
			SequenceNumber: b.seq[e.Id], EnqueuedTimeMs: b.now().UnixMilli(), MessageId: m.MessageId,
			Header: m.Header, Annotations: m.Annotations, Bare: m.Bare,
		})
		res.SequenceNumbers = append(res.SequenceNumbers, b.seq[e.Id])
	}
	close(b.changed)
	b.changed = make(chan struct{})
	return res, nil
}

func (b *memBackend) Receive(ctx context.Context, e *placementpb.Entity, req *partitionpb.ReceiveRequest) (*partitionpb.Result, error) {
	deadline := time.After(time.Duration(req.WaitMs) * time.Millisecond)
	for {
		b.mu.Lock()
		res := &partitionpb.Result{}
		now := b.now()
		kept := b.msgs[e.Id][:0]
		available := false // a wait-only receive (max_count 0) returns once one is
		for _, m := range b.msgs[e.Id] {
			free := len(m.LockToken) == 0 || m.LockedUntilMs <= now.UnixMilli()
			available = available || free
			if len(res.Messages) < int(req.MaxCount) && free {
				if len(m.LockToken) > 0 { // lock expired
					m.DeliveryCount++
				}
				if req.ReceiveAndDelete {
					res.Messages = append(res.Messages, m)
					continue
				}
				m.LockToken = binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, m.SequenceNumber), uint64(now.UnixNano()))
				m.LockedUntilMs = now.Add(time.Minute).UnixMilli()
				res.Messages = append(res.Messages, m)
			}
			kept = append(kept, m)
		}
		b.msgs[e.Id] = kept
		changed := b.changed
		b.mu.Unlock()
		if len(res.Messages) > 0 || req.WaitMs == 0 || (req.MaxCount == 0 && available) {
			return res, nil
		}
		select {
		case <-changed:
		case <-deadline:
			return res, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (b *memBackend) Settle(_ context.Context, e *placementpb.Entity, s *partitionpb.Settle) (*partitionpb.Result, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, t := range s.LockTokens {
		i := b.find(e.Id, t)
		if i < 0 {
			return &partitionpb.Result{Code: partitionpb.ResultCode_RESULT_LOCK_LOST}, nil
		}
		m := b.msgs[e.Id][i]
		switch s.Disposition {
		case partitionpb.Disposition_DISPOSITION_COMPLETE:
			b.msgs[e.Id] = append(b.msgs[e.Id][:i], b.msgs[e.Id][i+1:]...)
		case partitionpb.Disposition_DISPOSITION_ABANDON:
			m.LockToken, m.DeliveryCount = nil, m.DeliveryCount+1
		default:
			m.LockToken = nil
		}
	}
	close(b.changed)
	b.changed = make(chan struct{})
	return &partitionpb.Result{}, nil
}

func (b *memBackend) find(entity uint64, token []byte) int {
	for i, m := range b.msgs[entity] {
		if string(m.LockToken) == string(token) && m.LockedUntilMs > b.now().UnixMilli() {
			return i
		}
	}
	return -1
}

func (b *memBackend) RenewLocks(context.Context, *placementpb.Entity, *partitionpb.RenewLocks) (*partitionpb.Result, error) {
	return &partitionpb.Result{Code: partitionpb.ResultCode_RESULT_INVALID}, nil
}

func (b *memBackend) Peek(context.Context, *placementpb.Entity, *partitionpb.PeekRequest) ([]*partitionpb.Message, error) {
	return nil, nil
}

func (b *memBackend) CancelScheduled(context.Context, *placementpb.Entity, *partitionpb.CancelScheduled) (*partitionpb.Result, error) {
	return &partitionpb.Result{}, nil
}

func (b *memBackend) ReceiveDeferred(context.Context, *placementpb.Entity, *partitionpb.ReceiveDeferredRequest) (*partitionpb.Result, error) {
	return &partitionpb.Result{Code: partitionpb.ResultCode_RESULT_INVALID}, nil
}

func (b *memBackend) Serving(*placementpb.Entity, uint32) bool { return true }

func (b *memBackend) left(queue string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.msgs[b.entities[queue].Id])
}

func startFrontend(t *testing.T, b frontend.Backend) string {
	t.Helper()
	_, addr := serveFrontend(t, frontend.Config{Backend: b, Rules: devRules(t), ReceiveWait: 500 * time.Millisecond})
	return addr
}

// serveFrontend starts a front-end of cfg on a loopback port, shut down
// when the test ends, and returns it and its address.
func serveFrontend(t *testing.T, cfg frontend.Config) (*frontend.Server, string) {
	t.Helper()
	srv, err := frontend.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
	return srv, ln.Addr().String()
}

// devRules is the emulator's rule, which sdkClient's connection string and
// the raw clients' SASL PLAIN (sas.DevKeyName, sas.DevKey) use.
func devRules(testing.TB) frontend.RuleSource { return frontend.StaticRules(sas.DevRuleset()) }

func sdkClient(t *testing.T, addr string) *azservicebus.Client {
	t.Helper()
	cs := fmt.Sprintf("Endpoint=sb://%s;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true;", addr)
	c, err := azservicebus.NewClientFromConnectionString(cs, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

func TestSDKSendReceiveComplete(t *testing.T) {
	b := newMemBackend("q")
	c := sdkClient(t, startFrontend(t, b))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	snd, err := c.NewSender("q", nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if err := snd.SendMessage(ctx, &azservicebus.Message{Body: []byte(fmt.Sprint(i)), ApplicationProperties: map[string]any{"i": int64(i)}}, nil); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	batch, err := snd.NewMessageBatch(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 20; i < 30; i++ {
		if err := batch.AddMessage(&azservicebus.Message{Body: []byte(fmt.Sprint(i))}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := snd.SendMessageBatch(ctx, batch, nil); err != nil {
		t.Fatal(err)
	}

	rcv, err := c.NewReceiverForQueue("q", nil)
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for seen < 30 {
		msgs, err := rcv.ReceiveMessages(ctx, 30-seen, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			if string(m.Body) != fmt.Sprint(seen) {
				t.Fatalf("message %d has body %q", seen, m.Body)
			}
			if m.SequenceNumber == nil || *m.SequenceNumber != int64(seen+1) {
				t.Fatalf("message %d: sequence number %v", seen, m.SequenceNumber)
			}
			if m.DeliveryCount != 1 || m.EnqueuedTime == nil || m.LockedUntil == nil || m.MessageID == "" {
				t.Fatalf("message %d: delivery count %d, enqueued %v, locked until %v, id %q", seen, m.DeliveryCount, m.EnqueuedTime, m.LockedUntil, m.MessageID)
			}
			if err := rcv.CompleteMessage(ctx, m, nil); err != nil {
				t.Fatalf("complete %d: %v", seen, err)
			}
			seen++
		}
	}
	if n := b.left("q"); n != 0 {
		t.Fatalf("%d messages left after completing all", n)
	}
}

func TestSDKAbandonRedelivers(t *testing.T) {
	b := newMemBackend("q")
	c := sdkClient(t, startFrontend(t, b))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	snd, _ := c.NewSender("q", nil)
	if err := snd.SendMessage(ctx, &azservicebus.Message{Body: []byte("x")}, nil); err != nil {
		t.Fatal(err)
	}
	rcv, _ := c.NewReceiverForQueue("q", nil)
	msgs, err := rcv.ReceiveMessages(ctx, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := rcv.AbandonMessage(ctx, msgs[0], nil); err != nil {
		t.Fatal(err)
	}
	msgs, err = rcv.ReceiveMessages(ctx, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if msgs[0].DeliveryCount != 2 {
		t.Fatalf("delivery count %d after one abandon, want 2", msgs[0].DeliveryCount)
	}
	if err := rcv.CompleteMessage(ctx, msgs[0], nil); err != nil {
		t.Fatal(err)
	}
}

func TestSDKReceiveAndDelete(t *testing.T) {
	b := newMemBackend("q")
	c := sdkClient(t, startFrontend(t, b))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	snd, _ := c.NewSender("q", nil)
	for range 5 {
		if err := snd.SendMessage(ctx, &azservicebus.Message{Body: []byte("x")}, nil); err != nil {
			t.Fatal(err)
		}
	}
	rcv, _ := c.NewReceiverForQueue("q", &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
	got := 0
	for got < 5 {
		msgs, err := rcv.ReceiveMessages(ctx, 5, nil)
		if err != nil {
			t.Fatal(err)
		}
		got += len(msgs)
	}
	if n := b.left("q"); n != 0 {
		t.Fatalf("%d left", n)
	}
}

func TestSDKUnknownEntity(t *testing.T) {
	c := sdkClient(t, startFrontend(t, newMemBackend("q")))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	snd, _ := c.NewSender("nope", nil)
	err := snd.SendMessage(ctx, &azservicebus.Message{Body: []byte("x")}, nil)
	if err == nil || !strings.Contains(err.Error(), "amqp:not-found") {
		t.Fatalf("send to an unknown queue: %v, want amqp:not-found", err)
	}
}
