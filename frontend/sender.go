package frontend

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/quorumbus/quorumbus/frontend/amqp"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

const (
	defaultMaxMessageBytes = 256 << 10
	// linkBytesInFlight bounds what a client may have sent on one link and
	// not yet had settled, counted at the entity's largest message: a link
	// of a queue allowing 100 MB messages gets 3 credits, not 1,000 (which
	// would let one client park 100 GB in the front-end). Queues of the
	// default 256 KB keep the engine's whole window.
	linkBytesInFlight = 256 << 20
	// engineLinkCredit is the window the engine gives a link by default
	// (amqp.Server.LinkCredit unset).
	engineLinkCredit = 1000
	// sendsInFlight bounds the partition requests one link has outstanding.
	sendsInFlight = 8
	// sendTimeout bounds one partition request, leader changes included,
	// plus a second per MiB it carries: a storage node writes a large
	// message in pieces, each replicated and fsynced.
	sendTimeout = 30 * time.Second
	// unkeyedTry bounds one partition's try at a request of unkeyed
	// messages before it moves on to another partition (sendUnkeyed).
	// The router gives up on a node that does not answer after 3 s, and
	// asks the group's other replicas at once after that, so this bound
	// ends a try only when no replica answers at all.
	unkeyedTry = 5 * time.Second
)

// sender serves a link on which a client sends to an entity. Messages are
// handed from the engine's goroutine to the link's worker, which packs what
// accumulated into one partition request per partition (the front-end half
// of group commit) and settles each transfer once its request committed.
type sender struct {
	c      *conn
	entity *placementpb.Entity
	queue  chan pendingSend
	done   chan struct{}
	once   sync.Once
	// unkeyed places the link's requests of unkeyed messages (unkeyed.go);
	// nil for an entity of one partition.
	unkeyed *unkeyedCursor
	counts  *entityCounters // metrics.go
}

type pendingSend struct {
	link      *amqp.Link
	id        uint32
	settled   bool
	partition uint32
	// unkeyed: the worker chose the partition (no message has a key),
	// and any other would do.
	unkeyed bool
	msgs    []*partitionpb.NewMessage
	bytes   int // of the messages' sections
}

func (c *conn) newSender(l *amqp.Link, e *placementpb.Entity) (amqp.LinkHandler, error) {
	if e.Status == placementpb.EntityStatus_ENTITY_STATUS_DISABLED || e.Status == placementpb.EntityStatus_ENTITY_STATUS_SEND_DISABLED {
		return nil, failDisabled.amqpError(e.Name)
	}
	max := uint64(defaultMaxMessageBytes)
	if kb := e.GetProperties().GetMaxMessageSizeInKilobytes(); kb > 0 {
		max = uint64(kb) << 10
	}
	l.SetMaxMessageSize(max)
	if w := uint64(linkBytesInFlight) / max; w < engineLinkCredit {
		l.SetCreditWindow(uint32(w) + 1)
	}
	s := &sender{c: c, entity: e, queue: make(chan pendingSend, 4096), done: make(chan struct{}), counts: c.srv.counters.entity(e.Name)}
	if len(e.PartitionGroups) > 1 {
		s.unkeyed = c.srv.unkeyed.hold(e.Name)
	}
	go s.run()
	return s, nil
}

func (s *sender) Detached(*amqp.Link, error) { s.once.Do(func() { close(s.done) }) }

