package partition

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"github.com/quorumbus/quorumbus/partition/store"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// Auto-forwarding, the destination's side (docs/topics.md,
// "Auto-forwarding"). The leader's forwarder (node/forward.go) locks a
// source's messages, sends each to the destination with its origin
// (entity, partition, sub-queue, sequence number), and completes them at
// the source only once the destination committed them. A forwarder that
// fails between the two, or whose leader dies, sends the same messages
// again; the destination remembers every origin it took for
// ForwardDedupWindowMs and answers such a message as accepted without
// adding it.
//
// Invariant: an origin recorded in an entity partition is recorded in the
// same batch as the message it brought, so "recorded" means "the
// destination holds (or held) that message".

// ForwardDedupWindowMs is how long a destination remembers a forwarded
// message's origin. A source that sends again later than this after the
// destination took the message (its group without a quorum for that
// long between the send and the complete) duplicates it.
const ForwardDedupWindowMs = 60 * 60 * 1000

// MaxForwardHops is how many auto-forwarding hops a message may take, as
// on Service Bus; the forwarder dead-letters one that would take another.
const MaxForwardHops = 4

// originID is a forwarded message's origin in the store's byte order.
func originID(o *partitionpb.ForwardOrigin) []byte {
	b := make([]byte, 0, 21)
	b = binary.BigEndian.AppendUint64(b, o.EntityId)
	b = binary.BigEndian.AppendUint32(b, o.Partition)
	b = append(b, byte(o.SubQueue))
	return binary.BigEndian.AppendUint64(b, o.SequenceNumber)
}

// forwardEntry is the record of an origin: when the destination took the
// message and the sequence number it gave it.
type forwardEntry struct {
	at  int64
	seq uint64
}

// forwardEntry returns the record of origin id, or nil.
func (a *applier) forwardEntry(e *entity, id []byte) (*forwardEntry, error) {
	s, found, err := a.b.Forward(e.key, id)
	if err != nil || !found {
		return nil, err
	}
	return &forwardEntry{at: s.At, seq: s.Seq}, nil
}

// fresh reports whether the record still deduplicates at now.
func (f *forwardEntry) fresh(now int64) bool {
	return f != nil && now-f.at < ForwardDedupWindowMs
}

// recordForward remembers origin id as taken now under sequence number
// seq, replacing old, a stale record of it, if there is one.
func (a *applier) recordForward(e *entity, id []byte, seq uint64, old *forwardEntry) error {
	var replaced *store.Stamp
	if old != nil {
		replaced = &store.Stamp{At: old.at, Seq: old.seq}
	}
	if err := a.b.PutForward(e.key, id, store.Stamp{At: a.now, Seq: seq}, replaced); err != nil {
		return err
	}
	e.forwardFloor = min(e.forwardFloor, a.now)
	return nil
}

// pruneForward deletes up to budget origins older than the window.
func (a *applier) pruneForward(e *entity, budget int) error {
	if a.now < math.MinInt64+ForwardDedupWindowMs {
		return nil
	}
	return a.b.PruneForwards(e.key, a.now-ForwardDedupWindowMs, &e.forwardFloor, budget)
}

// checkForwarded refuses an Enqueue whose forwarded messages the entity
// cannot take, before anything is written.
func checkForwarded(e *entity, c *partitionpb.Enqueue) error {
	for i, nm := range c.Messages {
		o := nm.GetForwarded()
		if o == nil {
			continue
		}
		if o.Hops == 0 || o.Hops > MaxForwardHops {
			return fmt.Errorf("%w: message %d: a forwarded message of %d hops (1 to %d)", ErrInvalid, i, o.Hops, MaxForwardHops)
		}
	}
	return nil
}

// withOrigin carries what the source's state added to a forwarded
// message over to its copy.
func withOrigin(m *partitionpb.StoredMessage, o *partitionpb.ForwardOrigin) {
	if o == nil {
		return
	}
	m.ForwardHops = o.Hops
	m.DeadLetterReason = o.DeadLetterReason
	m.DeadLetterDescription = o.DeadLetterDescription
	m.DeadLetterSource = o.DeadLetterSource
	m.ModifiedProperties = slices.Clone(o.ModifiedProperties)
	m.ActionSet = o.ActionSet
	m.ActionRemoved = slices.Clone(o.ActionRemoved)
}

// ForwardSource is an entity partition sub-queue whose messages the
// leader forwards, and where to.
type ForwardSource struct {
	EntityID  uint64
	Partition uint32
	SubQueue  partitionpb.SubQueue
	Name      string // the source entity's name (DeadLetterSource, logs)
	To        string // the destination entity's name
	// LockDurationMs is how long the forwarder's locks last: a forward
	// that takes longer is sent again, and deduplicated.
	LockDurationMs int64
	// Sessions: the main queue of an entity that requires sessions,
	// received one session at a time (the forwarder accepts each ready
	// session in turn, as a session receiver would).
	Sessions bool
}

// ForwardSources lists the entity partitions of the group that forward
// their main or dead-letter sub-queue, ordered by entity, partition and
// sub-queue.
func (m *Machine) ForwardSources() []ForwardSource {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.usable() != nil {
		return nil
	}
	var out []ForwardSource
	for k, e := range m.entities {
		for q, to := range []string{e.cfg.GetForwardTo(), e.cfg.GetForwardDeadLetteredMessagesTo()} {
			if to == "" {
				continue
			}
			out = append(out, ForwardSource{
				EntityID: k.ID, Partition: k.Part, SubQueue: partitionpb.SubQueue(q),
				Name: e.cfg.GetName(), To: to, LockDurationMs: e.cfg.GetLockDurationMs(),
				Sessions: e.cfg.GetRequiresSession() && q == int(partitionpb.SubQueue_SUB_QUEUE_MAIN),
			})
		}
	}
	slices.SortFunc(out, func(a, b ForwardSource) int {
		switch {
		case a.EntityID != b.EntityID:
			return cmpUint(a.EntityID, b.EntityID)
		case a.Partition != b.Partition:
			return cmpUint(uint64(a.Partition), uint64(b.Partition))
		}
		return int(a.SubQueue) - int(b.SubQueue)
	})
	return out
}

func cmpUint(a, b uint64) int {
	if a < b {
		return -1
	}
	return 1
}
