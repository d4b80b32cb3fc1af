package node

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"sync/atomic"
	"time"

	"github.com/quorumbus/quorumbus/partition"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// Auto-forwarding, the source's side (docs/topics.md, "Auto-forwarding").
// While a replica leads its group, a forwarder moves the messages of every
// entity partition that forwards (partition.ForwardSources): it locks a
// batch as a receiver would, sends each message to its destination with
// its origin, and completes the batch only once the destination answered
// that it committed them. If it fails in between, or the leader dies, the
// messages stay (released, or locked until their lock runs out) and are
// sent again; the destination drops an origin it already took
// (partition/forward.go). So a message leaves the source only after it is
// in the destination, and is in the destination once.

// ForwardTarget is where forwarded messages go: the cluster's routing
// (frontend/routing.Router), which cmd wires in.
type ForwardTarget interface {
	Entity(name string) (*placementpb.Entity, error)
	Send(ctx context.Context, e *placementpb.Entity, partition uint32, msgs []*partitionpb.NewMessage) (*partitionpb.Result, error)
}

// forwardSourcer is what the forwarder reads of the state machine
// (partition.Machine has it; test machines need not).
type forwardSourcer interface {
	ForwardSources() []partition.ForwardSource
}

const (
	// forwardBatch bounds the messages one forward locks at once, and
	// forwardBytes the bytes of one send to a destination partition.
	forwardBatch = 64
	forwardBytes = 1 << 20
	// forwardRetry is how long a source whose forward failed waits
	// before it tries again, and forwardPoll how often the forwarder
	// looks again when it cannot wait on every source's wake-up channel.
	forwardRetry = time.Second
	forwardPoll  = 100 * time.Millisecond
	// maxForwardWaits bounds the sources whose wake-up channels one wait
	// watches.
	maxForwardWaits = 64
	// forwardWarnEvery spaces the warnings of a source whose forwards
	// keep failing.
	forwardWarnEvery = time.Minute
	// forwardSendTimeout bounds one send to a destination.
	forwardSendTimeout = 30 * time.Second
	// forwardSessionBatches bounds the batches the forwarder moves from
	// one session before it releases it, so that a long session does not
	// hold back the other sources; it accepts the session again later.
	forwardSessionBatches = 16
)

// Reasons a forwarder dead-letters a message with.
const (
	reasonHopCount = "MaxTransferHopCountExceeded"
)

// SetForwardTarget sets where the node's forwarders send forwarded
// messages; without one, entities that forward keep their messages until
// one is set.
func (n *Node) SetForwardTarget(t ForwardTarget) {
	n.forward.Store(&t)
}

func (n *Node) forwardTarget() ForwardTarget {
	if p := n.forward.Load(); p != nil {
		return *p
	}
	return nil
}

// forwardHolder holds a ForwardTarget for atomic.Pointer.
type forwardHolder = atomic.Pointer[ForwardTarget]

// runForwarder forwards the group's messages while ctx, a leadership
// term, lasts.
func (g *group) runForwarder(ctx context.Context) {
	fs, ok := g.machine.(forwardSourcer)
	if !ok {
		return
	}
	retryAt := map[partition.ForwardSource]time.Time{}
	warned := map[partition.ForwardSource]time.Time{}
	for ctx.Err() == nil {
		target := g.node.forwardTarget()
		if target == nil {
			waitAny(ctx, nil, forwardRetry) // none yet: SetForwardTarget may come later
			continue
		}
		sources := fs.ForwardSources()
		var waits []<-chan struct{}
		moved := false
		for _, s := range sources {
			if ctx.Err() != nil {
				return
			}
			if t, ok := retryAt[s]; ok && time.Now().Before(t) {
				continue
			}
			delete(retryAt, s)
			if len(waits) < maxForwardWaits {
				waits = append(waits, g.machine.Changed(s.EntityID, s.Partition, s.SubQueue))
			}
			if s.Sessions && !g.machine.SessionReady(s.EntityID, s.Partition) ||
				!s.Sessions && !g.machine.Available(s.EntityID, s.Partition, s.SubQueue) {
				continue
			}
			var n int
			var err error
			if s.Sessions {
				n, err = g.forwardSession(ctx, target, s)
			} else {
				n, err = g.forward(ctx, target, s, nil)
			}
			if err != nil {
				// A destination that does not exist yet fails every
				// second: say so once a minute per source.
				if ctx.Err() == nil && time.Since(warned[s]) >= forwardWarnEvery {
					warned[s] = time.Now()
					g.log.Warn("auto-forwarding failed; the messages stay in the source and are sent again",
						"entity", s.Name, "to", s.To, "sub_queue", s.SubQueue, "err", err)
				}
				retryAt[s] = time.Now().Add(forwardRetry)
			}
			moved = moved || n > 0
		}
		if moved {
			continue
		}
		wait := forwardRetry
		if len(sources) > 0 && (len(sources) > maxForwardWaits || len(retryAt) > 0) {
			wait = forwardPoll
		}
		waitAny(ctx, waits, wait)
	}
}

