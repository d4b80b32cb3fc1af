package frontend_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	goamqp "github.com/Azure/go-amqp"

	"github.com/quorumbus/quorumbus/placement/sas"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// slowBackend answers sends late, so that a link's transfers queue up and
// are packed, and records the largest request.
type slowBackend struct {
	*memBackend
	mu      sync.Mutex
	largest int
}

func (b *slowBackend) Send(ctx context.Context, e *placementpb.Entity, part uint32, msgs []*partitionpb.NewMessage) (*partitionpb.Result, error) {
	n := 0
	for _, m := range msgs {
		n += len(m.Header) + len(m.Annotations) + len(m.Bare)
	}
	b.mu.Lock()
	b.largest = max(b.largest, n)
	b.mu.Unlock()
	time.Sleep(20 * time.Millisecond)
	return b.memBackend.Send(ctx, e, part, msgs)
}

// TestSendPackingBoundedInBytes: the transfers of a busy link are packed
// into partition requests of about SendBatchBytes (1 MiB), not of
// SendBatch messages whatever their size.
func TestSendPackingBoundedInBytes(t *testing.T) {
	b := &slowBackend{memBackend: newMemBackend("q")}
	addr := startFrontend(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	snd := amqpSender(t, ctx, addr, "q")
	const senders, each, size = 32, 3, 200 << 10
	var wg sync.WaitGroup
	for range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				if err := snd.Send(ctx, goamqp.NewMessage(make([]byte, size)), nil); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if got := b.left("q"); got != senders*each {
		t.Fatalf("%d messages stored, want %d", got, senders*each)
	}
	// The transfer that reaches 1 MiB is the last of its request.
	if limit := 1<<20 + size + 1024; b.largest > limit {
		t.Fatalf("a partition request of %d bytes, over %d", b.largest, limit)
	}
}

// gatedBackend holds every send until its gate closes, counting the
// messages that arrived meanwhile.
type gatedBackend struct {
	*memBackend
	gate    chan struct{}
	mu      sync.Mutex
	arrived int
}

func (b *gatedBackend) Send(ctx context.Context, e *placementpb.Entity, part uint32, msgs []*partitionpb.NewMessage) (*partitionpb.Result, error) {
	b.mu.Lock()
	b.arrived += len(msgs)
	b.mu.Unlock()
	<-b.gate
	return b.memBackend.Send(ctx, e, part, msgs)
}

// TestLinkCreditFollowsMessageSize: a link to a queue that allows 100 MB
// messages lets a client have 3 unsettled, not the engine's 1,000.
func TestLinkCreditFollowsMessageSize(t *testing.T) {
	mem := newMemBackend("big")
	e, _ := mem.Entity("big")
	e.Properties = &placementpb.QueueProperties{MaxMessageSizeInKilobytes: 100 << 10}
	b := &gatedBackend{memBackend: mem, gate: make(chan struct{})}
	addr := startFrontend(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	snd := amqpSender(t, ctx, addr, "big")
	var wg sync.WaitGroup
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := snd.Send(ctx, goamqp.NewMessage([]byte("x")), nil); err != nil {
				t.Error(err)
			}
		}()
	}
	count := func() int {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.arrived
	}
	for count() < 3 && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // a fourth, if the credit let it, arrives meanwhile
	arrived := count()
	close(b.gate)
	wg.Wait()
	if arrived != 3 {
		t.Fatalf("%d messages arrived before any was settled, want 3 (the credit for 256 MiB of 100 MB messages)", arrived)
	}
}

