package frontend

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/quorumbus/quorumbus/frontend/amqp"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// The $management operations. Each runs on its own
// goroutine: it waits for a partition, and the engine's goroutine must not.

const managementTimeout = 30 * time.Second

// serveManagement answers <entity>/$management requests.
func (c *conn) serveManagement(entityPath string, req *rpcRequest) {
	if need := (linkNeed{path: entityPath + "/" + managementNode, rights: managementRight(req.operation)}); !c.auth.allows(need) {
		req.respond(failUnauthorized.status, c.denied(need).Description, nil)
		return
	}
	e, sub, err := c.lookup(entityPath)
	if err != nil {
		req.fail(failNotFound, entityPath)
		return
	}
	req.counts = c.srv.counters.entity(e.Name)
	body, ok := req.msg.Value.(amqp.Map)
	if !ok {
		// Service Bus answers a body that is not a map with 400; taking it
		// as empty would run the operation with defaults nobody asked for.
		req.fail(failBadField, fmt.Sprintf("the request body must be an amqp-value map, got %s", typeOf(req.msg.Value, req.msg.HasValue)))
		return
	}
	q := partitionpb.SubQueue_SUB_QUEUE_MAIN
	if sub != "" {
		q = partitionpb.SubQueue_SUB_QUEUE_DEAD_LETTER
	}
	var op func(context.Context, *placementpb.Entity, partitionpb.SubQueue, amqp.Map, *rpcRequest)
	switch req.operation {
	case "com.microsoft:renew-lock":
		op = c.renewLock
	case "com.microsoft:update-disposition":
		op = c.updateDisposition
	case "com.microsoft:schedule-message":
		op = c.scheduleMessages
	case "com.microsoft:cancel-scheduled-message":
		op = c.cancelScheduled
	case "com.microsoft:peek-message":
		op = c.peekMessages
	case "com.microsoft:receive-by-sequence-number":
		op = c.receiveBySequence
	case "com.microsoft:renew-session-lock":
		op = c.renewSessionLock
	case "com.microsoft:get-session-state":
		op = c.getSessionState
	case "com.microsoft:set-session-state":
		op = c.setSessionState
	case "com.microsoft:get-message-sessions":
		op = c.getMessageSessions
	case "com.microsoft:add-rule":
		op = c.addRule
	case "com.microsoft:remove-rule":
		op = c.removeRule
	case "com.microsoft:enumerate-rules":
		op = c.enumerateRules
	default:
		req.fail(failNotImpl, "$management operation "+req.operation)
		return
	}
	messages := 0
	if req.operation == "com.microsoft:schedule-message" {
		v, _ := body.Get("messages")
		list, _ := v.([]any)
		messages = len(list)
	}
	if !c.srv.throttle.take(e.Name, c.srv.managementCost(e, req.operation, messages)) {
		req.fail(failBusy, "")
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), managementTimeout)
		defer cancel()
		op(ctx, e, q, body, req)
	}()
}

// answered answers the request with the failure when a partition call
// failed, and reports whether it did.
func answered(req *rpcRequest, res *partitionpb.Result, err error) bool {
	if err != nil {
		req.fail(errFailure(err), "")
		return true
	}
	if f, failed := resultFailure(res.GetCode()); failed {
		req.fail(f, res.GetDescription())
		return true
	}
	return false
}

// typeOf names the type of a request field's value for a 400's
// description.
func typeOf(v any, present bool) string {
	if !present {
		return "nothing"
	}
	if v == nil {
		return "null"
	}
	return fmt.Sprintf("%T", v)
}

// intField reads an integer field of a request body; any AMQP integer
// type will do (the SDKs differ in widths), a value of another type or
// out of [lo, hi] is an error that a 400 carries.
func intField(body amqp.Map, key string, lo, hi int64) (int64, error) {
	v, ok := body.Get(key)
	var n int64
	switch x := v.(type) {
	case int64:
		n = x
	case int32:
		n = int64(x)
	case int16:
		n = int64(x)
	case int8:
		n = int64(x)
	case uint64:
		if x > math.MaxInt64 {
			return 0, fmt.Errorf("%s %d is out of range", key, x)
		}
		n = int64(x)
	case uint32:
		n = int64(x)
	case uint16:
		n = int64(x)
	case uint8:
		n = int64(x)
	default:
		return 0, fmt.Errorf("%s must be an integer, got %s", key, typeOf(v, ok))
	}
	if n < lo || n > hi {
		return 0, fmt.Errorf("%s %d is out of range [%d, %d]", key, n, lo, hi)
	}
	return n, nil
}