// waitAny returns when one of chans is closed, after d, or when ctx ends.
func waitAny(ctx context.Context, chans []<-chan struct{}, d time.Duration) {
	woke := make(chan struct{}, 1)
	done := make(chan struct{})
	defer close(done)
	for _, ch := range chans {
		go func() {
			select {
			case <-ch:
				select {
				case woke <- struct{}{}:
				default:
				}
			case <-done:
			}
		}()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-woke:
	case <-t.C:
	case <-ctx.Done():
	}
}

// heldSession is a session the forwarder accepted: its id and lock.
type heldSession struct {
	id    string
	token []byte
}

// forwardSession moves the messages of one ready session of source s (an
// entity that requires sessions): it accepts the next session as a
// session receiver does, so that no receiver takes it meanwhile, forwards
// its messages in order, batch by batch, and releases it. Messages keep
// their session id, which also picks their destination partition. If the
// leader dies holding the session, or a step fails, the session is not
// released: its lock runs out (the source's LockDuration) with the locks
// of its messages, and the next forwarder sends them again, in order,
// deduplicated by the destination.
func (g *group) forwardSession(ctx context.Context, target ForwardTarget, s partition.ForwardSource) (int, error) {
	token := make([]byte, partitionpb.LockTokenBytes)
	rand.Read(token) // never fails (crypto/rand)
	res, err := g.propose1(ctx, &partitionpb.Command{Op: &partitionpb.Command_AcceptSession{AcceptSession: &partitionpb.AcceptSession{
		EntityId: s.EntityID, Partition: s.Partition, Next: true, Token: token,
	}}})
	if err != nil {
		return 0, fmt.Errorf("accepting a session: %w", err)
	}
	if res.Code != partitionpb.ResultCode_RESULT_OK {
		return 0, fmt.Errorf("accepting a session: %v %s", res.Code, res.Description)
	}
	if res.SessionId == "" {
		return 0, nil // a receiver took it first
	}
	held := &heldSession{id: res.SessionId, token: token}
	total := 0
	for range forwardSessionBatches {
		n, err := g.forward(ctx, target, s, held)
		total += n
		if err != nil {
			// Some of the session's messages may still be locked under
			// it (a Lock or a release whose answer was lost): released
			// now, the session's later messages would go first. Its lock
			// runs out instead (the source's LockDuration), with theirs,
			// and the session is forwarded again from its oldest.
			return total, err
		}
		if n == 0 {
			break
		}
	}
	r, err := g.propose1(context.WithoutCancel(ctx), &partitionpb.Command{Op: &partitionpb.Command_ReleaseSession{ReleaseSession: &partitionpb.ReleaseSession{
		EntityId: s.EntityID, Partition: s.Partition, SessionId: held.id, Token: held.token,
	}}})
	if err == nil && r.Code != partitionpb.ResultCode_RESULT_OK {
		err = fmt.Errorf("%v %s", r.Code, r.Description)
	}
	if err != nil && ctx.Err() == nil {
		// Its lock runs out by itself.
		g.log.Warn("auto-forwarding: releasing a session", "entity", s.Name, "session", held.id, "err", err)
	}
	return total, nil
}

