package partition

import (
	"fmt"
	"math"

	"github.com/quorumbus/quorumbus/partition/store"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// Bounds on the work of one command, so that a store batch stays bounded
// whatever the backlog. They are part of the replicated behaviour: change
// them only with a new batch format.
const (
	// MaxLockCount caps Lock.max_count.
	MaxLockCount = 5000
	// MaxLockBytes bounds what one Lock takes: it stops once the messages
	// it took reach this size (see messageSize), but takes at least one.
	MaxLockBytes = 8 << 20
	// MaxSequenceNumbers caps the sequence numbers of one CancelScheduled
	// or LockBySequence.
	MaxSequenceNumbers = 5000
	// MaxMessageIDBytes caps a message id on an entity with duplicate
	// detection (Service Bus allows 128 characters), so that dedup keys
	// stay small.
	MaxMessageIDBytes = 512
)

// Limits bound the work of one time-driven or locking command, so that a
// store batch stays bounded whatever the backlog. They decide results, so
// every replica of a group must apply with the same: production uses the
// defaults; tests lower them (Options.Limits) to reach them with few
// messages. A zero field takes its default.
type Limits struct {
	// LockCount caps a Lock's max_count (default MaxLockCount); LockBytes
	// bounds what one Lock takes, at least one message (MaxLockBytes).
	LockCount int
	LockBytes int64
	// ExpiredPerLock bounds the expired messages one Lock drops on its
	// way; it returns what it took so far when it reaches the bound.
	ExpiredPerLock int
	// ExpiredLocks bounds the locks one ExpireLocks ends; the leader
	// proposes another while NextLockExpiry is still due.
	ExpiredLocks int
	// Activated and ActivateBytes bound the scheduled messages one
	// ActivateScheduled activates (by count, and by size but at least
	// one); the leader proposes another while NextScheduledDue is due.
	Activated     int
	ActivateBytes int64
	// ExpiredMessages bounds the messages one ExpireMessages ends.
	ExpiredMessages int
}

// withDefaults fills the zero fields.
func (l Limits) withDefaults() Limits {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def64 := func(v *int64, d int64) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&l.LockCount, MaxLockCount)
	def64(&l.LockBytes, MaxLockBytes)
	def(&l.ExpiredPerLock, 10_000)
	def(&l.ExpiredLocks, 10_000)
	def(&l.Activated, 10_000)
	def64(&l.ActivateBytes, MaxLockBytes)
	def(&l.ExpiredMessages, 10_000)
	return l
}

// dedupPrune is the number of stale dedup entries one Enqueue prunes at
// least (plus one per message it carries).
const dedupPrune = 64

// Dead-letter reasons the broker sets (the Service Bus names).
const (
	ReasonMaxDeliveryCount = "MaxDeliveryCountExceeded"
	ReasonTTLExpired       = "TTLExpiredException"
)

// applier applies the commands of one Apply call to one indexed batch,
// through which it also reads, so that each command sees the ones before.
type applier struct {
	lim          Limits
	entities     map[ekey]*entity // the machine's, changed in place
	b            store.Batch
	now          int64
	dirty        map[ekey]bool        // entity records to write (or delete)
	locks        map[ekey]bool        // entities whose locks changed
	scheds       map[ekey]bool        // entities whose scheduled index changed
	exps         map[ekey]bool        // entities whose expiry index changed
	slocks       map[ekey]bool        // entities whose session lock index changed (nil until one does)
	woken        map[wakeKey]bool     // sub-queues whose receivers to wake (wake.go)
	replica      string               // this replica's name (Options.Replica)
	bodies       bool                 // results carry message bodies: this replica answers the batch
	reqFloor     *int64               // the machine's: no request result is older (requests.go)
	reqFilter    *store.RequestFilter // the machine's: ids recorded since it loaded
	lockedStates *store.LockedStates  // the machine's: state records of locked messages (lockcache.go)
	recordLocks  bool                 // locking commands list what they hand out in handedOut (lockOnce)
	handedOut    []uint64             // their sequence numbers

	// Bodies kept in the Raft log (logbodies.go); logs is nil if not.
	logs  *logReader
	entry uint64 // index of the entry being applied
	data  []byte // the entry
	spans []span // where the messages of the Enqueue being applied lie in data
	crcOf crcKey // the bytes keepInLog last took the checksum of
	crc   uint32

	subs  *subscriptionIndex // the machine's (fanout.go)
	plans *planCounts        // the machine's (plan.go)
	// The leader's plans of the entry's sends to topics, by command
	// (plansOf), and the index of the command being applied.
	topicPlans []*partitionpb.TopicPlan
	cmd        int
	views      lazyViews // the entry's filter views not decoded yet (decode.go)
	// topicSizes: the changes of topics' sizes in the entry being
	// applied, by topic partition (topiccounts.go).
	topicSizes map[ekey]int64

	format byte // the format of the entry being applied (codec.go)
}

