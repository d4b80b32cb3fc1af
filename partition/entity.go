package partition

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"

	"google.golang.org/protobuf/proto"

	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// Limits and defaults of entity configs (Service Bus: lock duration one
// minute by default, five at most; ten deliveries).
const (
	DefaultLockDurationMs   = 60_000
	MaxLockDurationMs       = 300_000
	DefaultMaxDeliveryCount = 10
	MaxPartition            = 1<<16 - 1 // the top 16 bits of a sequence number
)

// Sequence numbers: the partition index in the top 16 bits, a 48-bit
// counter below. The counter starts at 1 and wraps to 0 when exhausted.
const (
	seqBits = 48
	seqMask = 1<<seqBits - 1
)

// entity is what the machine keeps in memory of an entity partition: its
// config and counters (small and bounded by the number of entity
// partitions, never by the backlog). It is persisted as the entity record.
type entity struct {
	key  ekey
	cfg  *partitionpb.EntityConfig // normalized: defaults filled in
	next uint64                    // the counter of the next sequence number
	n    counts

	// minLock is the earliest locked_until_ms of the entity's locks in the
	// committed store; hasLock is false when it has none.
	minLock int64
	hasLock bool

	// Where scans start. Deleted index entries stay in the LSM as
	// tombstones until compaction, and a queue deletes at its head all the
	// time: scanning from the start of an index would step over every
	// message consumed lately. These bounds only say where no entry is;
	// they change no result. Every write below a bound lowers it.
	availHead [2]uint64 // per sub-queue: no available entry below this sequence number
	lockFloor []byte    // no lock entry below this key
}

func newEntity(k ekey) *entity {
	return &entity{key: k, next: 1, lockFloor: kindPrefix(k, kindLock)}
}

// lowerLockFloor notes a lock entry written at key.
func (e *entity) lowerLockFloor(key []byte) {
	if bytes.Compare(key, e.lockFloor) < 0 {
		e.lockFloor = key
	}
}

// lockFloorTime is the earliest locked_until_ms a lock entry may have.
func (e *entity) lockFloorTime() int64 {
	if until, _, _, ok := parseLockKey(e.lockFloor); ok {
		return until
	}
	if bytes.Compare(e.lockFloor, kindPrefix(e.key, kindLock)) <= 0 {
		return math.MinInt64
	}
	return math.MaxInt64 // past the end: no locks
}

// counts are an entity partition's message counters (see StatsResponse).
// active counts the main sub-queue's active and deferred messages, locked
// or not; dead counts the dead-letter sub-queue; locked counts locks in
// either sub-queue; size sums the messages' sizes (see messageSize).
type counts struct {
	active, dead, scheduled, locked, size int64
}

func (e *entity) nextSequence() uint64 {
	seq := uint64(e.key.part)<<seqBits | e.next&seqMask
	e.next = (e.next + 1) & seqMask
	return seq
}

// slot is where a message sits: what decides its key, its index entries
// and the counters it adds to. Taken before a change, it says what to
// remove.
type slot struct {
	sub    partitionpb.SubQueue
	seq    uint64
	state  partitionpb.MessageState
	locked bool
	until  int64
	at     int64 // scheduled enqueue time
	size   int64
}

func slotOf(m *partitionpb.StoredMessage) slot {
	return slot{
		sub:    m.SubQueue,
		seq:    m.SequenceNumber,
		state:  m.State,
		locked: len(m.LockToken) > 0,
		until:  m.LockedUntilMs,
		at:     m.ScheduledEnqueueTimeMs,
		size:   messageSize(m),
	}
}

// available reports whether a message in this slot can be locked (expiry
// aside).
func (s slot) available() bool {
	return s.state == partitionpb.MessageState_MESSAGE_STATE_ACTIVE && !s.locked
}

// messageSize is what a message counts against max_size_bytes: the
// sections the sender sent. It never changes while the message lives.
func messageSize(m *partitionpb.StoredMessage) int64 {
	return int64(len(m.Header) + len(m.Annotations) + len(m.Bare))
}

func newMessageSize(m *partitionpb.NewMessage) int64 {
	return int64(len(m.Header) + len(m.Annotations) + len(m.Bare))
}

func (c *counts) add(s slot, d int64) {
	switch {
	case s.sub == partitionpb.SubQueue_SUB_QUEUE_DEAD_LETTER:
		c.dead += d
	case s.state == partitionpb.MessageState_MESSAGE_STATE_SCHEDULED:
		c.scheduled += d
	default:
		c.active += d
	}
	if s.locked {
		c.locked += d
	}
	c.size += d * s.size
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
	case c.DuplicateDetectionWindowMs < 0:
		return nil, fmt.Errorf("%w: duplicate detection window %d ms", ErrInvalid, c.DuplicateDetectionWindowMs)
	case c.Status > uint32(partitionpb.EntityStatus_ENTITY_STATUS_RECEIVE_DISABLED):
		return nil, fmt.Errorf("%w: status %d", ErrInvalid, c.Status)
	}
	if c.LockDurationMs == 0 {
		c.LockDurationMs = DefaultLockDurationMs
	}
	if c.MaxDeliveryCount == 0 {
		c.MaxDeliveryCount = DefaultMaxDeliveryCount
	}
	return c, nil
}

// The entity record: a version byte, the next counter and the counters,
// then the config in protobuf.
const (
	entityRecordV1  = 1
	entityRecordLen = 1 + 8*6
)

func (e *entity) record() []byte {
	b := make([]byte, 0, entityRecordLen+marshal.Size(e.cfg))
	b = append(b, entityRecordV1)
	for _, v := range []uint64{e.next, uint64(e.n.active), uint64(e.n.dead), uint64(e.n.scheduled), uint64(e.n.locked), uint64(e.n.size)} {
		b = binary.BigEndian.AppendUint64(b, v)
	}
	b, err := marshal.MarshalAppend(b, e.cfg)
	if err != nil {
		panic(fmt.Sprintf("partition: marshal entity config: %v", err)) // a generated message always marshals
	}
	return b
}

func parseEntityRecord(k ekey, p []byte) (*entity, error) {
	if len(p) < entityRecordLen || p[0] != entityRecordV1 {
		return nil, fmt.Errorf("%w: entity %s: bad record", ErrCorrupt, k)
	}
	u := func(i int) uint64 { return binary.BigEndian.Uint64(p[1+8*i:]) }
	e := newEntity(k)
	e.next = u(0)
	e.n = counts{int64(u(1)), int64(u(2)), int64(u(3)), int64(u(4)), int64(u(5))}
	e.cfg = new(partitionpb.EntityConfig)
	if err := proto.Unmarshal(p[entityRecordLen:], e.cfg); err != nil {
		return nil, fmt.Errorf("%w: entity %s: %v", ErrCorrupt, k, err)
	}
	return e, nil
}