// stringField reads an optional string field: absent or null is "", any
// other type an error.
func stringField(body amqp.Map, key string) (string, error) {
	v, ok := body.Get(key)
	switch x := v.(type) {
	case nil:
		return "", nil
	case string:
		return x, nil
	}
	return "", fmt.Errorf("%s must be a string, got %s", key, typeOf(v, ok))
}

// lockLost reports whether a token cannot be a lock of e at all: it names
// a partition e does not have. Such a token is a lock lost (410), as
// Service Bus answers any unknown token, not a missing entity (404).
func lockLost(e *placementpb.Entity, token []byte) bool {
	return int(partitionpb.PartitionOfToken(token)) >= max(len(e.PartitionGroups), 1)
}

// lockTokens reads the lock-tokens field: an array of uuids.
func lockTokens(body amqp.Map) ([][]byte, bool) {
	v, _ := body.Get("lock-tokens")
	var tokens [][]byte
	switch ts := v.(type) {
	case []amqp.UUID:
		for _, t := range ts {
			tokens = append(tokens, append([]byte(nil), t[:]...))
		}
	case amqp.UUID:
		tokens = append(tokens, append([]byte(nil), ts[:]...))
	default:
		return nil, false
	}
	return tokens, len(tokens) > 0
}

// renewLock: lock-tokens → 200 {expirations: array of timestamps}, one per
// token in order; 410 if any lock is lost; 503 com.microsoft:timeout once
// a partition has read not serving for unservedWait (served).
func (c *conn) renewLock(ctx context.Context, e *placementpb.Entity, q partitionpb.SubQueue, body amqp.Map, req *rpcRequest) {
	tokens, ok := lockTokens(body)
	if !ok {
		req.fail(failInvalid, "renew-lock needs lock-tokens")
		return
	}
	for _, t := range tokens {
		if lockLost(e, t) {
			req.fail(failLockLost, "")
			return
		}
	}
	expirations := make([]time.Time, len(tokens))
	// Tokens of one partition renew together; keep each answer in its
	// token's place.
	byPartition := map[uint32][]int{}
	for i, t := range tokens {
		p := partitionpb.PartitionOfToken(t)
		byPartition[p] = append(byPartition[p], i)
	}
	for p, idx := range byPartition {
		rl := &partitionpb.RenewLocks{Partition: p, SubQueue: q}
		for _, i := range idx {
			rl.LockTokens = append(rl.LockTokens, tokens[i])
		}
		res, err := served(c.srv, ctx, e, p, 0, func(ctx context.Context) (*partitionpb.Result, error) {
			return c.srv.cfg.Backend.RenewLocks(ctx, e, rl)
		})
		if answered(req, res, err) {
			return
		}
		for j, i := range idx {
			if j < len(res.LockedUntilMs) {
				expirations[i] = time.UnixMilli(res.LockedUntilMs[j]).UTC()
			}
		}
	}
	req.respond(200, "OK", amqp.Map{{Key: "expirations", Value: expirations}})
}