func (a *applier) applyEntry(e Entry) ([]*partitionpb.Result, error) {
	if len(e.Data) == 0 {
		return nil, nil
	}
	a.views = lazyViews{}
	batch, err := decodeEntry(e.Data, a.views)
	if err != nil {
		return nil, err
	}
	a.now = batch.NowMs
	a.format = e.Data[0]
	a.bodies = a.replica == "" || batch.Proposer == "" || batch.Proposer == a.replica
	requests := 0
	for _, c := range batch.Commands {
		if len(c.RequestId) > 0 {
			requests++
		}
	}
	if err := a.pruneRequests(requestPrune + requests); err != nil {
		return nil, err
	}
	// Where each message lies in the entry: what the copies name while
	// their bodies are in the log, and what names a topic message's
	// shared body (bodyBlobID) either way.
	spans := enqueueSpans(e.Data)
	if len(spans) != len(batch.Commands) {
		spans = nil // stored whole
	}
	a.entry, a.data = e.Index, e.Data
	a.topicPlans = plansOf(batch)
	results := make([]*partitionpb.Result, len(batch.Commands))
	for i, c := range batch.Commands {
		a.cmd = i
		a.spans = nil
		if spans != nil {
			a.spans = spans[i]
		}
		r, err := a.applyOnce(c)
		if err != nil {
			return nil, fmt.Errorf("command %d: %w", i, err)
		}
		results[i] = r
	}
	a.flushTopicSizes()
	return results, nil
}

// result turns a rejection (see Code) into its result; any other error is
// a failure.
func result(r *partitionpb.Result, err error) (*partitionpb.Result, error) {
	if code, ok := Code(err); err != nil && ok {
		return &partitionpb.Result{Code: code, Description: err.Error()}, nil
	}
	return r, err
}

// apply applies one command. A rejection (see Code) is returned before
// anything is written; any other error is a failure.
func (a *applier) apply(c *partitionpb.Command) (*partitionpb.Result, error) {
	r, err := a.applyOp(c)
	if err == nil {
		a.touch(c)
	}
	return r, err
}

// touch notes that a command sent to or received from an entity
// partition: Service Bus's AccessedAt is the last such request. It costs
// no entry of its own: the entity takes the now_ms of the batch that
// carried the command, which every replica applies alike, and it is
// written with the entity record the command writes anyway. A receive
// that waits for messages is proposed once they are there, so waiting on
// an empty entity does not count (Service Bus counts the request).
func (a *applier) touch(c *partitionpb.Command) {
	var k ekey
	switch op := c.GetOp().(type) {
	case *partitionpb.Command_Enqueue:
		k = ekey{ID: op.Enqueue.EntityId, Part: op.Enqueue.Partition}
	case *partitionpb.Command_Lock:
		k = ekey{ID: op.Lock.EntityId, Part: op.Lock.Partition}
	case *partitionpb.Command_LockBySequence:
		k = ekey{ID: op.LockBySequence.EntityId, Part: op.LockBySequence.Partition}
	default:
		return
	}
	if e := a.entities[k]; e != nil && a.now > e.accessed {
		e.accessed = a.now
		a.dirty[k] = true
	}
}