// Message decodes the transfer (a single message or a batch) and queues it.
func (s *sender) Message(l *amqp.Link, d *amqp.Delivery) {
	parts := [][]byte{d.Payload}
	if d.Format == batchMessageFormat {
		var err error
		if parts, err = splitBatch(d.Payload); err != nil {
			s.reject(l, d, failBadRequest, err.Error())
			return
		}
	}
	msgs := make([]*partitionpb.NewMessage, 0, len(parts))
	bytes := 0
	for _, p := range parts {
		m, err := incomingFor(p, s.entity.Kind == placementpb.EntityKind_ENTITY_KIND_TOPIC)
		if err != nil {
			s.reject(l, d, failBadRequest, err.Error())
			return
		}
		msgs = append(msgs, m)
		bytes += len(m.Header) + len(m.Annotations) + len(m.Bare)
	}
	if len(msgs) == 0 {
		if !d.Settled {
			l.Settle(d.ID, amqp.Accepted{})
		}
		return
	}
	cost := s.c.srv.sendCost(s.entity, len(msgs))
	th := s.c.srv.throttle
	if d.Settled {
		// Fire-and-forget: refusing it would lose it unseen, so it is
		// paid for and passes.
		th.charge(cost)
		th.inFlight(len(msgs))
	} else if !th.take(s.entity.Name, cost) || !th.admit(s.entity.Name, len(msgs)) {
		s.reject(l, d, failBusy, "")
		return
	}
	// From here the messages are pending work (MaxPendingSends) until
	// send gives them back, or dropQueued when the link ends first.
	p, err := s.batchPartition(msgs)
	if err != nil {
		// not-allowed, which every SDK takes as final: the Go SDK
		// retries a condition it does not know (invalid-field among
		// them) after reconnecting, and a resend is refused the same.
		th.inFlight(-len(msgs))
		s.reject(l, d, failInvalid, err.Error())
		return
	}
	select {
	case s.queue <- pendingSend{link: l, id: d.ID, settled: d.Settled, partition: p, msgs: msgs, bytes: bytes}:
	case <-s.done:
		th.inFlight(-len(msgs))
	}
}

// dropQueued gives back the pending work of what the link queued and its
// worker will not send, once the link ended (detached, or its session or
// connection ended).
func (s *sender) dropQueued(taken ...pendingSend) {
	n := 0
	for _, p := range taken {
		n += len(p.msgs)
	}
	for {
		select {
		case p := <-s.queue:
			n += len(p.msgs)
		default:
			s.c.srv.throttle.inFlight(-n)
			return
		}
	}
}

func (s *sender) reject(l *amqp.Link, d *amqp.Delivery, f failure, detail string) {
	s.counts.outcome(1, f, true)
	if !d.Settled {
		l.Settle(d.ID, amqp.Rejected{Error: f.amqpError(detail)})
	}
}

// batchPartition is the partition of a delivery's messages. A message's
// SessionId has at most 128 characters, its PartitionKey must be its
// SessionId when it has both, and the keyed
// messages of a batch must all go to one partition (unkeyed ones join
// them), as Service Bus requires of partitioned entities; otherwise the
// delivery is refused and nothing is stored.
func (s *sender) batchPartition(msgs []*partitionpb.NewMessage) (uint32, error) {
	p := anyPartition
	for _, m := range msgs {
		if err := checkSessionID(m.SessionId); err != nil {
			return 0, err
		}
		if m.PartitionKey != "" && m.SessionId != "" && m.PartitionKey != m.SessionId {
			return 0, fmt.Errorf("the message's PartitionKey %q differs from its SessionId %q: a session's messages are partitioned by the session id", m.PartitionKey, m.SessionId)
		}
		mp := s.partitionFor(m)
		switch {
		case mp == anyPartition:
		case p == anyPartition:
			p = mp
		case mp != p:
			return 0, fmt.Errorf("the batch's messages belong to different partitions of %s: give them one SessionId or PartitionKey", s.entity.Name)
		}
	}
	if p == anyPartition && len(s.entity.PartitionGroups) <= 1 {
		p = 0
	}
	return p, nil
}

// anyPartition marks a message without a key (partitionFor): the worker
// picks its partition when it packs a request (unkeyedPartition).
const anyPartition = ^uint32(0)

// partitionFor chooses the partition of a message (MISSION: SessionId,
// else PartitionKey, else MessageId with duplicate detection, else
// round-robin), or anyPartition for an unkeyed message of a partitioned
// entity.
func (s *sender) partitionFor(m *partitionpb.NewMessage) uint32 {
	n := uint32(len(s.entity.PartitionGroups))
	if n <= 1 {
		return 0
	}
	key := m.SessionId
	if key == "" {
		key = m.PartitionKey
	}
	if key == "" && s.entity.GetProperties().GetRequiresDuplicateDetection() {
		key = m.MessageId
	}
	if key == "" {
		return anyPartition
	}
	return partitionpb.PartitionForKey(key, n)
}