// updateDisposition settles by lock token: what the SDK falls back to when
// its receive link is gone, and how a lock is settled from any connection
// (locks belong to the entity). A partition that has read not serving for
// unservedWait gets 503 com.microsoft:timeout (served), not 30 s of
// silence.
func (c *conn) updateDisposition(ctx context.Context, e *placementpb.Entity, q partitionpb.SubQueue, body amqp.Map, req *rpcRequest) {
	tokens, ok := lockTokens(body)
	if !ok {
		req.fail(failInvalid, "update-disposition needs lock-tokens")
		return
	}
	for _, t := range tokens {
		if lockLost(e, t) {
			req.fail(failLockLost, "")
			return
		}
	}
	status, _ := body.Get("disposition-status")
	var d partitionpb.Disposition
	switch status {
	case "completed":
		d = partitionpb.Disposition_DISPOSITION_COMPLETE
	case "abandoned":
		d = partitionpb.Disposition_DISPOSITION_ABANDON
	case "suspended":
		d = partitionpb.Disposition_DISPOSITION_DEAD_LETTER
	case "defered", "deferred": // the SDKs spell it "defered"
		d = partitionpb.Disposition_DISPOSITION_DEFER
	default:
		req.fail(failInvalid, "unknown disposition-status")
		return
	}
	tmpl := &partitionpb.Settle{SubQueue: q, Disposition: d}
	var err error
	if tmpl.DeadLetterReason, err = stringField(body, "deadletter-reason"); err != nil {
		req.fail(failBadField, err.Error())
		return
	}
	if tmpl.DeadLetterDescription, err = stringField(body, "deadletter-description"); err != nil {
		req.fail(failBadField, err.Error())
		return
	}
	if v, ok := body.Get("properties-to-modify"); ok && v != nil {
		m, ok := v.(amqp.Map)
		if !ok {
			req.fail(failBadField, "properties-to-modify must be a map, got "+typeOf(v, true))
			return
		}
		if len(m) > 0 {
			enc, err := (&amqp.Message{ApplicationProperties: m}).Append(nil)
			if err != nil {
				req.fail(failBadField, "properties-to-modify: "+err.Error())
				return
			}
			tmpl.PropertiesToModify = enc
		}
	}
	byPartition := map[uint32][][]byte{}
	for _, t := range tokens {
		p := partitionpb.PartitionOfToken(t)
		byPartition[p] = append(byPartition[p], t)
	}
	for p, ts := range byPartition {
		s := &partitionpb.Settle{
			Partition: p, SubQueue: q, LockTokens: ts, Disposition: d,
			DeadLetterReason: tmpl.DeadLetterReason, DeadLetterDescription: tmpl.DeadLetterDescription,
			PropertiesToModify: tmpl.PropertiesToModify,
		}
		res, err := served(c.srv, ctx, e, p, 0, func(ctx context.Context) (*partitionpb.Result, error) {
			return c.srv.cfg.Backend.Settle(ctx, e, s)
		})
		if answered(req, res, err) {
			return
		}
	}
	req.respond(200, "OK", nil)
}

// sequenceNumbers reads a sequence-numbers field: an array of longs.
func sequenceNumbers(body amqp.Map) ([]int64, bool) {
	v, _ := body.Get("sequence-numbers")
	switch ns := v.(type) {
	case []int64:
		return ns, len(ns) > 0
	case int64:
		return []int64{ns}, true
	}
	return nil, false
}

// byPartition groups sequence numbers by the partition in their top bits.
func byPartition(seqs []int64) map[uint32][]uint64 {
	out := map[uint32][]uint64{}
	for _, n := range seqs {
		p := partitionpb.PartitionOfSequence(uint64(n))
		out[p] = append(out[p], uint64(n))
	}
	return out
}

// scheduleMessages: messages (a list of maps, each with the encoded
// message under "message", carrying x-opt-scheduled-enqueue-time) → 200
// {sequence-numbers: array of longs}, one per message in order.
func (c *conn) scheduleMessages(ctx context.Context, e *placementpb.Entity, _ partitionpb.SubQueue, body amqp.Map, req *rpcRequest) {
	v, _ := body.Get("messages")
	list, ok := v.([]any)
	if !ok || len(list) == 0 {
		req.fail(failInvalid, "schedule-message needs messages")
		return
	}
	s := &sender{c: c, entity: e}
	if len(e.PartitionGroups) > 1 {
		s.unkeyed = c.srv.unkeyed.hold(e.Name)
		defer c.srv.unkeyed.release(e.Name, s.unkeyed)
	}
	// Every message is checked before any is stored: a refused request
	// schedules nothing.
	msgs := make([]*partitionpb.NewMessage, 0, len(list))
	parts := make([]uint32, 0, len(list))
	for _, item := range list {
		m, _ := item.(amqp.Map)
		enc, _ := m.Get("message")
		payload, ok := enc.([]byte)
		if !ok {
			req.fail(failInvalid, "a scheduled message without its encoding")
			return
		}
		nm, err := incomingFor(payload, e.Kind == placementpb.EntityKind_ENTITY_KIND_TOPIC)
		if err != nil {
			req.fail(failBadRequest, err.Error())
			return
		}
		p, err := s.batchPartition([]*partitionpb.NewMessage{nm})
		if err != nil {
			req.fail(failBadField, err.Error())
			return
		}
		msgs, parts = append(msgs, nm), append(parts, p)
	}
	// Scheduled messages are pending work as sent ones are
	// (MaxPendingSends), until stored or refused.
	th := c.srv.throttle
	if !th.admit(e.Name, len(msgs)) {
		req.fail(failBusy, "")
		return
	}
	held := len(msgs)
	defer func() { th.inFlight(-held) }()
	seqs := make([]int64, 0, len(list))
	for i, nm := range msgs {
		p, size := parts[i], len(nm.Header)+len(nm.Annotations)+len(nm.Bare)
		if p == anyPartition {
			p = s.unkeyedPartition(size)
		}
		// Its partition only: the cursor passed over those that do
		// not serve, unless none does.
		res, err := s.sendServed(ctx, p, []*partitionpb.NewMessage{nm}, size)
		if parts[i] == anyPartition {
			s.unkeyed.done(p, size)
		}
		th.inFlight(-1)
		held--
		if err != nil && errFailure(err).cond == condServerBusy {
			th.refused(e.Name)
		}
		if answered(req, res, err) {
			return
		}
		for _, n := range res.SequenceNumbers {
			seqs = append(seqs, int64(n))
		}
	}
	req.respond(200, "OK", amqp.Map{{Key: "sequence-numbers", Value: seqs}})
}