// forward moves one batch of source s (of session, if not nil) and
// returns how many messages it took from the source.
func (g *group) forward(ctx context.Context, target ForwardTarget, s partition.ForwardSource, session *heldSession) (int, error) {
	seed := make([]byte, 8)
	rand.Read(seed) // never fails (crypto/rand)
	lock := &partitionpb.Lock{EntityId: s.EntityID, Partition: s.Partition, SubQueue: s.SubQueue, MaxCount: forwardBatch, TokenSeed: seed}
	if session != nil {
		lock.SessionId, lock.SessionToken = session.id, session.token
	}
	res, err := g.propose1(ctx, &partitionpb.Command{Op: &partitionpb.Command_Lock{Lock: lock}})
	if err != nil {
		return 0, fmt.Errorf("locking: %w", err)
	}
	if res.Code != partitionpb.ResultCode_RESULT_OK {
		return 0, fmt.Errorf("locking: %v %s", res.Code, res.Description)
	}
	if len(res.Messages) == 0 {
		return 0, nil
	}
	settle := func(d partitionpb.Disposition, tokens [][]byte, reason, desc string) error {
		if len(tokens) == 0 {
			return nil
		}
		r, err := g.propose1(context.WithoutCancel(ctx), &partitionpb.Command{Op: &partitionpb.Command_Settle{Settle: &partitionpb.Settle{
			EntityId: s.EntityID, Partition: s.Partition, SubQueue: s.SubQueue, LockTokens: tokens, Disposition: d,
			DeadLetterReason: reason, DeadLetterDescription: desc,
		}}})
		if err == nil && r.Code != partitionpb.ResultCode_RESULT_OK {
			// A lock that ran out: the message is back and will be sent
			// again, and deduplicated.
			err = fmt.Errorf("%v %s", r.Code, r.Description)
		}
		return err
	}

	// A message that has taken every hop it may is dead-lettered at the
	// source. Dead-lettered messages move on whatever their hops: the
	// catalog refuses loops, so a dead-letter chain ends.
	var over [][]byte
	var send []*partitionpb.Message
	for _, m := range res.Messages {
		if s.SubQueue == partitionpb.SubQueue_SUB_QUEUE_MAIN && m.ForwardHops >= partition.MaxForwardHops {
			over = append(over, m.LockToken)
			continue
		}
		send = append(send, m)
	}
	if err := settle(partitionpb.Disposition_DISPOSITION_DEAD_LETTER, over,
		reasonHopCount, fmt.Sprintf("the message took %d auto-forwarding hops, the most there may be", partition.MaxForwardHops)); err != nil {
		g.log.Warn("auto-forwarding: dead-lettering over the hop count", "entity", s.Name, "err", err)
	}
	if len(send) == 0 {
		return len(over), nil
	}

	dest, err := target.Entity(s.To)
	if err != nil {
		return 0, errors.Join(fmt.Errorf("destination %s: %w", s.To, err), settle(partitionpb.Disposition_DISPOSITION_RELEASE, tokensOf(send), "", ""))
	}
	// Messages go out per destination partition, in order; a partition
	// whose send failed gets nothing more of this batch, so that its
	// messages stay in order at the source too.
	parts := uint32(max(len(dest.GetPartitionGroups()), 1))
	byPart := map[uint32][]*partitionpb.Message{}
	var order []uint32
	for _, m := range send {
		p := forwardPartition(s, m, dest, parts)
		if _, ok := byPart[p]; !ok {
			order = append(order, p)
		}
		byPart[p] = append(byPart[p], m)
	}
	var done, failed [][]byte
	var sendErr error
	for _, p := range order {
		msgs := byPart[p]
		for len(msgs) > 0 {
			chunk, rest := splitBytes(msgs)
			msgs = rest
			sctx, cancel := context.WithTimeout(ctx, forwardSendTimeout)
			r, err := target.Send(sctx, dest, p, forwardedMessages(s, chunk))
			cancel()
			if err == nil && r.GetCode() != partitionpb.ResultCode_RESULT_OK {
				err = fmt.Errorf("%v %s", r.GetCode(), r.GetDescription())
			}
			if err != nil {
				sendErr = errors.Join(sendErr, fmt.Errorf("sending to %s partition %d: %w", s.To, p, err))
				failed = append(failed, tokensOf(chunk)...)
				failed = append(failed, tokensOf(rest)...)
				break
			}
			done = append(done, tokensOf(chunk)...)
		}
	}
	// Complete what the destination took; release the rest, which the
	// next round sends again (the destination drops what it took of a
	// send whose answer was lost).
	err = errors.Join(sendErr, settle(partitionpb.Disposition_DISPOSITION_COMPLETE, done, "", ""),
		settle(partitionpb.Disposition_DISPOSITION_RELEASE, failed, "", ""))
	return len(done) + len(over), err
}

