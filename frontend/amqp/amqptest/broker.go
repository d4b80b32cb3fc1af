// Package amqptest provides a small in-memory broker built on the AMQP
// engine, for tests that drive the engine with real clients. It is not the
// product: queues live in memory and nothing is replicated.
package amqptest

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/quorumbus/quorumbus/frontend/amqp"
)

// Broker keeps one FIFO queue per address. A link whose peer sends appends
// to the queue named by its target; a link whose peer receives takes from
// the queue named by its source. Queues appear on first use.
type Broker struct {
	// Refuse, when set, is asked about every address; a non-nil error
	// refuses the link with it.
	Refuse func(address string) error

	mu     sync.Mutex
	queues map[string]*queue
}

type queue struct {
	msgs      [][]byte
	receivers []*outLink // links with credit, served round-robin
	next      int
}

// Len returns the number of messages waiting in the queue at address.
func (b *Broker) Len(address string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if q := b.queues[address]; q != nil {
		return len(q.msgs)
	}
	return 0
}

// Put appends a message to a queue, as if a client had sent it.
func (b *Broker) Put(address string, payload []byte) {
	b.mu.Lock()
	q := b.queueLocked(address)
	q.msgs = append(q.msgs, append([]byte(nil), payload...))
	b.mu.Unlock()
	b.dispatch(address)
}

func (b *Broker) queueLocked(address string) *queue {
	if b.queues == nil {
		b.queues = make(map[string]*queue)
	}
	q := b.queues[address]
	if q == nil {
		q = &queue{}
		b.queues[address] = q
	}
	return q
}

// OpenConn implements amqp.Handler.
func (b *Broker) OpenConn(*amqp.Conn) (amqp.ConnHandler, error) { return connHandler{b}, nil }

type connHandler struct{ b *Broker }

func (connHandler) Closed(error) {}

func (h connHandler) Attach(l *amqp.Link) (amqp.LinkHandler, error) {
	a := l.Attach()
	var address string
	if a.Role == amqp.RoleSender {
		if a.Target == nil {
			return nil, amqp.Errorf(amqp.ErrCondInvalidField, "a sending link needs a target")
		}
		address = a.Target.Address
	} else {
		if a.Source == nil {
			return nil, amqp.Errorf(amqp.ErrCondInvalidField, "a receiving link needs a source")
		}
		address = a.Source.Address
	}
	if address == "" {
		return nil, amqp.Errorf(amqp.ErrCondNotFound, "no address")
	}
	if h.b.Refuse != nil {
		if err := h.b.Refuse(address); err != nil {
			return nil, err
		}
	}
	if a.Role == amqp.RoleSender {
		return &inLink{b: h.b, address: address}, nil
	}
	return &outLink{b: h.b, address: address, link: l, inflight: make(map[uint32][]byte)}, nil
}

// inLink takes messages from a peer that sends.
type inLink struct {
	b       *Broker
	address string
}

func (in *inLink) Detached(*amqp.Link, error) {}

func (in *inLink) Message(l *amqp.Link, d *amqp.Delivery) {
	payload := append([]byte(nil), d.Payload...)
	in.b.mu.Lock()
	q := in.b.queueLocked(in.address)
	if d.Format == serviceBusBatchFormat {
		parts, err := splitBatch(payload)
		if err != nil {
			in.b.mu.Unlock()
			if !d.Settled {
				l.Settle(d.ID, amqp.Rejected{Error: amqp.Errorf(amqp.ErrCondDecodeError, "%v", err)})
			}
			return
		}
		q.msgs = append(q.msgs, parts...)
	} else {
		q.msgs = append(q.msgs, payload)
	}
	in.b.mu.Unlock()
	if !d.Settled {
		l.Settle(d.ID, amqp.Accepted{})
	}
	in.b.dispatch(in.address)
}

// serviceBusBatchFormat is the message format of a batch the Azure SDKs
// send: each data section of its body holds one encoded message. The
// front-end (package frontend) owns this Service Bus format; this example
// broker keeps its own few lines of it rather than import the Service Bus
// layer, and with it gRPC and the cluster's protos, into the engine's test
// helper and cmd/amqp-testbroker.
const serviceBusBatchFormat uint32 = 0x80013700