func (a *applier) applyOp(c *partitionpb.Command) (*partitionpb.Result, error) {
	switch op := c.GetOp().(type) {
	case *partitionpb.Command_UpsertEntity:
		return a.upsertEntity(op.UpsertEntity)
	case *partitionpb.Command_DeleteEntity:
		return a.deleteEntity(op.DeleteEntity)
	case *partitionpb.Command_Enqueue:
		return a.enqueue(op.Enqueue)
	case *partitionpb.Command_Lock:
		return a.lock(op.Lock)
	case *partitionpb.Command_Settle:
		return a.settle(op.Settle)
	case *partitionpb.Command_RenewLocks:
		return a.renewLocks(op.RenewLocks)
	case *partitionpb.Command_ExpireLocks:
		return a.expireLocks()
	case *partitionpb.Command_ActivateScheduled:
		return a.activateScheduled()
	case *partitionpb.Command_CancelScheduled:
		return a.cancelScheduled(op.CancelScheduled)
	case *partitionpb.Command_LockBySequence:
		return a.lockBySequence(op.LockBySequence)
	case *partitionpb.Command_ExpireMessages:
		return a.expireMessages()
	case *partitionpb.Command_StageBody:
		return a.stageBody(op.StageBody)
	case *partitionpb.Command_AcceptSession:
		return a.acceptSession(op.AcceptSession)
	case *partitionpb.Command_RenewSessionLock:
		return a.renewSessionLock(op.RenewSessionLock)
	case *partitionpb.Command_SetSessionState:
		return a.setSessionState(op.SetSessionState)
	case *partitionpb.Command_ReleaseSession:
		return a.releaseSession(op.ReleaseSession)
	case *partitionpb.Command_ExpireSessionLocks:
		return a.expireSessionLocks()
	case *partitionpb.Command_Purge:
		return a.purge(op.Purge)
	case *partitionpb.Command_Redrive:
		return a.redrive(op.Redrive)
	default:
		// A newer leader's command: applying nothing would diverge from the
		// replicas that know it, so the group stops.
		return nil, ErrUnknownCommand
	}
}

func okResult() *partitionpb.Result { return &partitionpb.Result{} }

func (a *applier) entity(id uint64, part uint32) (*entity, error) {
	e, ok := a.entities[ekey{ID: id, Part: part}]
	if !ok {
		return nil, fmt.Errorf("%w: %d/%d", ErrEntityNotFound, id, part)
	}
	return e, nil
}

func (e *entity) status() partitionpb.EntityStatus { return partitionpb.EntityStatus(e.cfg.Status) }

func (e *entity) checkSend() error {
	switch e.status() {
	case partitionpb.EntityStatus_ENTITY_STATUS_DISABLED, partitionpb.EntityStatus_ENTITY_STATUS_SEND_DISABLED:
		return fmt.Errorf("%w: %s is %s", ErrEntityDisabled, e.cfg.Name, e.status())
	}
	return nil
}

// checkReceive guards Lock, Settle and RenewLocks: settling is part of
// receiving.
func (e *entity) checkReceive() error {
	switch e.status() {
	case partitionpb.EntityStatus_ENTITY_STATUS_DISABLED, partitionpb.EntityStatus_ENTITY_STATUS_RECEIVE_DISABLED:
		return fmt.Errorf("%w: %s is %s", ErrEntityDisabled, e.cfg.Name, e.status())
	}
	return nil
}

// receiving returns the entity partition a receive-side command (Lock,
// Settle, RenewLocks, LockBySequence) names, if it may be received from and
// the sub-queue is valid.
func (a *applier) receiving(id uint64, part uint32, sub partitionpb.SubQueue) (*entity, error) {
	e, err := a.entity(id, part)
	if err != nil {
		return nil, err
	}
	if err := e.checkReceive(); err != nil {
		return nil, err
	}
	if err := checkSubQueue(sub); err != nil {
		return nil, err
	}
	return e, nil
}

// checkTokenSeed checks the seed of the lock tokens a peek-lock command
// hands out.
func checkTokenSeed(receiveAndDelete bool, seed []byte) error {
	if !receiveAndDelete && len(seed) != 8 {
		return fmt.Errorf("%w: token seed of %d bytes, want 8", ErrInvalid, len(seed))
	}
	return nil
}

func checkSubQueue(q partitionpb.SubQueue) error {
	if !validSubQueue(q) {
		return fmt.Errorf("%w: sub-queue %d", ErrInvalid, q)
	}
	return nil
}

// ---------------------------------------------------------------------------
// Commands.