func tokensOf(ms []*partitionpb.Message) [][]byte {
	out := make([][]byte, len(ms))
	for i, m := range ms {
		out[i] = m.LockToken
	}
	return out
}

// splitBytes splits off the first messages up to forwardBytes (at least
// one).
func splitBytes(ms []*partitionpb.Message) (chunk, rest []*partitionpb.Message) {
	size := 0
	for i, m := range ms {
		size += len(m.Header) + len(m.Annotations) + len(m.Bare)
		if i > 0 && size > forwardBytes {
			return ms[:i], ms[i:]
		}
	}
	return ms, nil
}

// forwardPartition picks the destination partition of a message: by its
// key as a sender's would be (session id, partition key, or message id
// when the destination detects duplicates), else by its origin, so that a
// message sent again goes where it went before, where its origin is
// remembered.
func forwardPartition(s partition.ForwardSource, m *partitionpb.Message, dest *placementpb.Entity, n uint32) uint32 {
	switch {
	case m.SessionId != "":
		return partitionpb.PartitionForKey(m.SessionId, n)
	case m.PartitionKey != "":
		return partitionpb.PartitionForKey(m.PartitionKey, n)
	case m.MessageId != "" && dest.GetProperties().GetRequiresDuplicateDetection():
		return partitionpb.PartitionForKey(m.MessageId, n)
	}
	if n <= 1 {
		return 0
	}
	h := fnv.New32a()
	var b [21]byte
	binary.BigEndian.PutUint64(b[:], s.EntityID)
	binary.BigEndian.PutUint32(b[8:], s.Partition)
	b[12] = byte(s.SubQueue)
	binary.BigEndian.PutUint64(b[13:], m.SequenceNumber)
	h.Write(b[:])
	return h.Sum32() % n
}

// forwardedMessages turns locked messages into sends with their origin.
func forwardedMessages(s partition.ForwardSource, ms []*partitionpb.Message) []*partitionpb.NewMessage {
	out := make([]*partitionpb.NewMessage, len(ms))
	for i, m := range ms {
		o := &partitionpb.ForwardOrigin{
			EntityId: s.EntityID, Partition: s.Partition, SubQueue: s.SubQueue, SequenceNumber: m.SequenceNumber,
			Hops:                  m.ForwardHops + 1,
			DeadLetterReason:      m.DeadLetterReason,
			DeadLetterDescription: m.DeadLetterDescription,
			DeadLetterSource:      m.DeadLetterSource,
			ModifiedProperties:    m.ModifiedProperties,
			ActionSet:             m.ActionSet,
			ActionRemoved:         m.ActionRemoved,
		}
		if s.SubQueue == partitionpb.SubQueue_SUB_QUEUE_DEAD_LETTER && o.DeadLetterSource == "" {
			// Service Bus names the entity the message was dead-lettered
			// in on a message forwarded from a dead-letter queue.
			o.DeadLetterSource = s.Name
		}
		if o.Hops > partition.MaxForwardHops {
			o.Hops = partition.MaxForwardHops // a dead-letter chain: see forward
		}
		out[i] = &partitionpb.NewMessage{
			MessageId: m.MessageId, SessionId: m.SessionId, PartitionKey: m.PartitionKey,
			TtlMs: m.TtlMs, Header: m.Header, Annotations: m.Annotations, Bare: m.Bare,
			Forwarded: o,
		}
	}
	return out
}