// unkeyedPartition is the partition of the unkeyed messages of the
// request being packed, of bytes: the cursor moves on per request, not
// per message, so that a burst of unkeyed sends makes one request rather
// than one per partition (spread message by message over 16 partitions,
// sends took twice the server CPU per message), and it is shared with the
// front-end's other links to the entity, so that their requests meet in
// one group's entries (unkeyed.go). It passes over the partitions that do
// not serve (Backend.Serving: recorded without quorum, or no leader
// answered the router's latest calls), unless none does. A request that
// its partition cannot take goes on to another (sendUnkeyed). The request
// is counted in flight until unkeyedDone.
func (s *sender) unkeyedPartition(bytes int) uint32 {
	return s.unkeyed.pick(uint32(len(s.entity.PartitionGroups)), bytes, func(p uint32) bool {
		return s.c.srv.cfg.Backend.Serving(s.entity, p)
	})
}

// run packs queued messages into partition requests until the link ends.
// Requests run concurrently (up to sendsInFlight), so completions may be
// settled out of send order, as Service Bus allows.
func (s *sender) run() {
	defer func() {
		if s.unkeyed != nil {
			s.c.srv.unkeyed.release(s.entity.Name, s.unkeyed)
		}
	}()
	slots := make(chan struct{}, sendsInFlight)
	max, maxBytes := s.c.srv.cfg.SendBatch, s.c.srv.cfg.SendBatchBytes
	for {
		var first pendingSend
		select {
		case first = <-s.queue:
		case <-s.done:
			s.dropQueued()
			return
		}
		// Wait for a free slot before packing: what arrives while every
		// request is in flight joins this batch rather than the next.
		select {
		case slots <- struct{}{}:
		case <-s.done:
			s.dropQueued(first)
			return
		}
		// Keyed messages go to their partitions; the unkeyed ones make
		// one request, placed once it is packed.
		batch := map[uint32][]pendingSend{}
		var unkeyed []pendingSend
		unkeyedBytes := 0
		place := func(p pendingSend) {
			if p.partition == anyPartition {
				p.unkeyed = true
				unkeyed = append(unkeyed, p)
				unkeyedBytes += p.bytes
				return
			}
			batch[p.partition] = append(batch[p.partition], p)
		}
		place(first)
		n, bytes := len(first.msgs), first.bytes
	fill:
		for n < max && bytes < maxBytes {
			select {
			case p := <-s.queue:
				place(p)
				n, bytes = n+len(p.msgs), bytes+p.bytes
			default:
				break fill
			}
		}
		picked := anyPartition
		if len(unkeyed) > 0 {
			picked = s.unkeyedPartition(unkeyedBytes)
			for i := range unkeyed {
				unkeyed[i].partition = picked
			}
			batch[picked] = append(batch[picked], unkeyed...)
		}
		held := true // the slot taken above serves the first request
		for part, items := range batch {
			if !held {
				slots <- struct{}{}
			}
			held = false
			go func() {
				defer func() { <-slots }()
				s.send(part, items, func() {
					if part == picked {
						s.unkeyed.done(part, unkeyedBytes)
					}
				})
			}()
		}
	}
}

// send sends a request of items to partition and settles them with its
// outcome. ended is called once the partition answered, before any item
// is settled: a client's next send, which may follow the settle at once,
// then finds this request no longer in flight (the unkeyed cursor moves
// on only from a partition with nothing in flight, so a lone synchronous
// sender goes round-robin).
func (s *sender) send(partition uint32, items []pendingSend, ended func()) {
	var msgs []*partitionpb.NewMessage
	bytes := 0
	for _, it := range items {
		msgs = append(msgs, it.msgs...)
		bytes += it.bytes
	}
	ctx, cancel := context.WithTimeout(context.Background(), sendTimeout+time.Duration(bytes>>20)*time.Second)
	var res *partitionpb.Result
	var err error
	if len(s.entity.PartitionGroups) > 1 && movable(items) {
		res, err = s.sendUnkeyed(ctx, partition, msgs, bytes)
	} else {
		// Keyed, or to an entity of one partition: nowhere else to go.
		res, err = s.sendServed(ctx, partition, msgs, bytes) // keyed.go
	}
	s.c.srv.throttle.inFlight(-len(msgs)) // admitted in Message
	cancel()
	ended()
	var state amqp.DeliveryState = amqp.Accepted{}
	var f failure
	failed := err != nil
	if failed {
		f = errFailure(err)
		state = amqp.Rejected{Error: f.amqpError(s.entity.Name)}
		if f.cond == condServerBusy {
			s.c.srv.throttle.refused(s.entity.Name)
		}
	} else if f, failed = resultFailure(res.GetCode()); failed {
		state = amqp.Rejected{Error: f.amqpError(res.GetDescription())}
	}
	s.counts.outcome(len(items), f, failed)
	if !failed {
		s.counts.incomingMessages.Add(uint64(len(msgs)))
	}
	for _, it := range items {
		if !it.settled {
			it.link.Settle(it.id, state)
		}
	}
}

