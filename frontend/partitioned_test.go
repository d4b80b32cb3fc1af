package frontend_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	goamqp "github.com/Azure/go-amqp"

	"github.com/quorumbus/quorumbus/frontend"
	"github.com/quorumbus/quorumbus/placement/sas"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// partBackend is one partitioned queue, "pq", whose partitions keep their
// messages apart and number them as the partition groups do (the
// partition in the top 16 bits), and can be told to fail, to hold their
// peeks, or never to run dry.
type partBackend struct {
	mu      sync.Mutex
	e       *placementpb.Entity
	msgs    [][]*partitionpb.Message // by partition, in sequence order
	next    []uint64                 // the next counter of each partition
	changed chan struct{}
	// down partitions fail every call with ErrUnavailable; hung ones
	// answer no send until its context ends (a group whose nodes stopped
	// answering); stale keeps Serving reporting them well, as the catalog
	// does for a few seconds.
	down  map[uint32]bool
	hung  map[uint32]bool
	stale bool
	// endless partitions make messages for every receive.
	endless map[uint32]bool
	// peekHold holds a partition's peeks until the channel closes or the
	// call is cancelled; peeked records the partitions a peek reached.
	peekHold map[uint32]chan struct{}
	peeked   []uint32
	// peekAnswered, when set, is called with b.mu held as a partition
	// answers a peek.
	peekAnswered func(p uint32)
	// receiving, when set, is called (b.mu not held) as a receive that
	// takes messages reaches partition p.
	receiving func(p uint32)
}

func newPartBackend(partitions int) *partBackend {
	groups := make([]uint64, partitions)
	for i := range groups {
		groups[i] = uint64(i + 1)
	}
	return &partBackend{
		e:       &placementpb.Entity{Id: 1, Name: "pq", PartitionGroups: groups, Properties: &placementpb.QueueProperties{}},
		msgs:    make([][]*partitionpb.Message, partitions),
		next:    make([]uint64, partitions),
		changed: make(chan struct{}),
		down:    map[uint32]bool{}, hung: map[uint32]bool{}, endless: map[uint32]bool{}, peekHold: map[uint32]chan struct{}{},
	}
}

// dataBody is a bare message of one data section.
func dataBody(s string) []byte {
	return append([]byte{0x00, 0x53, 0x75, 0xa0, byte(len(s))}, s...)
}

func (b *partBackend) Entity(name string) (*placementpb.Entity, error) {
	if strings.EqualFold(name, b.e.Name) {
		return b.e, nil
	}
	return nil, frontend.ErrEntityNotFound
}

// add stores a message in partition p; b.mu is held.
func (b *partBackend) add(p uint32, m *partitionpb.Message) uint64 {
	b.next[p]++
	m.SequenceNumber = partitionpb.SequenceNumber(p, b.next[p])
	m.EnqueuedTimeMs = time.Now().UnixMilli()
	b.msgs[p] = append(b.msgs[p], m)
	close(b.changed)
	b.changed = make(chan struct{})
	return m.SequenceNumber
}

// put stores a message with body in partition p.
func (b *partBackend) put(p uint32, body string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.add(p, &partitionpb.Message{Bare: dataBody(body)})
}

// stored returns how many messages each partition holds.
func (b *partBackend) stored() []int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := make([]int, len(b.msgs))
	for p, ms := range b.msgs {
		n[p] = len(ms)
	}
	return n
}

func (b *partBackend) Send(ctx context.Context, e *placementpb.Entity, p uint32, msgs []*partitionpb.NewMessage) (*partitionpb.Result, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.hung[p] {
		b.mu.Unlock()
		<-ctx.Done()
		b.mu.Lock()
		return nil, fmt.Errorf("%w: partition %d: %v", frontend.ErrUnavailable, p, ctx.Err())
	}
	if b.down[p] {
		return nil, fmt.Errorf("%w: partition %d has no leader", frontend.ErrUnavailable, p)
	}
	res := &partitionpb.Result{}
	for _, m := range msgs {
		seq := b.add(p, &partitionpb.Message{MessageId: m.MessageId, Header: m.Header, Annotations: m.Annotations, Bare: m.Bare})
		res.SequenceNumbers = append(res.SequenceNumbers, seq)
	}
	return res, nil
}

// SendOnce is Send: the fake's partitions fail or hang alike at every
// try (a real group that elects a leader takes a later Send).
func (b *partBackend) SendOnce(ctx context.Context, e *placementpb.Entity, p uint32, msgs []*partitionpb.NewMessage) (*partitionpb.Result, error) {
	return b.Send(ctx, e, p, msgs)
}