func (a *applier) upsertEntity(c *partitionpb.UpsertEntity) (*partitionpb.Result, error) {
	cfg, err := normalizeConfig(c.GetConfig())
	if err != nil {
		return nil, err
	}
	k := ekey{ID: cfg.EntityId, Part: cfg.Partition}
	e, ok := a.entities[k]
	if ok && cfg.Version != 0 && cfg.Version < e.cfg.Version {
		return okResult(), nil // superseded: a newer configuration is in place
	}
	if !ok && cfg.Version != 0 {
		deleted, err := a.b.Tombstone(k)
		if err != nil {
			return nil, err
		}
		if deleted >= cfg.Version {
			return okResult(), nil // superseded: deleted after this configuration
		}
		if deleted > 0 { // re-created: the tombstone has done its work
			if err := a.b.DeleteTombstone(k); err != nil {
				return nil, err
			}
		}
	}
	rules, err := compileRules(cfg)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrInvalid, cfg.Name, err)
	}
	if !ok {
		e = newEntity(k)
		e.topicSchedFloor = math.MaxInt64 // a new entity partition holds nothing
		a.entities[k] = e
		if isTopic(cfg) {
			a.countTopicSize(e)
		}
	}
	e.cfg = cfg // the counters and the next sequence number stay
	e.rules, e.rulesSum = rules, rulesSum(cfg)
	a.subs.stale()
	a.dirty[k] = true
	a.wakeEntity(k) // receiving may have been enabled
	return okResult(), nil
}

// deleteEntity deletes an entity partition and everything it holds. A
// versioned delete also leaves a tombstone (even for an entity this group
// never saw: its upsert may still be on the way), and is ignored by an
// entity whose configuration is newer than it.
func (a *applier) deleteEntity(c *partitionpb.DeleteEntity) (*partitionpb.Result, error) {
	k := ekey{ID: c.EntityId, Part: c.Partition}
	e, ok := a.entities[k]
	if c.Version != 0 {
		if ok && e.cfg.Version > c.Version {
			return okResult(), nil // superseded: re-created after this delete
		}
		deleted, err := a.b.Tombstone(k)
		if err != nil {
			return nil, err
		}
		if c.Version > deleted {
			if err := a.b.PutTombstone(k, c.Version); err != nil {
				return nil, err
			}
		}
		if !ok {
			return okResult(), nil
		}
	}
	if !ok {
		return nil, fmt.Errorf("%w: %d/%d", ErrEntityNotFound, c.EntityId, c.Partition)
	}
	if err := a.deleteEntityData(e); err != nil {
		return nil, err
	}
	a.releaseShares(e)
	delete(a.entities, e.key)
	a.subs.stale()
	a.dirty[e.key] = true
	a.locks[e.key] = true
	a.wakeEntity(e.key) // wake receivers, who will find it gone
	return okResult(), nil
}