// movable reports whether every item of a request is unkeyed: only then
// may the request go to another partition than the one it was packed for.
func movable(items []pendingSend) bool {
	for _, it := range items {
		if !it.unkeyed {
			return false
		}
	}
	return true
}

// sendUnkeyed sends a request of unkeyed messages to partition first or,
// when that partition's group cannot take it now, to another: an unkeyed
// message skips a partition whose group lost its quorum and succeeds on
// another (issue 24), also in the seconds before the catalog records the
// group without quorum.
//
// It tries first, then one partition of each other group, those that
// serve first, each once (OnceSender.SendOnce, within unkeyedTry): a try
// fails at once when no replica of the group leads, and within the
// router's attempt timeout when none answers. When none took the request
// (every group electing at once, or without quorum), it tries them all
// again every servingPoll, until one takes it or none of them has read
// serving for unservedWait.
//
// A message is acknowledged only once a partition stored it. A try that
// ended without an answer may have stored it all the same (its leader
// proposed it, then lost its term or the answer): the copy that a later
// partition stores is then a second one, as a client's own retry after a
// timeout would make. Only unkeyed messages move, and those are the ones
// Service Bus gives no duplicate detection (with it on, the MessageId is
// the key): docs/design-notes.md, "Unkeyed sends leave a partition that
// does not answer".
func (s *sender) sendUnkeyed(ctx context.Context, first uint32, msgs []*partitionpb.NewMessage, bytes int) (*partitionpb.Result, error) {
	backend := s.c.srv.cfg.Backend
	once, ok := backend.(OnceSender)
	if !ok {
		return s.sendServed(ctx, first, msgs, bytes)
	}
	order := s.unkeyedOrder(first)
	// Rounds of one try at each group, until one takes the request, or
	// none has read serving for unservedWait (a second more per MiB), or
	// ctx ends. Waiting at one partition instead gave up on its group
	// while another came back (right after a kill, every group can fail
	// one try and read not serving for a moment).
	wait := unservedWait + time.Duration(bytes>>20)*time.Second
	served := time.Now()
	for {
		var err error
		for _, p := range order {
			tctx, cancel := context.WithTimeout(ctx, unkeyedTry)
			var res *partitionpb.Result
			res, err = once.SendOnce(tctx, s.entity, p, msgs)
			cancel()
			if err == nil || !errors.Is(err, ErrUnavailable) || ctx.Err() != nil {
				return res, err
			}
		}
		now := time.Now()
		if slices.ContainsFunc(order, func(p uint32) bool { return backend.Serving(s.entity, p) }) {
			served = now
		}
		if now.Sub(served) >= wait {
			return nil, fmt.Errorf("%w: no partition of %s read serving for %v: %v", ErrUnavailable, s.entity.Name, wait, err)
		}
		select {
		case <-time.After(servingPoll):
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
	}
}

// unkeyedOrder is first, then a partition of each group of the entity
// that first's is not, cyclically after first: those that serve, then
// the others.
func (s *sender) unkeyedOrder(first uint32) []uint32 {
	groups := s.entity.PartitionGroups
	n := uint32(len(groups))
	seen := map[uint64]bool{groups[first]: true}
	var serving, others []uint32
	for i := uint32(1); i < n; i++ {
		p := (first + i) % n
		if seen[groups[p]] {
			continue
		}
		seen[groups[p]] = true
		if s.c.srv.cfg.Backend.Serving(s.entity, p) {
			serving = append(serving, p)
		} else {
			others = append(others, p)
		}
	}
	return append(append([]uint32{first}, serving...), others...)
}