// cancelScheduled: sequence-numbers → 200. Numbers that name no scheduled
// message are ignored, as Service Bus does. A partition that reads not
// serving answers 503 after unservedWait (served).
func (c *conn) cancelScheduled(ctx context.Context, e *placementpb.Entity, _ partitionpb.SubQueue, body amqp.Map, req *rpcRequest) {
	seqs, ok := sequenceNumbers(body)
	if !ok {
		req.fail(failInvalid, "cancel-scheduled-message needs sequence-numbers")
		return
	}
	for p, ns := range byPartition(seqs) {
		res, err := served(c.srv, ctx, e, p, 0, func(ctx context.Context) (*partitionpb.Result, error) {
			return c.srv.cfg.Backend.CancelScheduled(ctx, e, &partitionpb.CancelScheduled{Partition: p, SequenceNumbers: ns})
		})
		if answered(req, res, err) {
			return
		}
	}
	req.respond(200, "OK", nil)
}

// maxPeek bounds one peek request.
const maxPeek = 1000

// peekProbePrefix cuts the bodies of the one message each partition of a
// partitioned entity is first asked for (peekPartitions): the probes only
// say which partition answers, so that N partitions holding messages of
// 100 MB cost the front-end N × 64 KiB, not N × 100 MB. A probe's message
// that came back whole is the answer to a peek of one message.
const peekProbePrefix = 64 << 10

// peekLowerWait is how long a peek of a partitioned entity waits, once a
// partition answered with messages, for the lower partitions it asked
// that have not answered yet (docs/design-notes.md).
const peekLowerWait = 2 * time.Second

