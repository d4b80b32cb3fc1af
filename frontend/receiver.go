package frontend

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/quorumbus/quorumbus/frontend/amqp"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// receiver serves a link on which a client receives from an entity (or its
// dead-letter sub-queue). A pump goroutine fetches messages from the
// partitions while the client has credit; dispositions are settled through
// the partitions by a settle goroutine that batches them.
//
// The pump reads the credit from the link each time (Link.SendState), never
// from a copy kept at Flow: a Flow call can arrive with a value that the
// pump's own sends already used, and a fetch sized by it took messages the
// link then refused. Taken in receive-and-delete mode, those were gone.
type receiver struct {
	c         *conn
	link      *amqp.Link
	entity    *placementpb.Entity
	subQueue  partitionpb.SubQueue
	rad       bool // receive-and-delete: the client's link is sender-settled
	ctx       context.Context
	cancel    context.CancelFunc
	wake      chan struct{} // credit arrived
	settles   chan settleReq
	mu        sync.Mutex
	tokens    map[uint32][]byte // delivery id -> lock token, until settled
	nextStart uint32            // partition to poll first, rotating every pass
	// rotation replaces nextStart for a receiver of a partitioned entity:
	// shared with the front-end's other receivers of it (pass.go).
	rotation    *passRotation
	endRotation func() // leaves and lets go of rotation
	// backlogged[i] says that partition base+i filled its latest ask in
	// a pass, so likely has more (pass.go). Only the pump touches it.
	backlogged []bool
	// order is the order passes go round the partitions (partitionOrder).
	order []uint32
	// held are receive-and-delete messages taken from a partition (and so
	// deleted there) that the link had no credit for: the peer lowered its
	// credit while they were fetched. They go out first when credit
	// returns. Only the pump touches them.
	held []*partitionpb.Message
	// buf and tag are the pump's buffers for rendering a delivery, which
	// Link.Send copies: a message's payload was an allocation of its size.
	buf []byte
	tag [16]byte
	// counts are the entity's metrics (metrics.go).
	counts *entityCounters
	// session is the lock of a session receiver, set once its attach is
	// answered (sessions.go); nil for a plain receiver.
	session     *sessionLock
	releaseOnce sync.Once
	// unsettled counts the dispositions taken from the client and not
	// yet answered: a session receiver that lost its lock answers them
	// before it detaches (sessionLost).
	unsettled pendingSettles
}

// pendingSettles counts dispositions on their way to the partitions, and
// lets a caller wait until there are none.
type pendingSettles struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed when n drops to 0; nil while n is 0
}

func (p *pendingSettles) add() {
	p.mu.Lock()
	if p.n++; p.n == 1 {
		p.idle = make(chan struct{})
	}
	p.mu.Unlock()
}

func (p *pendingSettles) done() {
	p.mu.Lock()
	if p.n--; p.n == 0 {
		close(p.idle)
		p.idle = nil
	}
	p.mu.Unlock()
}

// wait returns once no disposition is pending, or after timeout.
func (p *pendingSettles) wait(timeout time.Duration) {
	p.mu.Lock()
	idle := p.idle
	p.mu.Unlock()
	if idle == nil {
		return
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-idle:
	case <-t.C:
	}
}

type settleReq struct {
	id    uint32
	state amqp.DeliveryState
	token []byte
}