// amqpSender attaches a go-amqp sender to queue on a new connection that
// closes when the test ends.
func amqpSender(t *testing.T, ctx context.Context, addr, queue string) *goamqp.Sender {
	t.Helper()
	conn, err := goamqp.Dial(ctx, "amqp://"+addr, &goamqp.ConnOptions{SASLType: goamqp.SASLTypePlain(sas.DevKeyName, sas.DevKey)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	s, err := conn.NewSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	snd, err := s.NewSender(ctx, queue, nil)
	if err != nil {
		t.Fatal(err)
	}
	return snd
}

// TestPartitionKeyRules: a message whose PartitionKey is not its
// SessionId is refused with not-allowed (which the SDKs do not retry) and
// nothing is stored, as is a batch whose keyed messages belong to
// different partitions; the same key twice, or unkeyed messages beside a
// keyed one, are accepted.
func TestPartitionKeyRules(t *testing.T) {
	b := newMemBackend("pq")
	b.entities["pq"].PartitionGroups = []uint64{1, 2, 3, 4}
	addr := startFrontend(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	snd := amqpSender(t, ctx, addr, "pq")
	keyed := func(partitionKey, session string) *goamqp.Message {
		m := goamqp.NewMessage([]byte("x"))
		m.Annotations = goamqp.Annotations{"x-opt-partition-key": partitionKey}
		if session != "" {
			m.Properties = &goamqp.MessageProperties{GroupID: &session}
		}
		return m
	}
	err := snd.Send(ctx, keyed("a", "b"), nil)
	var amqpErr *goamqp.Error
	if !errors.As(err, &amqpErr) || amqpErr.Condition != goamqp.ErrCondNotAllowed {
		t.Fatalf("PartitionKey a, SessionId b: %v, want %s", err, goamqp.ErrCondNotAllowed)
	}
	if got := b.left("pq"); got != 0 {
		t.Fatalf("%d messages stored after the refusal", got)
	}
	if err := snd.Send(ctx, keyed("a", "a"), nil); err != nil {
		t.Fatalf("PartitionKey and SessionId both a: %v", err)
	}
	if err := snd.Send(ctx, keyed("a", ""), nil); err != nil {
		t.Fatalf("PartitionKey a: %v", err)
	}
	if got := b.left("pq"); got != 2 {
		t.Fatalf("%d messages stored, want 2", got)
	}

	// Batches (Service Bus batch format): keys of two partitions are
	// refused; one key with an unkeyed message is accepted.
	other := "b"
	for partitionpb.PartitionForKey(other, 4) == partitionpb.PartitionForKey("a", 4) {
		other += "b"
	}
	batch := func(msgs ...*goamqp.Message) *goamqp.Message {
		var data [][]byte
		for _, m := range msgs {
			bin, err := m.MarshalBinary()
			if err != nil {
				t.Fatal(err)
			}
			data = append(data, bin)
		}
		return &goamqp.Message{Format: 0x80013700, Data: data}
	}
	err = snd.Send(ctx, batch(keyed("a", ""), keyed(other, "")), nil)
	if !errors.As(err, &amqpErr) || amqpErr.Condition != goamqp.ErrCondNotAllowed {
		t.Fatalf("a batch over two partitions: %v, want %s", err, goamqp.ErrCondNotAllowed)
	}
	if err := snd.Send(ctx, batch(keyed("a", ""), goamqp.NewMessage([]byte("unkeyed"))), nil); err != nil {
		t.Fatalf("a keyed and an unkeyed message in one batch: %v", err)
	}
	if got := b.left("pq"); got != 4 {
		t.Fatalf("%d messages stored, want 4", got)
	}
}

// meetBackend is a partBackend whose sends take a while, and that records
// the most partitions that had sends in flight at once.
type meetBackend struct {
	*partBackend
	mu       sync.Mutex
	inFlight map[uint32]int
	most     int
}

func (b *meetBackend) Send(ctx context.Context, e *placementpb.Entity, p uint32, msgs []*partitionpb.NewMessage) (*partitionpb.Result, error) {
	b.mu.Lock()
	b.inFlight[p]++
	b.most = max(b.most, len(b.inFlight))
	b.mu.Unlock()
	time.Sleep(10 * time.Millisecond)
	b.mu.Lock()
	if b.inFlight[p]--; b.inFlight[p] == 0 {
		delete(b.inFlight, p)
	}
	b.mu.Unlock()
	return b.partBackend.Send(ctx, e, p, msgs)
}

func (b *meetBackend) SendOnce(ctx context.Context, e *placementpb.Entity, p uint32, msgs []*partitionpb.NewMessage) (*partitionpb.Result, error) {
	return b.Send(ctx, e, p, msgs)
}

// TestUnkeyedSendsOfLinksMeet: the unkeyed sends of four links (two
// connections of two) to a partitioned queue, concurrent, go to one
// partition at a time, so that the node packs them into one group's
// entries, rather than each link's to a partition of its own (8-11 Raft
// entries per 1,000 messages against a plain queue's 3); one link's
// sends one after another still go round-robin.
func TestUnkeyedSendsOfLinksMeet(t *testing.T) {
	const parts = 16
	b := &meetBackend{partBackend: newPartBackend(parts), inFlight: map[uint32]int{}}
	addr := startFrontend(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var links []*goamqp.Sender
	for range 2 {
		conn, err := goamqp.Dial(ctx, "amqp://"+addr, &goamqp.ConnOptions{SASLType: goamqp.SASLTypePlain(sas.DevKeyName, sas.DevKey)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		for range 2 {
			s, err := conn.NewSession(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			snd, err := s.NewSender(ctx, "pq", nil)
			if err != nil {
				t.Fatal(err)
			}
			links = append(links, snd)
		}
	}
	const each, senders = 50, 8 // per link: 8 sends in flight
	var wg sync.WaitGroup
	for _, snd := range links {
		for range senders {
			wg.Go(func() {
				for i := range each {
					if err := snd.Send(ctx, goamqp.NewMessage([]byte(fmt.Sprint("m", i))), nil); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	b.mu.Lock()
	most := b.most
	b.mu.Unlock()
	if most > 2 {
		t.Errorf("the concurrent unkeyed sends of %d links had %d partitions in flight at once, want at most 2", len(links), most)
	}

	before := b.stored()
	for i := range parts {
		if err := links[0].Send(ctx, goamqp.NewMessage([]byte(fmt.Sprint("alone", i))), nil); err != nil {
			t.Fatal(err)
		}
	}
	reached := 0
	for p, n := range b.stored() {
		if n > before[p] {
			reached++
		}
	}
	if reached != parts {
		t.Errorf("%d sends one after another reached %d partitions, want %d", parts, reached, parts)
	}
}