// peekMessages: from-sequence-number, message-count → 200 {messages: list
// of {message: bin}}, or 204 when there is none. A page holds the
// messages of one partition: a session's, or on a partitioned entity
// those of the partition peekPartitions chooses.
func (c *conn) peekMessages(ctx context.Context, e *placementpb.Entity, q partitionpb.SubQueue, body amqp.Map, req *rpcRequest) {
	from, err := intField(body, "from-sequence-number", 0, math.MaxInt64)
	if err != nil {
		req.fail(failBadField, err.Error())
		return
	}
	count, err := intField(body, "message-count", 1, math.MaxInt32)
	if err != nil {
		req.fail(failBadField, err.Error())
		return
	}
	count = min(count, maxPeek)
	partitions := uint32(max(len(e.PartitionGroups), 1))
	// A session receiver peeks its session: one partition holds it.
	var sid string
	if q == partitionpb.SubQueue_SUB_QUEUE_MAIN {
		lock, id, ok := c.requestSession(e, body, req)
		if !ok {
			return
		}
		if sid = id; lock != nil {
			sid = lock.id
		}
	}
	var found []*partitionpb.Message
	bound := uint64(c.srv.cfg.PeekMaxBytes)
	switch {
	case sid != "":
		p := partitionpb.PartitionForKey(sid, partitions)
		found, err = c.srv.cfg.Backend.Peek(ctx, e, &partitionpb.PeekRequest{
			Partition: p, SubQueue: q, FromSequenceNumber: max(uint64(from), partitionpb.SequenceNumber(p, 0)), MaxCount: uint32(count), SessionId: sid,
			MaxBytes: bound,
		})
	case partitions == 1:
		if partitionpb.PartitionOfSequence(uint64(from)) == 0 {
			found, err = c.srv.cfg.Backend.Peek(ctx, e, &partitionpb.PeekRequest{SubQueue: q, FromSequenceNumber: uint64(from), MaxCount: uint32(count), MaxBytes: bound})
		}
	default:
		found, err = c.peekPartitions(ctx, e, q, uint64(from), uint32(count), partitions, bound)
	}
	if err != nil {
		req.fail(errFailure(err), "")
		return
	}
	c.srv.throttle.charge(int64(len(found))) // 1 a message peeked
	if len(found) == 0 {
		// Go does not read the body of a 204; the JavaScript SDK reads
		// its messages field all the same.
		req.respond(204, "No Content", amqp.Map{{Key: "messages", Value: []any{}}})
		return
	}
	list := make([]any, 0, len(found))
	for _, m := range found {
		if m.BodyTruncated { // a preview is never a client's message
			req.fail(failInternal, "a peeked message came back cut")
			return
		}
		payload, err := outgoing(nil, m, false)
		if err != nil {
			req.fail(failInternal, err.Error())
			return
		}
		list = append(list, amqp.Map{{Key: "message", Value: payload}})
	}
	req.respond(200, "OK", amqp.Map{{Key: "messages", Value: list}})
}