func (c *conn) newReceiver(l *amqp.Link, e *placementpb.Entity, sub string) (amqp.LinkHandler, error) {
	if sub == "" && (e.Status == placementpb.EntityStatus_ENTITY_STATUS_DISABLED || e.Status == placementpb.EntityStatus_ENTITY_STATUS_RECEIVE_DISABLED) {
		return nil, failDisabled.amqpError(e.Name)
	}
	r := &receiver{
		c:       c,
		link:    l,
		entity:  e,
		wake:    make(chan struct{}, 1),
		settles: make(chan settleReq, 8192),
		tokens:  make(map[uint32][]byte),
		counts:  c.srv.counters.entity(e.Name),
	}
	if sub != "" {
		r.subQueue = partitionpb.SubQueue_SUB_QUEUE_DEAD_LETTER
	}
	if m := l.Attach().SndSettleMode; m != nil && *m == amqp.SenderSettleSettled {
		r.rad = true
	}
	sr, isSession, err := sessionFilter(l.Attach(), acceptWaitOf(e, c.srv.cfg.SessionAcceptWait), time.Now())
	if err != nil {
		return nil, err
	}
	requires := e.GetProperties().GetRequiresSession() && sub == ""
	switch {
	case isSession && !requires:
		return nil, failNoSessions.amqpError(e.Name)
	case requires && !isSession:
		return nil, failNeedsSession.amqpError(e.Name)
	case isSession && c.sessions() == nil:
		return nil, failNotImpl.amqpError("sessions")
	}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	if isSession {
		// The attach is answered once the session is locked, and the
		// client's detach once the session is given back, so that the
		// client that closed it (or another) can accept it again at once.
		l.DeferAttach()
		l.HoldDetachReply()
		go r.acceptSession(sr)
		return r, nil
	}
	if len(e.PartitionGroups) > 1 {
		key := e.Name + "/" + sub
		r.rotation = c.srv.rotations.hold(key)
		r.endRotation = func() {
			r.rotation.leave(r)
			c.srv.rotations.release(key, r.rotation)
		}
	}
	go r.pump()
	go r.settleLoop()
	return r, nil
}

// Detached stops the pump. Locks of delivered messages are not released:
// they belong to the entity and end by settlement (possibly through
// $management on another connection) or expiry. A session receiver gives
// its session back, and with it the messages it did not settle.
func (r *receiver) Detached(*amqp.Link, error) {
	r.cancel()
	if r.entity.GetProperties().GetRequiresSession() && r.c.sessions() != nil {
		// Marked here, on the engine's goroutine, so that an attach that
		// follows on this connection already sees the lock ending.
		r.mu.Lock()
		if r.session != nil {
			r.session.ending.Store(true)
		}
		r.mu.Unlock()
		go func() {
			r.releaseSession()
			r.link.SendDetachReply()
		}()
	}
}

