package partition

import (
	"encoding/binary"
	"fmt"
	"math"

	"google.golang.org/protobuf/proto"

	"github.com/quorumbus/quorumbus/partition/store"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// Limits and defaults of entity configs (Service Bus: lock duration one
// minute by default, five at most; ten deliveries).
const (
	DefaultLockDurationMs   = 60_000
	MaxLockDurationMs       = 300_000
	DefaultMaxDeliveryCount = 10
	MaxPartition            = 1<<16 - 1 // the top 16 bits of a sequence number

	// Duplicate detection history: ten minutes by default, from 20
	// seconds to 7 days.
	DefaultDuplicateDetectionWindowMs = 10 * 60_000
	MinDuplicateDetectionWindowMs     = 20_000
	MaxDuplicateDetectionWindowMs     = 7 * 24 * 3600_000
)

// Sequence numbers: the partition index in the top 16 bits, a 48-bit
// counter below (partitionpb.SequenceNumber). The counter starts at 1 and
// wraps to 0 when exhausted.

// ekey names an entity partition (the key space is partition/store's:
// store/doc.go).
type ekey = store.EntityKey

// entity is what the machine keeps in memory of an entity partition: its
// config and counters (small and bounded by the number of entity
// partitions, never by the backlog). It is persisted as the entity record.
type entity struct {
	key ekey
	cfg *partitionpb.EntityConfig // normalized: defaults filled in
	// rules: a subscription's rules, compiled from cfg (fanout.go), and
	// rulesSum, what its topic's fingerprint takes of cfg (plan.go).
	rules    []compiledRule
	rulesSum uint64
	next     uint64 // the counter of the next sequence number
	n        counts
	// accessed is the now_ms of the last command that sent to or
	// received from the entity partition (applier.touch); 0: never.
	accessed int64
	// fresh: main-queue messages with this sequence number or higher have
	// not been handed out since they arrived. They have no entry in the
	// available index: Lock takes them from the state records themselves,
	// in sequence order, after the index, whose entries are all below
	// fresh. It spares the index an entry and its deletion for every
	// message consumed in order. It only grows; after the 48-bit sequence
	// counter wraps, new messages sit below it and are indexed.
	fresh uint64
	// freshLeft: the last Lock's walk of the fresh messages stopped at
	// its limits on an available one, and no fresh message has been
	// changed or removed since (applier.index clears it), so Available
	// need not read the store to say yes: it read one state record
	// through every level of the LSM for each receive a node was asked,
	// and a topic's drain by forty links asks several times a plain
	// queue's per delivery. In memory only: it changes no record and no
	// result.
	freshLeft bool

	// locks follows the lock grants: their earliest end and where scans
	// of them start (store.LockIndex).
	locks store.LockIndex

	// Where scans start. Deleted index entries stay in the LSM as
	// tombstones until compaction, and a queue deletes at its head all the
	// time: scanning from the start of an index would step over every
	// message consumed lately. These bounds only say where no entry is;
	// they change no result. Every write below a bound lowers it.
	availHead [2]uint64 // per sub-queue: no available entry below this sequence number
	// ready: where accept-next's scan of the ready sessions starts
	// (store.ReadyIndex).
	ready store.ReadyIndex

	// The scheduled and expiry indexes: their earliest time in the
	// committed store, and where their scans start.
	sched, exp store.TimeIndex
	// slock: the index of session locks by their end (store/timeindex.go).
	slock store.TimeIndex
	// dedupFloor: no dedup time entry is earlier than this.
	dedupFloor int64
	// forwardFloor: no forwarded-origin time entry is earlier (forward.go).
	forwardFloor int64
	// topicSchedFloor: no scheduled topic message's time entry is
	// earlier (topicsched.go).
	topicSchedFloor int64
	// uncounted: a topic partition loaded from an entity record written
	// before topics kept their scheduled counter (topiccounts.go).
	uncounted bool
}

func newEntity(k ekey) *entity {
	return &entity{
		key: k, next: 1, locks: store.NewLockIndex(k), ready: store.NewReadyIndex(k),
		sched:      store.NewScheduledIndex(k),
		exp:        store.NewExpiryIndex(k),
		slock:      store.NewSessionLockIndex(k),
		dedupFloor: math.MinInt64,

		forwardFloor:    math.MinInt64,
		topicSchedFloor: math.MinInt64,
	}
}

// counts are an entity partition's message counters (see StatsResponse).
// active counts the main sub-queue's active and deferred messages, locked
// or not; dead counts the dead-letter sub-queue; locked counts locks in
// either sub-queue; size sums the messages' sizes (see messageSize);
// share sums their topic shares (a subscription's part of its topic's
// size, topiccounts.go).
//
// A topic partition holds no messages: its size is the sum of the shares
// of its subscriptions' copies, and scheduled the number of messages
// scheduled on it (topiccounts.go); its other counters stay 0.
type counts struct {
	active, dead, scheduled, locked, size, share int64
}

func (e *entity) nextSequence() uint64 {
	seq := partitionpb.SequenceNumber(e.key.Part, e.next)
	e.next = (e.next + 1) & partitionpb.SequenceCounterMask
	return seq
}

// indexEmpty reports whether sub-queue q has no entry in the available
// index, without reading it: the main queue's entries all lie in
// [availHead, fresh), so none when availHead has reached fresh (Lock moves
// it there when a scan of the index ran out; a message indexed below it
// moves it back, applier.index). A queue consumed in order then opens no
// iterator over the index at each Lock or Machine.Available, a cost that
// draining many subscriptions at once would pay for each of them.
func (e *entity) indexEmpty(q partitionpb.SubQueue) bool {
	return q == partitionpb.SubQueue_SUB_QUEUE_MAIN && e.availHead[q] >= e.fresh
}

// indexedAvailable reports whether an available message in slot s has an
// entry in the available index: all do but the fresh ones (entity.fresh).
func (e *entity) indexedAvailable(s store.Slot) bool {
	return s.Sub != partitionpb.SubQueue_SUB_QUEUE_MAIN || s.Seq < e.fresh
}

// messageSize is what a message counts against max_size_bytes: the
// sections the sender sent. It never changes while the message lives.
func messageSize(m *partitionpb.StoredMessage) int64 {
	if len(m.BodyBlob) > 0 {
		return int64(len(m.Header)+len(m.Annotations)) + int64(m.BodyBlobLength)
	}
	return int64(len(m.Header) + len(m.Annotations) + len(m.Bare))
}

func newMessageSize(m *partitionpb.NewMessage) int64 {
	return int64(len(m.Header)+len(m.Annotations)+len(m.Bare)) + int64(m.StagedLength)
}

func (c *counts) add(s store.Slot, d int64) {
	switch {
	case s.Sub == partitionpb.SubQueue_SUB_QUEUE_DEAD_LETTER:
		c.dead += d
	case s.State == partitionpb.MessageState_MESSAGE_STATE_SCHEDULED:
		c.scheduled += d
	default:
		c.active += d
	}
	if s.Locked {
		c.locked += d
	}
	c.size += d * s.Size
	c.share += d * s.Share
}

func (c counts) stats() *partitionpb.StatsResponse {
	return &partitionpb.StatsResponse{
		ActiveMessages:     uint64(c.active),
		DeadLetterMessages: uint64(c.dead),
		ScheduledMessages:  uint64(c.scheduled),
		LockedMessages:     uint64(c.locked),
		SizeBytes:          uint64(c.size),
	}
}

// stats is the entity partition's answer to Stats.
func (e *entity) stats() *partitionpb.StatsResponse {
	st := e.n.stats()
	st.AccessedAtMs = e.accessed
	return st
}

// normalizeConfig checks an entity config and fills in defaults.
func normalizeConfig(c *partitionpb.EntityConfig) (*partitionpb.EntityConfig, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: upsert without config", ErrInvalid)
	}
	c = proto.Clone(c).(*partitionpb.EntityConfig)
	switch {
	case c.Partition > MaxPartition:
		return nil, fmt.Errorf("%w: partition %d > %d", ErrInvalid, c.Partition, MaxPartition)
	case c.LockDurationMs < 0 || c.LockDurationMs > MaxLockDurationMs:
		return nil, fmt.Errorf("%w: lock duration %d ms not in [0, %d]", ErrInvalid, c.LockDurationMs, MaxLockDurationMs)
	case c.DefaultTtlMs < 0:
		return nil, fmt.Errorf("%w: default ttl %d ms", ErrInvalid, c.DefaultTtlMs)
	case c.MaxSizeBytes < 0:
		return nil, fmt.Errorf("%w: max size %d bytes", ErrInvalid, c.MaxSizeBytes)
	case c.DuplicateDetectionWindowMs != 0 &&
		(c.DuplicateDetectionWindowMs < MinDuplicateDetectionWindowMs || c.DuplicateDetectionWindowMs > MaxDuplicateDetectionWindowMs):
		return nil, fmt.Errorf("%w: duplicate detection window %d ms not in [%d, %d]", ErrInvalid,
			c.DuplicateDetectionWindowMs, MinDuplicateDetectionWindowMs, MaxDuplicateDetectionWindowMs)
	case c.Status > uint32(partitionpb.EntityStatus_ENTITY_STATUS_RECEIVE_DISABLED):
		return nil, fmt.Errorf("%w: status %d", ErrInvalid, c.Status)
	}
	if c.LockDurationMs == 0 {
		c.LockDurationMs = DefaultLockDurationMs
	}
	if c.MaxDeliveryCount == 0 {
		c.MaxDeliveryCount = DefaultMaxDeliveryCount
	}
	if c.DuplicateDetectionWindowMs == 0 {
		c.DuplicateDetectionWindowMs = DefaultDuplicateDetectionWindowMs
	}
	return c, nil
}