func (a *applier) enqueue(c *partitionpb.Enqueue) (*partitionpb.Result, error) {
	e, err := a.entity(c.EntityId, c.Partition)
	if err != nil {
		return nil, err
	}
	if err := e.checkSend(); err != nil {
		return nil, err
	}
	dedup := e.cfg.RequiresDuplicateDetection
	var size int64
	for i, nm := range c.Messages {
		if nm.TtlMs < 0 {
			return nil, fmt.Errorf("%w: message %d: ttl %d ms", ErrInvalid, i, nm.TtlMs)
		}
		if dedup && len(nm.MessageId) > MaxMessageIDBytes {
			return nil, fmt.Errorf("%w: message %d: message id of %d bytes, at most %d", ErrInvalid, i, len(nm.MessageId), MaxMessageIDBytes)
		}
		if err := a.checkStaged(e, i, nm); err != nil {
			return nil, err
		}
		if e.cfg.RequiresSession {
			if err := checkSessionID(nm.SessionId); err != nil {
				return nil, fmt.Errorf("%w: message %d: %s requires sessions, and every message needs a session id of at most %d bytes", err, i, e.cfg.Name, MaxSessionIDBytes)
			}
		}
		size += newMessageSize(nm)
	}
	// A topic's quota is its subscriptions' (publish); its own size,
	// their shares (topiccounts.go), is reported and not enforced.
	if max := e.cfg.MaxSizeBytes; max > 0 && !isTopic(e.cfg) && e.n.size+size > max {
		return nil, fmt.Errorf("%w: %s holds %d bytes, %d more exceed its %d", ErrQuotaExceeded, e.cfg.Name, e.n.size, size, max)
	}
	if err := checkForwarded(e, c); err != nil {
		return nil, err
	}
	if len(a.spans) != len(c.Messages) {
		a.spans = nil // the walk and the decoder disagree: store bodies whole
	}
	if isTopic(e.cfg) {
		return a.publish(e, c)
	}
	if err := a.pruneDedup(e, dedupPrune+len(c.Messages)); err != nil {
		return nil, err
	}
	if err := a.pruneForward(e, dedupPrune+len(c.Messages)); err != nil {
		return nil, err
	}
	r := &partitionpb.Result{SequenceNumbers: make([]uint64, 0, len(c.Messages))}
	for i, nm := range c.Messages {
		var origin []byte
		var took *forwardEntry
		if nm.Forwarded != nil {
			origin = originID(nm.Forwarded)
			if took, err = a.forwardEntry(e, origin); err != nil {
				return nil, err
			}
			if took.fresh(a.now) {
				// Forwarded again after a failure: the destination has
				// it. Answered as a duplicate is.
				r.SequenceNumbers = append(r.SequenceNumbers, took.seq)
				if len(nm.StagedBody) > 0 {
					if err := a.dropBlob(e, nm.StagedBody); err != nil {
						return nil, err
					}
				}
				continue
			}
		}
		var seen *dedupEntry
		if dedup && nm.MessageId != "" {
			d, err := a.dedupEntry(e, nm.MessageId)
			if err != nil {
				return nil, err
			}
			if d != nil && a.now-d.at < e.cfg.DuplicateDetectionWindowMs {
				// A duplicate: acknowledged, dropped, answered with the
				// number of the message it duplicates.
				r.SequenceNumbers = append(r.SequenceNumbers, d.seq)
				if len(nm.StagedBody) > 0 {
					if err := a.dropBlob(e, nm.StagedBody); err != nil {
						return nil, err
					}
				}
				continue
			}
			seen = &dedupEntry{}
			if d != nil {
				seen = d
			}
		}
		m := &partitionpb.StoredMessage{
			SequenceNumber:         e.nextSequence(),
			EnqueuedTimeMs:         a.now,
			SubQueue:               partitionpb.SubQueue_SUB_QUEUE_MAIN,
			State:                  partitionpb.MessageState_MESSAGE_STATE_ACTIVE,
			ScheduledEnqueueTimeMs: nm.ScheduledEnqueueTimeMs,
			MessageId:              nm.MessageId,
			SessionId:              nm.SessionId,
			PartitionKey:           nm.PartitionKey,
			Header:                 nm.Header,
			Annotations:            nm.Annotations,
			Bare:                   nm.Bare,
			TtlMs:                  nm.TtlMs,
		}
		if m.TtlMs == 0 {
			m.TtlMs = e.cfg.DefaultTtlMs
		}
		withOrigin(m, nm.Forwarded)
		switch blob := a.sharedBodyID(nm, i); {
		case len(nm.StagedBody) > 0:
			if err := a.takeBlob(e, nm, m); err != nil {
				return nil, err
			}
		case blob != nil && isSubscription(e.cfg):
			// Sent to the subscription itself (a re-drive): kept as its
			// topic's copies are, since a snapshot cannot tell them apart.
			if err := a.shareBody(e, m, blob, 1); err != nil {
				return nil, err
			}
		default:
			a.keepInLog(m, i)
		}
		// A scheduled message's time to live starts when it is due.
		from := a.now
		if nm.ScheduledEnqueueTimeMs > a.now {
			m.State = partitionpb.MessageState_MESSAGE_STATE_SCHEDULED
			from = nm.ScheduledEnqueueTimeMs
		}
		if m.TtlMs > 0 && from <= math.MaxInt64-m.TtlMs {
			m.ExpiresAtMs = from + m.TtlMs
		}
		if err := a.add(e, m, false); err != nil {
			return nil, err
		}
		if seen != nil {
			if err := a.recordDedup(e, nm.MessageId, m.SequenceNumber, seen); err != nil {
				return nil, err
			}
		}
		if origin != nil {
			if err := a.recordForward(e, origin, m.SequenceNumber, took); err != nil {
				return nil, err
			}
		}
		r.SequenceNumbers = append(r.SequenceNumbers, m.SequenceNumber)
	}
	return r, nil
}