// Flow wakes the pump, which reads the credit from the link itself. A
// drain that leaves no credit has nothing to use up and is answered at
// once: the pump, which waits for credit, would never answer it, and
// go-amqp's DrainCredit asks so (link-credit 0 with drain), waiting
// until its context ends.
func (r *receiver) Flow(l *amqp.Link, credit uint32, drain bool) {
	if drain && credit == 0 {
		l.Drain()
		return
	}
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

func (r *receiver) Disposition(l *amqp.Link, id uint32, state amqp.DeliveryState, settled bool) {
	r.mu.Lock()
	token, ok := r.tokens[id]
	delete(r.tokens, id)
	r.mu.Unlock()
	if !ok {
		if !settled {
			l.Settle(id, amqp.Rejected{Error: failLockLost.amqpError("unknown delivery")})
		}
		return
	}
	r.unsettled.add()
	select {
	case r.settles <- settleReq{id: id, state: state, token: token}:
	case <-r.ctx.Done():
		r.unsettled.done()
	}
}

// pump delivers messages while the client has credit.
func (r *receiver) pump() {
	defer func() {
		if r.endRotation != nil {
			r.endRotation()
		}
		if len(r.held) > 0 {
			// Taken from the partition (and so deleted there) while the
			// client had lowered its credit, and the link closed before it
			// gave more: lost, as receive-and-delete messages in flight
			// to a client that goes away are in Service Bus.
			r.c.log.Warn("receive-and-delete messages not delivered: the link closed", "entity", r.entity.Name, "messages", len(r.held), "first_seq", r.held[0].SequenceNumber)
		}
	}()
	partitions := uint32(max(len(r.entity.PartitionGroups), 1))
	base := uint32(0)
	if r.session != nil {
		partitions, base = 1, r.session.partition // the session's only
	}
	for r.ctx.Err() == nil {
		credit, drain := r.link.SendState()
		if len(r.held) > 0 && credit > 0 {
			before := len(r.held)
			r.held = r.deliver(r.held, credit)
			r.counts.outgoingMessages.Add(uint64(before - len(r.held)))
			if len(r.held) == before {
				// The link refused them all (it is closing): wait for
				// the detach rather than spin.
				select {
				case <-r.wake:
				case <-r.ctx.Done():
				}
			}
			continue
		}
		if credit == 0 {
			select {
			case <-r.wake:
				continue
			case <-r.ctx.Done():
				return
			}
		}
		got := r.pass(base, partitions, credit)
		if r.ctx.Err() != nil {
			return
		}
		if got > 0 {
			continue
		}
		if drain {
			r.link.Drain()
			continue
		}
		// Wait on every partition at once (the session's, for a session
		// receiver) and take from whichever has a message first, in the
		// pass above.
		r.awaitAnyPartition(base, partitions)
	}
}

// awaitAnyPartition long-polls partitions base.. base+partitions-1 with
// wait-only receives (max_count 0: they take nothing) and returns when one
// of them has a message, when the wait is over, or when the client gives
// credit or asks to drain. Because the polls take nothing, cancelling the
// ones still waiting loses nothing; a long poll that took messages could
// not be cancelled safely, which is why a single taking poll used to wait
// on one partition while another had messages, and answered a drain only
// when it ended (the JS SDK drains when its receive's wait is over, and
// closes the link when the answer is late).
func (r *receiver) awaitAnyPartition(base, partitions uint32) {
	ctx, cancel := context.WithCancel(r.ctx)
	wait := r.c.srv.cfg.ReceiveWait
	answers := make(chan error, partitions)
	for p := range partitions {
		go func() {
			req := &partitionpb.ReceiveRequest{Partition: base + p, SubQueue: r.subQueue, WaitMs: wait.Milliseconds()}
			if r.session != nil {
				// Wake for the session's messages, not its partition's.
				req.SessionId, req.SessionToken = r.session.id, r.session.token
			}
			cctx, ccancel := context.WithTimeout(ctx, wait+sendTimeout)
			_, err := r.c.srv.cfg.Backend.Receive(cctx, r.entity, req)
			ccancel()
			answers <- err
		}()
	}
	failed := uint32(0)
	for answered := false; !answered; {
		select {
		case err := <-answers:
			if err == nil {
				answered = true
				break
			}
			// A partition without a leader answers at once; wait on the
			// others, and back off only when none can be asked.
			if failed++; failed == partitions {
				answered = true
				select {
				case <-time.After(100 * time.Millisecond):
				case <-r.ctx.Done():
				}
			}
		case <-r.wake:
			answered = true
		case <-r.ctx.Done():
			answered = true
		}
	}
	cancel()
}

// fetch takes up to max messages of one partition and sends them. It
// returns how many were delivered.
func (r *receiver) fetch(partition, max uint32, wait time.Duration) int {
	res := r.receive(partition, max, wait)
	if res == nil {
		return 0
	}
	return r.hand(res, max)
}

// receive takes up to max messages of one partition, waiting for one up to
// wait. It returns nil when there is nothing to hand out: the receive
// failed (after a pause, so that a partition without a leader is not
// asked in a spin), or the session's lock was lost. It may run beside
// other receives of the link; hand, which delivers, may not.
func (r *receiver) receive(partition, max uint32, wait time.Duration) *partitionpb.Result {
	req := &partitionpb.ReceiveRequest{
		Partition:        partition,
		SubQueue:         r.subQueue,
		MaxCount:         max,
		ReceiveAndDelete: r.rad,
		WaitMs:           wait.Milliseconds(),
	}
	if err := r.c.srv.throttle.wait(r.ctx, r.entity.Name); err != nil {
		return nil
	}
	if r.session != nil {
		req.SessionId, req.SessionToken = r.session.id, r.session.token
	}
	ctx, cancel := context.WithTimeout(r.ctx, wait+sendTimeout)
	res, err := r.c.srv.cfg.Backend.Receive(ctx, r.entity, req)
	cancel()
	r.c.srv.throttle.charge(int64(len(res.GetMessages())))
	if err != nil {
		if r.ctx.Err() == nil {
			r.c.log.Debug("receive failed", "entity", r.entity.Name, "partition", partition, "err", err)
			time.Sleep(100 * time.Millisecond) // do not spin on a partition without a leader
		}
		return nil
	}
	if res.GetCode() == partitionpb.ResultCode_RESULT_SESSION_LOCK_LOST && r.session != nil {
		r.sessionLost(res.GetDescription())
		return nil
	}
	if _, failed := resultFailure(res.GetCode()); failed {
		time.Sleep(100 * time.Millisecond)
		return nil
	}
	return res
}

// hand sends the messages of res, taken for up to max of the link's
// credit, and returns how many were delivered; what the link could not
// take is held (receive-and-delete) or given back.
func (r *receiver) hand(res *partitionpb.Result, max uint32) int {
	sent := len(res.Messages)
	defer func() { r.counts.outgoingMessages.Add(uint64(sent)) }()
	if rest := r.deliver(res.Messages, max); len(rest) > 0 {
		sent -= len(rest)
		if r.rad {
			r.held = append(r.held, rest...)
		} else {
			// Locked but not delivered: give them back without counting.
			tokens := make([][]byte, len(rest))
			for i, m := range rest {
				tokens[i] = m.LockToken
			}
			r.settleTokens(partitionpb.Disposition_DISPOSITION_RELEASE, tokens, nil)
		}
	}
	return sent
}

// deliver sends up to max of msgs on the link and returns those it could
// not send, in order: the link ran out of credit or closed.
func (r *receiver) deliver(msgs []*partitionpb.Message, max uint32) []*partitionpb.Message {
	sent := uint32(0)
	for i, m := range msgs {
		if sent == max || r.ctx.Err() != nil {
			return msgs[i:]
		}
		payload, err := outgoing(r.buf[:0], m, !r.rad)
		if err != nil {
			r.c.log.Error("stored message cannot be rendered", "entity", r.entity.Name, "seq", m.SequenceNumber, "err", err)
			continue
		}
		if cap(payload) <= maxReusedPayload {
			r.buf = payload // Send copies it
		}
		tag := appendDeliveryTag(r.tag[:0], m.LockToken)
		if r.rad {
			tag = binary.BigEndian.AppendUint64(r.tag[:0], m.SequenceNumber)
		}
		r.mu.Lock()
		id, err := r.link.Send(tag, payload, r.rad)
		if err == nil && !r.rad {
			r.tokens[id] = m.LockToken
		}
		r.mu.Unlock()
		if errors.Is(err, amqp.ErrNoCredit) || errors.Is(err, amqp.ErrLinkClosed) {
			return msgs[i:]
		}
		if err != nil {
			// This link can never take it (it exceeds the peer's maximum
			// message size): a peek-locked message comes back when its lock
			// expires, as Service Bus does, and dead-letters at the entity's
			// maximum delivery count.
			r.c.log.Warn("message not delivered", "entity", r.entity.Name, "seq", m.SequenceNumber, "err", err)
			continue
		}
		sent++
	}
	return nil
}

// maxReusedPayload bounds the rendering buffer a receiver keeps between
// deliveries: one large message should not pin its size for the link's life.
const maxReusedPayload = 1 << 20

// settlesInFlight bounds the settle batches one link has outstanding: each
// waits for a Raft commit, so one at a time would cap a consumer at one
// batch per commit round trip.
const settlesInFlight = 4

// settleLoop turns the client's dispositions into partition settles,
// packing those that arrive together and share a disposition.
func (r *receiver) settleLoop() {
	slots := make(chan struct{}, settlesInFlight)
	for {
		var first settleReq
		select {
		case first = <-r.settles:
		case <-r.ctx.Done():
			return
		}
		batch := []settleReq{first}
	fill:
		for len(batch) < 512 {
			select {
			case s := <-r.settles:
				batch = append(batch, s)
			default:
				break fill
			}
		}
		slots <- struct{}{}
		go func() {
			defer func() { <-slots }()
			r.settleBatch(batch)
		}()
	}
}

// settleBatch settles simple outcomes (complete, release) together, one
// command per partition; the others one by one, since they carry
// per-message details.
func (r *receiver) settleBatch(batch []settleReq) {
	type key struct {
		d partitionpb.Disposition
		p uint32
	}
	groups := map[key][]settleReq{}
	for _, s := range batch {
		d, simple := simpleDisposition(s.state)
		if simple {
			k := key{d, partitionpb.PartitionOfToken(s.token)}
			groups[k] = append(groups[k], s)
			continue
		}
		r.settleOne(s)
	}
	// The partitions at once, each answered as soon as its own command
	// is: waiting for the slowest group would hold the client's
	// unsettled messages, and with them its credit, that much longer.
	var wg sync.WaitGroup
	for k, items := range groups {
		wg.Go(func() { r.settleRun(k.d, k.p, items) })
	}
	wg.Wait()
}

// settleRun settles items of one partition and disposition in one
// command and answers them.
func (r *receiver) settleRun(d partitionpb.Disposition, p uint32, items []settleReq) {
	tokens := make([][]byte, len(items))
	for i, it := range items {
		tokens[i] = it.token
	}
	o := r.settlePartition(d, p, tokens, nil)
	if !o.ok && len(items) > 1 {
		// One lost lock fails the whole command: settle them one by one
		// so that the others still succeed.
		for _, it := range items {
			r.settleOne(it)
		}
		return
	}
	// In delivery order, so that the engine answers runs of them with one
	// disposition frame each: a client completing from many goroutines
	// sends its dispositions a little out of order, and each frame costs
	// it a read and a dispatch.
	slices.SortFunc(items, func(a, b settleReq) int { return cmp.Compare(a.id, b.id) })
	for _, it := range items {
		r.confirm(it.id, o.f, o.ok)
	}
}

func (r *receiver) settleOne(s settleReq) {
	d, _ := simpleDisposition(s.state)
	var settle partitionpb.Settle
	switch st := s.state.(type) {
	case amqp.Modified:
		d = partitionpb.Disposition_DISPOSITION_ABANDON
		if st.UndeliverableHere {
			d = partitionpb.Disposition_DISPOSITION_DEFER
		}
		if len(st.MessageAnnotations) > 0 {
			enc, err := (&amqp.Message{ApplicationProperties: st.MessageAnnotations}).Append(nil)
			if err == nil {
				settle.PropertiesToModify = enc
			}
		}
	case amqp.Rejected:
		// The SDKs dead-letter with rejected{error{com.microsoft:dead-letter,
		// info: {DeadLetterReason, DeadLetterErrorDescription, ...the
		// properties to modify}}}.
		d = partitionpb.Disposition_DISPOSITION_DEAD_LETTER
		if st.Error != nil {
			var modify amqp.Map
			for _, p := range st.Error.Info {
				switch p.Key {
				case "DeadLetterReason":
					settle.DeadLetterReason, _ = p.Value.(string)
				case "DeadLetterErrorDescription":
					settle.DeadLetterDescription, _ = p.Value.(string)
				default:
					modify = append(modify, p)
				}
			}
			if len(modify) > 0 {
				if enc, err := (&amqp.Message{ApplicationProperties: modify}).Append(nil); err == nil {
					settle.PropertiesToModify = enc
				}
			}
		}
	}
	f, ok := r.settleTokens(d, [][]byte{s.token}, &settle)
	r.confirm(s.id, f, ok)
}

// simpleDisposition maps outcomes that carry nothing but themselves.
func simpleDisposition(state amqp.DeliveryState) (partitionpb.Disposition, bool) {
	switch state.(type) {
	case amqp.Accepted:
		return partitionpb.Disposition_DISPOSITION_COMPLETE, true
	case amqp.Released:
		return partitionpb.Disposition_DISPOSITION_RELEASE, true
	}
	return partitionpb.Disposition_DISPOSITION_ABANDON, false
}

// settleOutcome is how a partition's share of a settle ended.
type settleOutcome struct {
	f  failure
	ok bool
}

// settleTokens settles tokens of one disposition and returns the failure
// of a partition that failed, or ok when none did.
func (r *receiver) settleTokens(d partitionpb.Disposition, tokens [][]byte, tmpl *partitionpb.Settle) (failure, bool) {
	out := r.settlePartitions(d, tokens, tmpl)
	for _, p := range slices.Sorted(maps.Keys(out)) {
		if o := out[p]; !o.ok {
			return o.f, false
		}
	}
	return failure{}, true
}

// settlePartitions settles tokens of one disposition, one command per
// partition, the partitions at once (one after another, each was a Raft
// entry of its own, where commands that reach a group together share
// one), and returns how each partition's ended.
func (r *receiver) settlePartitions(d partitionpb.Disposition, tokens [][]byte, tmpl *partitionpb.Settle) map[uint32]settleOutcome {
	byPartition := map[uint32][][]byte{}
	for _, t := range tokens {
		p := partitionpb.PartitionOfToken(t)
		byPartition[p] = append(byPartition[p], t)
	}
	out := make(map[uint32]settleOutcome, len(byPartition))
	if len(byPartition) == 1 {
		for p, ts := range byPartition {
			out[p] = r.settlePartition(d, p, ts, tmpl)
		}
		return out
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for p, ts := range byPartition {
		wg.Go(func() {
			o := r.settlePartition(d, p, ts, tmpl)
			mu.Lock()
			out[p] = o
			mu.Unlock()
		})
	}
	wg.Wait()
	return out
}

// settlePartition settles tokens of partition p.
func (r *receiver) settlePartition(d partitionpb.Disposition, p uint32, ts [][]byte, tmpl *partitionpb.Settle) settleOutcome {
	s := &partitionpb.Settle{}
	if tmpl != nil {
		s.DeadLetterReason, s.DeadLetterDescription, s.PropertiesToModify = tmpl.DeadLetterReason, tmpl.DeadLetterDescription, tmpl.PropertiesToModify
	}
	s.Partition, s.SubQueue, s.LockTokens, s.Disposition = p, r.subQueue, ts, d
	ctx, cancel := context.WithTimeout(context.Background(), sendTimeout)
	// A group without a quorum answers in unservedWait rather than
	// sendTimeout: the client's complete fails retriably, and the lock
	// outlives that wait, so the retry can still settle.
	res, err := served(r.c.srv, ctx, r.entity, p, 0, func(ctx context.Context) (*partitionpb.Result, error) {
		return r.c.srv.cfg.Backend.Settle(ctx, r.entity, s)
	})
	cancel()
	if err != nil {
		if d == partitionpb.Disposition_DISPOSITION_RELEASE {
			// The client is not waiting for this answer (the SDKs
			// release what arrived after a receive returned), and the
			// messages stay locked until their lock, or their
			// session's, ends.
			r.c.log.Warn("release failed: the messages stay locked until their lock ends", "entity", r.entity.Name, "partition", p, "messages", len(ts), "err", err)
		}
		return settleOutcome{f: errFailure(err)}
	}
	if f, failed := resultFailure(res.GetCode()); failed {
		if f == failLockLost && r.session != nil {
			// Under a session lock a message's lock is the session's.
			f = failSessionLockLost
		}
		return settleOutcome{f: f}
	}
	return settleOutcome{ok: true}
}

// confirm answers the client's disposition: accepted on success (the SDKs
// take it for every outcome), rejected with the reason otherwise.
func (r *receiver) confirm(id uint32, f failure, ok bool) {
	defer r.unsettled.done()
	r.counts.outcome(1, f, !ok)
	if ok {
		r.link.Settle(id, amqp.Accepted{})
		return
	}
	r.link.Settle(id, amqp.Rejected{Error: f.amqpError("")})
}