// The entity record: a version byte, the next counter, the counters and
// fresh, then (from version 3) the access time, then (from version 4) the
// topic shares held, then the config in protobuf. Version 2 records,
// written before the access time was kept, read as never accessed;
// records before version 4, written before topics were counted, hold no
// shares, and a topic's scheduled counter is counted when it loads
// (Machine.load).
const (
	entityRecordV2  = 2
	entityRecordV3  = 3
	entityRecordV4  = 4
	entityRecordLen = 1 + 8*7 // version 2's fixed part; version 3 adds 8, version 4 another 8
)

func (e *entity) record() []byte {
	b := make([]byte, 0, entityRecordLen+16+marshal.Size(e.cfg))
	b = append(b, entityRecordV4)
	for _, v := range []uint64{e.next, uint64(e.n.active), uint64(e.n.dead), uint64(e.n.scheduled), uint64(e.n.locked), uint64(e.n.size), e.fresh, uint64(e.accessed), uint64(e.n.share)} {
		b = binary.BigEndian.AppendUint64(b, v)
	}
	b, err := marshal.MarshalAppend(b, e.cfg)
	if err != nil {
		panic(fmt.Sprintf("partition: marshal entity config: %v", err)) // a generated message always marshals
	}
	return b
}

func parseEntityRecord(k ekey, p []byte) (*entity, error) {
	fixed := entityRecordLen
	switch {
	case len(p) >= entityRecordLen && p[0] == entityRecordV2:
	case len(p) >= entityRecordLen+8 && p[0] == entityRecordV3:
		fixed += 8
	case len(p) >= entityRecordLen+16 && p[0] == entityRecordV4:
		fixed += 16
	default:
		return nil, fmt.Errorf("%w: entity %s: bad record", ErrCorrupt, k)
	}
	u := func(i int) uint64 { return binary.BigEndian.Uint64(p[1+8*i:]) }
	e := newEntity(k)
	e.next = u(0)
	e.n = counts{active: int64(u(1)), dead: int64(u(2)), scheduled: int64(u(3)), locked: int64(u(4)), size: int64(u(5))}
	e.fresh = u(6)
	if p[0] >= entityRecordV3 {
		e.accessed = int64(u(7))
	}
	if p[0] >= entityRecordV4 {
		e.n.share = int64(u(8))
	}
	e.cfg = new(partitionpb.EntityConfig)
	if err := proto.Unmarshal(p[fixed:], e.cfg); err != nil {
		return nil, fmt.Errorf("%w: entity %s: %v", ErrCorrupt, k, err)
	}
	rules, err := compileRules(e.cfg)
	if err != nil {
		// They compiled when the config was applied.
		return nil, fmt.Errorf("%w: entity %s: rules: %v", ErrCorrupt, k, err)
	}
	e.rules, e.rulesSum = rules, rulesSum(e.cfg)
	e.uncounted = p[0] < entityRecordV4 && isTopic(e.cfg)
	return e, nil
}