// peekPartitions peeks a partitioned entity, as Azure does, at every
// partition that may hold numbers from `from` on at once (the partition
// `from` names and those above it), and answers with the messages of one
// partition: the lowest that has any among those that answered, waiting
// for a lower one that has not answered yet at most peekLowerWait after
// the first answer with messages, then passing over it. The partitions
// are first asked for one message each, so that a large count is read
// from the chosen partition only, and with their bodies cut
// (peekProbePrefix). Lowest rather than first: a client
// pages on from the last number it saw, so a page from a higher partition
// would skip for good what the partitions below it hold; this way a
// client paging until an empty answer sees every partition's messages,
// unless one was slower than peekLowerWait to answer. It returns nothing
// when every partition answered without messages, and the first failure
// when none had messages and some failed (an empty answer would end the
// client's paging).
func (c *conn) peekPartitions(ctx context.Context, e *placementpb.Entity, q partitionpb.SubQueue, from uint64, count, partitions uint32, bound uint64) ([]*partitionpb.Message, error) {
	first := partitionpb.PartitionOfSequence(from)
	if first >= partitions {
		return nil, nil
	}
	start := func(p uint32) uint64 { return max(from, partitionpb.SequenceNumber(p, 0)) }
	type answer struct {
		msgs []*partitionpb.Message
		err  error
		done bool
	}
	probes, cancel := context.WithCancel(ctx)
	defer cancel() // the partitions still to answer are not waited for
	type reply struct {
		p uint32
		answer
	}
	replies := make(chan reply, partitions-first)
	for p := first; p < partitions; p++ {
		go func() {
			msgs, err := c.srv.cfg.Backend.Peek(probes, e, &partitionpb.PeekRequest{Partition: p, SubQueue: q, FromSequenceNumber: start(p), MaxCount: 1, BodyPrefixBytes: peekProbePrefix})
			replies <- reply{p, answer{msgs, err, true}}
		}()
	}
	answers := make([]answer, partitions-first) // by partition - first
	best := -1                                  // the lowest index with messages
	var failed error
	var lowerWait <-chan time.Time
	decided := func() bool {
		if best < 0 {
			return false
		}
		for _, a := range answers[:best] {
			if !a.done {
				return false
			}
		}
		return true
	}
wait:
	for left := len(answers); left > 0 && !decided(); left-- {
		select {
		case r := <-replies:
			i := int(r.p - first)
			answers[i] = r.answer
			switch {
			case r.err != nil:
				if failed == nil {
					failed = r.err
				}
			case len(r.msgs) > 0 && (best < 0 || i < best):
				best = i
				if lowerWait == nil {
					t := time.NewTimer(peekLowerWait)
					defer t.Stop()
					lowerWait = t.C
				}
			}
		case <-lowerWait:
			break wait
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if best < 0 {
		return nil, failed
	}
	cancel()
	page := answers[best].msgs
	probe := page[0]
	if count == 1 && !probe.BodyTruncated {
		return page, nil
	}
	p := first + uint32(best)
	// The chosen partition's page, whole; should it fail or find the
	// message gone since, the probe's message is the page if it came
	// back whole, else the request fails and the client retries (an
	// empty answer would end its paging).
	more, err := c.srv.cfg.Backend.Peek(ctx, e, &partitionpb.PeekRequest{Partition: p, SubQueue: q, FromSequenceNumber: start(p), MaxCount: count, MaxBytes: bound})
	switch {
	case err == nil && len(more) > 0:
		return more, nil
	case !probe.BodyTruncated:
		return page, nil
	case err == nil:
		err = fmt.Errorf("%w: partition %d's first message went while it was peeked", ErrUnavailable, p)
	}
	return nil, err
}

// receiveBySequence: sequence-numbers, receiver-settle-mode (1 peek-lock,
// 0 receive-and-delete) → 200 {messages: list of {message: bin,
// lock-token: uuid}}. The Go SDK reads the lock token from the message's
// x-opt-lock-token annotation, the others from lock-token: both are there.
// A partition that reads not serving answers 503 after unservedWait
// (served).
func (c *conn) receiveBySequence(ctx context.Context, e *placementpb.Entity, q partitionpb.SubQueue, body amqp.Map, req *rpcRequest) {
	seqs, ok := sequenceNumbers(body)
	if !ok {
		req.fail(failInvalid, "receive-by-sequence-number needs sequence-numbers")
		return
	}
	// Absent, the mode is receive-and-delete (0), as before this field was
	// checked; a mode of another type or value must not delete messages.
	var mode int64
	if _, ok := body.Get("receiver-settle-mode"); ok {
		var err error
		if mode, err = intField(body, "receiver-settle-mode", 0, 1); err != nil {
			req.fail(failBadField, err.Error())
			return
		}
	}
	rad := mode == 0
	// On a session entity, deferred messages are received under the
	// session lock of the receiver the request names.
	var lock *sessionLock
	if q == partitionpb.SubQueue_SUB_QUEUE_MAIN && e.GetProperties().GetRequiresSession() {
		var ok bool
		if lock, _, ok = c.requestSession(e, body, req); !ok {
			return
		}
		if lock == nil {
			req.fail(failSessionLockLost, "receive deferred messages of a session through its session receiver")
			return
		}
	}
	var list []any
	for p, ns := range byPartition(seqs) {
		rd := &partitionpb.ReceiveDeferredRequest{
			Partition: p, SubQueue: q, SequenceNumbers: ns, ReceiveAndDelete: rad,
		}
		if lock != nil {
			rd.SessionId, rd.SessionToken = lock.id, lock.token
		}
		res, err := served(c.srv, ctx, e, p, 0, func(ctx context.Context) (*partitionpb.Result, error) {
			return c.srv.cfg.Backend.ReceiveDeferred(ctx, e, rd)
		})
		if err != nil {
			req.fail(errFailure(err), "")
			return
		}
		if res.GetCode() == partitionpb.ResultCode_RESULT_INVALID {
			continue // none of this partition's numbers is a deferred message
		}
		c.srv.throttle.charge(int64(len(res.Messages))) // 1 a message received
		if f, failed := resultFailure(res.GetCode()); failed {
			req.fail(f, res.GetDescription())
			return
		}
		for _, m := range res.Messages {
			payload, err := outgoing(nil, m, !rad)
			if err != nil {
				req.fail(failInternal, err.Error())
				return
			}
			item := amqp.Map{{Key: "message", Value: payload}}
			if !rad {
				item.Set("lock-token", amqp.UUID(lockTokenUUID(m.LockToken)))
			}
			list = append(list, item)
		}
	}
	if len(list) == 0 {
		req.fail(failNotFound, "no deferred message with those sequence numbers")
		return
	}
	req.respond(200, "OK", amqp.Map{{Key: "messages", Value: list}})
}