// splitBatch returns the messages of a batch, aliasing payload.
func splitBatch(payload []byte) ([][]byte, error) {
	secs, err := amqp.Sections(payload, nil)
	if err != nil {
		return nil, err
	}
	var out [][]byte
	for _, s := range secs {
		if s.Descriptor != amqp.SectionData {
			continue
		}
		b, err := s.Data()
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, nil
}

// outLink delivers to a peer that receives.
type outLink struct {
	b        *Broker
	address  string
	link     *amqp.Link
	credit   uint32
	drain    bool
	tag      uint64
	inflight map[uint32][]byte // unsettled deliveries, to requeue if not accepted
	gone     bool
}

func (o *outLink) Flow(l *amqp.Link, credit uint32, drain bool) {
	if drain && credit == 0 {
		l.Drain() // nothing to use up: answer at once
		return
	}
	o.b.mu.Lock()
	o.credit, o.drain = credit, drain
	q := o.b.queueLocked(o.address)
	if credit > 0 && !o.gone && !contains(q.receivers, o) {
		q.receivers = append(q.receivers, o)
	}
	o.b.mu.Unlock()
	o.b.dispatch(o.address)
}

func contains(list []*outLink, o *outLink) bool {
	for _, x := range list {
		if x == o {
			return true
		}
	}
	return false
}

func (o *outLink) Disposition(l *amqp.Link, id uint32, state amqp.DeliveryState, settled bool) {
	o.b.mu.Lock()
	payload, ok := o.inflight[id]
	delete(o.inflight, id)
	requeue := false
	switch state.(type) {
	case amqp.Released, amqp.Modified:
		requeue = ok
	}
	if requeue {
		q := o.b.queueLocked(o.address)
		q.msgs = append([][]byte{payload}, q.msgs...)
	}
	o.b.mu.Unlock()
	if !settled {
		l.Settle(id, state)
	}
	if requeue {
		o.b.dispatch(o.address)
	}
}

func (o *outLink) Detached(*amqp.Link, error) {
	o.b.mu.Lock()
	o.gone = true
	q := o.b.queueLocked(o.address)
	for i, x := range q.receivers {
		if x == o {
			q.receivers = append(q.receivers[:i], q.receivers[i+1:]...)
			break
		}
	}
	// Messages the peer never settled go back to the head of the queue.
	for _, p := range o.inflight {
		q.msgs = append([][]byte{p}, q.msgs...)
	}
	clear(o.inflight)
	o.b.mu.Unlock()
	o.b.dispatch(o.address)
}

// dispatch hands waiting messages to receivers with credit, and answers
// drain requests when the queue runs dry.
func (b *Broker) dispatch(address string) {
	type send struct {
		o       *outLink
		tag     []byte
		payload []byte
	}
	var sends []send
	var drained []*outLink
	b.mu.Lock()
	q := b.queueLocked(address)
	for len(q.msgs) > 0 && len(q.receivers) > 0 {
		q.next %= len(q.receivers)
		o := q.receivers[q.next]
		p := q.msgs[0]
		q.msgs = q.msgs[1:]
		o.credit--
		o.tag++
		tag := binary.BigEndian.AppendUint64(nil, o.tag)
		sends = append(sends, send{o, tag, p})
		if o.credit == 0 {
			q.receivers = append(q.receivers[:q.next], q.receivers[q.next+1:]...)
		} else {
			q.next++
		}
	}
	if len(q.msgs) == 0 {
		for _, o := range q.receivers {
			if o.drain {
				drained = append(drained, o)
				o.drain, o.credit = false, 0
			}
		}
		q.receivers = removeAll(q.receivers, drained)
	}
	b.mu.Unlock()

	for _, s := range sends {
		presettled := s.o.link.Attach().SndSettleMode != nil && *s.o.link.Attach().SndSettleMode == amqp.SenderSettleSettled
		b.mu.Lock()
		id, err := s.o.link.Send(s.tag, s.payload, presettled)
		if err == nil && !presettled {
			s.o.inflight[id] = s.payload
		}
		if err != nil {
			// The link went away between choosing it and sending: keep the
			// message.
			q.msgs = append([][]byte{s.payload}, q.msgs...)
		}
		b.mu.Unlock()
	}
	for _, o := range drained {
		o.link.Drain()
	}
}

func removeAll(list, drop []*outLink) []*outLink {
	out := list[:0]
	for _, x := range list {
		if !contains(drop, x) {
			out = append(out, x)
		}
	}
	return out
}

// Start serves a Broker on 127.0.0.1 with a random port and stops it when
// the test ends. It returns the address to dial.
func Start(t testing.TB, srv *amqp.Server) (*Broker, string) {
	t.Helper()
	b, addr, stop, err := Listen("127.0.0.1:0", srv)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return b, addr
}

// Listen serves a new Broker on addr with the settings of srv (nil for the
// defaults). stop shuts it down.
func Listen(addr string, srv *amqp.Server) (b *Broker, bound string, stop func(), err error) {
	if srv == nil {
		srv = &amqp.Server{}
	}
	b, _ = srv.Handler.(*Broker)
	if b == nil {
		b = &Broker{}
		srv.Handler = b
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", nil, err
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	stop = func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		if err := <-served; err != nil && !errors.Is(err, amqp.ErrServerClosed) {
			panic(err)
		}
	}
	return b, ln.Addr().String(), stop, nil
}
