package partition

import (
	"encoding/binary"
	"fmt"

	"github.com/quorumbus/quorumbus/partition/store"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// Messages scheduled on a topic. A scheduled send to a topic is scheduled
// in every subscription it matches, each copy under that subscription's
// sequence number, while the sender is answered with the topic's (the
// number it cancels by, as on Service Bus). So the topic partition keeps,
// per scheduled message, where its copies went: the subscription entity
// and the copy's sequence number (the subscription partition has the
// topic partition's index). CancelScheduled on the topic removes the
// copies still scheduled.
//
//	0x02 topic eid(8) part(4) 0x1c seq(8)          due at(8), then per copy: subscription eid(8), its sequence number(8)
//	0x02 topic eid(8) part(4) 0x1d at(8) seq(8)    the same by due time, for pruning
//
// Invariant: a record is written in the batch that adds its copies. Once
// its time has come the copies are activated under new sequence numbers
// (activateScheduled), so a record past its time names nothing that can
// be cancelled: the sends to the topic prune those records as they go
// (pruneTopicScheduled), and a cancel that finds one removes nothing
// (the copies' old numbers name no message).

// scheduledCopy is a copy of a scheduled topic message.
type scheduledCopy struct {
	sub uint64 // the subscription's entity id
	seq uint64 // the copy's sequence number in it
}

// recordTopicScheduled remembers where the copies of the message the topic
// numbered seq, due at at, went.
func (a *applier) recordTopicScheduled(t *entity, seq uint64, at int64, copies []scheduledCopy) error {
	v := binary.BigEndian.AppendUint64(make([]byte, 0, 8+16*len(copies)), store.TimeBits(at))
	for _, c := range copies {
		v = binary.BigEndian.AppendUint64(v, c.sub)
		v = binary.BigEndian.AppendUint64(v, c.seq)
	}
	k := store.TopicSchedKey(t.key, seq)
	if err := a.b.Set(k, store.Seal(k, v), nil); err != nil {
		return err
	}
	tk := store.TopicSchedTimeKey(t.key, at, seq)
	if err := a.b.Set(tk, store.Seal(tk, nil), nil); err != nil {
		return err
	}
	t.topicSchedFloor = min(t.topicSchedFloor, at)
	return nil
}

// topicScheduled reads the record of the topic message seq: its due time
// and copies; found is false when there is none.
func (a *applier) topicScheduled(t *entity, seq uint64) (at int64, copies []scheduledCopy, found bool, err error) {
	p, found, err := store.Get(a.b, store.TopicSchedKey(t.key, seq))
	if err != nil || !found {
		return 0, nil, false, err
	}
	if len(p) < 8 || (len(p)-8)%16 != 0 {
		return 0, nil, false, fmt.Errorf("%w: %s: scheduled topic message %d: record of %d bytes", ErrCorrupt, t.key, seq, len(p))
	}
	at = store.TimeFromBits(binary.BigEndian.Uint64(p))
	for q := p[8:]; len(q) > 0; q = q[16:] {
		copies = append(copies, scheduledCopy{sub: binary.BigEndian.Uint64(q), seq: binary.BigEndian.Uint64(q[8:])})
	}
	return at, copies, true, nil
}

// pruneTopicScheduled deletes up to budget records whose time has come.
func (a *applier) pruneTopicScheduled(t *entity, budget int) error {
	prefix := store.KindPrefix(t.key, store.KindTopicSchedTime)
	del := func(key []byte) error { return a.b.Delete(key, nil) }
	return a.pruneByTime(prefix, a.now, &t.topicSchedFloor, budget, del, func(id []byte) []byte {
		return append(store.KindPrefix(t.key, store.KindTopicSched), id...)
	})
}

// cancelTopicScheduled cancels the messages scheduled on topic partition
// t that seqs (unique, of this partition) name: their copies still
// scheduled are removed from the subscriptions, and the records go.
// Numbers that name no record are ignored, as a queue ignores them.
func (a *applier) cancelTopicScheduled(t *entity, seqs []uint64) error {
	for _, seq := range seqs {
		at, copies, found, err := a.topicScheduled(t, seq)
		if err != nil || !found {
			if err != nil {
				return err
			}
			continue
		}
		for _, c := range copies {
			s, ok := a.entities[ekey{ID: c.sub, Part: t.key.Part}]
			if !ok {
				continue // the subscription was deleted, and its copies with it
			}
			m, err := store.GetState(a.b, store.MessageKey(s.key, partitionpb.SubQueue_SUB_QUEUE_MAIN, c.seq))
			if err != nil {
				return err
			}
			if m == nil || m.State != partitionpb.MessageState_MESSAGE_STATE_SCHEDULED {
				continue // activated under a new number, or gone
			}
			if err := a.remove(s, store.SlotOf(m)); err != nil {
				return err
			}
		}
		if err := a.b.Delete(store.TopicSchedKey(t.key, seq), nil); err != nil {
			return err
		}
		if err := a.b.Delete(store.TopicSchedTimeKey(t.key, at, seq), nil); err != nil {
			return err
		}
	}
	return nil
}