func (b *partBackend) Receive(ctx context.Context, e *placementpb.Entity, req *partitionpb.ReceiveRequest) (*partitionpb.Result, error) {
	p := req.Partition
	if b.receiving != nil && req.MaxCount > 0 {
		b.receiving(p)
	}
	deadline := time.NewTimer(time.Duration(req.WaitMs) * time.Millisecond)
	defer deadline.Stop()
	for {
		b.mu.Lock()
		if b.down[p] {
			b.mu.Unlock()
			return nil, frontend.ErrUnavailable
		}
		if b.endless[p] {
			for range req.MaxCount {
				b.add(p, &partitionpb.Message{Bare: dataBody(fmt.Sprint("endless-", b.next[p]+1))})
			}
		}
		res := &partitionpb.Result{}
		now := time.Now()
		for _, m := range b.msgs[p] {
			if len(res.Messages) == int(req.MaxCount) {
				break
			}
			if len(m.LockToken) > 0 && m.LockedUntilMs > now.UnixMilli() {
				continue
			}
			m.LockToken = partitionpb.LockToken(m.SequenceNumber, []byte("12345678"))
			m.LockedUntilMs = now.Add(time.Minute).UnixMilli()
			res.Messages = append(res.Messages, m)
		}
		available := len(res.Messages) > 0 || (req.MaxCount == 0 && len(b.msgs[p]) > 0)
		changed := b.changed
		b.mu.Unlock()
		if available || req.WaitMs == 0 {
			return res, nil
		}
		select {
		case <-changed:
		case <-deadline.C:
			return res, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (b *partBackend) Settle(_ context.Context, e *placementpb.Entity, s *partitionpb.Settle) (*partitionpb.Result, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, t := range s.LockTokens {
		p := partitionpb.PartitionOfToken(t)
		i := -1
		for j, m := range b.msgs[p] {
			if string(m.LockToken) == string(t) {
				i = j
			}
		}
		if i < 0 {
			return &partitionpb.Result{Code: partitionpb.ResultCode_RESULT_LOCK_LOST}, nil
		}
		if s.Disposition == partitionpb.Disposition_DISPOSITION_COMPLETE {
			b.msgs[p] = append(b.msgs[p][:i], b.msgs[p][i+1:]...)
		} else {
			b.msgs[p][i].LockToken = nil
		}
	}
	return &partitionpb.Result{}, nil
}

func (b *partBackend) RenewLocks(context.Context, *placementpb.Entity, *partitionpb.RenewLocks) (*partitionpb.Result, error) {
	return &partitionpb.Result{Code: partitionpb.ResultCode_RESULT_INVALID}, nil
}

func (b *partBackend) Peek(ctx context.Context, e *placementpb.Entity, req *partitionpb.PeekRequest) ([]*partitionpb.Message, error) {
	p := req.Partition
	b.mu.Lock()
	b.peeked = append(b.peeked, p)
	hold := b.peekHold[p]
	b.mu.Unlock()
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.down[p] {
		return nil, frontend.ErrUnavailable
	}
	var out []*partitionpb.Message
	for _, m := range b.msgs[p] {
		if m.SequenceNumber >= req.FromSequenceNumber && len(out) < int(req.MaxCount) {
			out = append(out, m)
		}
	}
	if b.peekAnswered != nil {
		b.peekAnswered(p)
	}
	return out, nil
}

func (b *partBackend) CancelScheduled(context.Context, *placementpb.Entity, *partitionpb.CancelScheduled) (*partitionpb.Result, error) {
	return &partitionpb.Result{}, nil
}

func (b *partBackend) ReceiveDeferred(context.Context, *placementpb.Entity, *partitionpb.ReceiveDeferredRequest) (*partitionpb.Result, error) {
	return &partitionpb.Result{Code: partitionpb.ResultCode_RESULT_INVALID}, nil
}

func (b *partBackend) Serving(_ *placementpb.Entity, p uint32) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stale || !b.down[p]
}

// keyFor returns a partition key of partition p of n.
func keyFor(p, n uint32) string {
	for i := 0; ; i++ {
		if k := fmt.Sprint("key-", i); partitionpb.PartitionForKey(k, n) == p {
			return k
		}
	}
}

// TestSendToAPartitionWithoutLeader: a keyed message whose partition
// cannot take it fails with com.microsoft:timeout, which the SDKs retry
// (the key names that partition, so no other will do); an unkeyed one
// passes over the partition that the catalog reports without a quorum and
// succeeds on another; and while the catalog still reports it well, an
// unkeyed send that tries it goes on to the next.
func TestSendToAPartitionWithoutLeader(t *testing.T) {
	const parts, down = 4, 2
	b := newPartBackend(parts)
	b.down[down] = true
	addr := startFrontend(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	snd := amqpSender(t, ctx, addr, "pq")

	keyed := goamqp.NewMessage([]byte("keyed"))
	keyed.Annotations = goamqp.Annotations{"x-opt-partition-key": keyFor(down, parts)}
	err := snd.Send(ctx, keyed, nil)
	var ae *goamqp.Error
	if !errors.As(err, &ae) || ae.Condition != "com.microsoft:timeout" {
		t.Fatalf("keyed send to partition %d without a leader: %v, want com.microsoft:timeout", down, err)
	}
	const unkeyed = 12
	for i := range unkeyed {
		if err := snd.Send(ctx, goamqp.NewMessage([]byte(fmt.Sprint("unkeyed-", i))), nil); err != nil {
			t.Fatalf("unkeyed send %d: %v", i, err)
		}
	}
	n := b.stored()
	if n[down] != 0 || n[0]+n[1]+n[3] != unkeyed {
		t.Fatalf("stored per partition %v: want the %d unkeyed messages outside partition %d", n, unkeyed, down)
	}

	// The catalog has not noticed yet: a request that tries partition
	// down there goes on to another.
	b.mu.Lock()
	b.stale = true
	b.mu.Unlock()
	client, err := azservicebus.NewClientFromConnectionString(
		fmt.Sprintf("Endpoint=sb://%s;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true;", addr),
		&azservicebus.ClientOptions{RetryOptions: azservicebus.RetryOptions{MaxRetries: 3, RetryDelay: 10 * time.Millisecond, MaxRetryDelay: 50 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close(context.Background())
	sender, err := client.NewSender("pq", nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range parts {
		if err := sender.SendMessage(ctx, &azservicebus.Message{Body: []byte(fmt.Sprint("sdk-", i))}, nil); err != nil {
			t.Fatalf("SDK unkeyed send %d with partition %d down and reported well: %v", i, down, err)
		}
	}
	if n := b.stored(); n[down] != 0 || n[0]+n[1]+n[3] != unkeyed+parts {
		t.Fatalf("stored per partition %v", n)
	}
}

// TestReceiveCreditSpread: a partition that never runs dry does not keep
// a receiver's credit from the others. Partition 0 has messages for every
// receive, partition 5 one message; with a credit of 10 over 16
// partitions, partition 5's message arrives within two passes, that is
// before 20 of partition 0's.
func TestReceiveCreditSpread(t *testing.T) {
	b := newPartBackend(16)
	b.endless[0] = true
	b.put(5, "lonely")
	addr := startFrontend(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rcv := amqpReceiver(t, ctx, addr, "pq", 10)
	for busy := 0; ; busy++ {
		m, err := rcv.Receive(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := rcv.AcceptMessage(ctx, m); err != nil {
			t.Fatal(err)
		}
		if string(m.GetData()) == "lonely" {
			t.Logf("partition 5's message came after %d of partition 0's", busy)
			return
		}
		if busy == 20 {
			t.Fatalf("%d messages of partition 0 delivered and still not partition 5's", busy)
		}
	}
}

// TestReceiveAsksPartitionsAtOnce: a receiver's pass asks the partitions
// at once, so that receives reaching one group together share its Raft
// entry. Each partition here holds its receive until every partition has
// been asked (or 2 s passed): asked one after another, none of the four
// saw the others.
func TestReceiveAsksPartitionsAtOnce(t *testing.T) {
	const parts = 4
	b := newPartBackend(parts)
	for p := range uint32(parts) {
		b.put(p, fmt.Sprint("m", p))
	}
	var mu sync.Mutex
	waiting := 0 // receives held now
	all := make(chan struct{})
	together := false
	b.receiving = func(p uint32) {
		mu.Lock()
		waiting++
		if waiting == parts && !together {
			together = true
			close(all)
		}
		mu.Unlock()
		select {
		case <-all:
		case <-time.After(2 * time.Second):
		}
		mu.Lock()
		waiting--
		mu.Unlock()
	}
	addr := startFrontend(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rcv := amqpReceiver(t, ctx, addr, "pq", parts)
	for range parts {
		m, err := rcv.Receive(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := rcv.AcceptMessage(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if !together {
		t.Fatal("the partitions were asked one after another, not at once")
	}
}

// TestDrainAsksFewPartitions: a receiver draining a partitioned queue
// whose partitions all hold a backlog gives each pass's credit to as few
// partitions as it can, in turn, rather than a thin share to each: every
// ask that finds messages is a Raft entry of the partition's group (its
// lock, and later its settle). Sixteen partitions of 200 drained with
// credit given 160 at a time took 320 asks when each pass spread the
// credit (10 a partition); now the first pass spreads it (nothing is known
// of the partitions yet) and each later one asks about one partition.
// Every message arrives once, each partition's in order.
func TestDrainAsksFewPartitions(t *testing.T) {
	const parts, each, credit = 16, 200, 160
	b := newPartBackend(parts)
	for p := range uint32(parts) {
		for i := range each {
			b.put(p, fmt.Sprintf("p%d-%d", p, i))
		}
	}
	var mu sync.Mutex
	asks := 0
	b.receiving = func(uint32) {
		mu.Lock()
		asks++
		mu.Unlock()
	}
	addr := startFrontend(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
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
	// Credit -1: the test gives credit itself, one pass's worth at a time.
	rcv, err := s.NewReceiver(ctx, "pq", &goamqp.ReceiverOptions{Credit: -1, SettlementMode: goamqp.ReceiverSettleModeFirst.Ptr()})
	if err != nil {
		t.Fatal(err)
	}
	last := map[uint32]uint64{} // partition -> the last sequence number received
	for range parts * each / credit {
		if err := rcv.IssueCredit(credit); err != nil {
			t.Fatal(err)
		}
		for range credit {
			m, err := rcv.Receive(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			seq := m.Annotations["x-opt-sequence-number"].(int64)
			p := partitionpb.PartitionOfSequence(uint64(seq))
			if uint64(seq) <= last[p] {
				t.Fatalf("partition %d: message %d after %d", p, seq, last[p])
			}
			last[p] = uint64(seq)
			if err := rcv.AcceptMessage(ctx, m); err != nil {
				t.Fatal(err)
			}
		}
	}
	// 3,200 received, each partition's in rising order: every message
	// once. The completes go unanswered (settle mode first): wait for them.
	for n := b.stored(); slices.Max(n) != 0; n = b.stored() {
		if ctx.Err() != nil {
			t.Fatalf("left per partition after the drain: %v", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d asks for %d messages", asks, parts*each)
	if passes := parts * each / credit; asks > parts+4*passes {
		t.Fatalf("%d asks for %d passes of credit %d over %d partitions of %d: the credit was spread thin", asks, passes, credit, parts, each)
	}
}

// amqpReceiver attaches a go-amqp peek-lock receiver of the given credit
// to queue on a new connection that closes when the test ends.
func amqpReceiver(t *testing.T, ctx context.Context, addr, queue string, credit int32) *goamqp.Receiver {
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
	rcv, err := s.NewReceiver(ctx, queue, &goamqp.ReceiverOptions{Credit: credit, SettlementMode: goamqp.ReceiverSettleModeFirst.Ptr()})
	if err != nil {
		t.Fatal(err)
	}
	return rcv
}

// TestPeekPartitioned: a peek of a partitioned entity asks the partitions
// at once and answers with one partition's messages. A partition that
// does not answer is passed over for one that did (here partition 0,
// held, and partition 3); a lower partition that answers after a higher
// one is still the one that answers, so that a client paging on from the
// last number it saw walks every partition's messages, each once; a peek
// from a number of partition 7 asks no partition below it; and a peek of
// partitions all empty is empty.
func TestPeekPartitioned(t *testing.T) {
	const parts = 8
	b := newPartBackend(parts)
	for _, p := range []uint32{0, 3, 6} {
		for i := range 3 {
			b.put(p, fmt.Sprintf("p%d-%d", p, i))
		}
	}
	addr := startFrontend(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := sdkClient(t, addr)
	peek := func(rcv *azservicebus.Receiver, from int64, count int) []string {
		t.Helper()
		var opts *azservicebus.PeekMessagesOptions
		if from >= 0 {
			opts = &azservicebus.PeekMessagesOptions{FromSequenceNumber: &from}
		}
		msgs, err := rcv.PeekMessages(ctx, count, opts)
		if err != nil {
			t.Fatal(err)
		}
		var bodies []string
		for _, m := range msgs {
			bodies = append(bodies, string(m.Body))
		}
		return bodies
	}
	rcv, err := client.NewReceiverForQueue("pq", nil)
	if err != nil {
		t.Fatal(err)
	}

	// Partition 0 does not answer: partition 3 does.
	held := make(chan struct{})
	b.mu.Lock()
	b.peekHold[0] = held
	b.mu.Unlock()
	if got := fmt.Sprint(peek(rcv, 1, 10)); got != "[p3-0 p3-1 p3-2]" {
		t.Fatalf("peek with partition 0 silent: %s, want partition 3's messages", got)
	}

	// Partition 0 answers, after partition 3 did: it is the page.
	b.mu.Lock()
	b.peekHold[0] = make(chan struct{})
	b.peekAnswered = func(p uint32) {
		if p == 3 {
			if h := b.peekHold[0]; h != nil {
				close(h)
				b.peekHold[0] = nil
			}
		}
	}
	b.mu.Unlock()
	// Paging as the SDK does, two at a time from the last number + 1.
	var pages []string
	for {
		page := peek(rcv, -1, 2)
		if len(page) == 0 {
			break
		}
		pages = append(pages, fmt.Sprint(page))
		if len(pages) > 10 {
			t.Fatalf("paging does not end: %v", pages)
		}
	}
	if got, want := strings.Join(pages, " "), "[p0-0 p0-1] [p0-2] [p3-0 p3-1] [p3-2] [p6-0 p6-1] [p6-2]"; got != want {
		t.Fatalf("pages %s, want %s", got, want)
	}

	// From a number of partition 7: only 7 is asked, and it is empty.
	b.mu.Lock()
	b.peeked = nil
	b.mu.Unlock()
	if got := peek(rcv, int64(partitionpb.SequenceNumber(7, 1)), 10); len(got) != 0 {
		t.Fatalf("peek from partition 7: %v, want nothing", got)
	}
	b.mu.Lock()
	peeked := fmt.Sprint(b.peeked)
	b.mu.Unlock()
	if peeked != "[7]" {
		t.Fatalf("a peek from partition 7 asked partitions %s", peeked)
	}
	close(held)
}

// TestUnkeyedSendsLeaveAPartitionThatDoesNotAnswer, in virtual time: with
// one partition whose group does not answer at all and one that has no
// leader, both still reported serving (the catalog has not noticed), every
// unkeyed send of a client that does not retry (go-amqp) is accepted, none
// later than unkeyedTry (5 s) after it was sent, and nothing is stored in
// the two; a keyed send to the partition that does not answer fails with
// com.microsoft:timeout, which the SDKs retry, once sendTimeout passed.
func TestUnkeyedSendsLeaveAPartitionThatDoesNotAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const parts, hung, down = 4, 1, 2
		b := newPartBackend(parts)
		b.hung[hung], b.down[down], b.stale = true, true, true
		f := serveInMemory(t, frontend.Config{Backend: b, Rules: devRules(t), ReceiveWait: 500 * time.Millisecond})
		ctx := t.Context()
		sess, err := plainConn(t, f).NewSession(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		snd, err := sess.NewSender(ctx, "pq", nil)
		if err != nil {
			t.Fatal(err)
		}
		const unkeyed = 12
		for i := range unkeyed {
			start := time.Now()
			if err := snd.Send(ctx, goamqp.NewMessage([]byte(fmt.Sprint("unkeyed-", i))), nil); err != nil {
				t.Fatalf("unkeyed send %d: %v", i, err)
			}
			if took := time.Since(start); took > 5*time.Second {
				t.Fatalf("unkeyed send %d took %v", i, took)
			}
		}
		if n := b.stored(); n[hung] != 0 || n[down] != 0 || n[0]+n[3] != unkeyed {
			t.Fatalf("stored per partition %v: want the %d unkeyed messages in partitions 0 and 3", n, unkeyed)
		}

		keyed := goamqp.NewMessage([]byte("keyed"))
		keyed.Annotations = goamqp.Annotations{"x-opt-partition-key": keyFor(hung, parts)}
		start := time.Now()
		err = snd.Send(ctx, keyed, nil)
		var ae *goamqp.Error
		if !errors.As(err, &ae) || ae.Condition != "com.microsoft:timeout" {
			t.Fatalf("keyed send to partition %d that does not answer: %v, want com.microsoft:timeout", hung, err)
		}
		if took := time.Since(start); took < 30*time.Second {
			t.Fatalf("keyed send failed after %v, before sendTimeout", took)
		}
	})
}
