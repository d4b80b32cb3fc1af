package partition

import (
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

// recordTopicScheduled remembers where the copies of the message the topic
// numbered seq, due at at, went.
func (a *applier) recordTopicScheduled(t *entity, seq uint64, at int64, copies []store.ScheduledCopy) error {
	if err := a.b.PutTopicScheduled(t.key, seq, at, copies); err != nil {
		return err
	}
	t.topicSchedFloor = min(t.topicSchedFloor, at)
	return nil
}

// pruneTopicScheduled deletes up to budget records whose time has come.
func (a *applier) pruneTopicScheduled(t *entity, budget int) error {
	n, err := a.b.PruneTopicScheduled(t.key, a.now, &t.topicSchedFloor, budget)
	a.countTopicScheduled(t, -int64(n))
	return err
}

// cancelTopicScheduled cancels the messages scheduled on topic partition
// t that seqs (unique, of this partition) name: their copies still
// scheduled are removed from the subscriptions, and the records go.
// Numbers that name no record are ignored, as a queue ignores them.
func (a *applier) cancelTopicScheduled(t *entity, seqs []uint64) error {
	for _, seq := range seqs {
		at, copies, found, err := a.b.TopicScheduled(t.key, seq)
		if err != nil || !found {
			if err != nil {
				return err
			}
			continue
		}
		for _, c := range copies {
			s, ok := a.entities[ekey{ID: c.Sub, Part: t.key.Part}]
			if !ok {
				continue // the subscription was deleted, and its copies with it
			}
			m, err := a.b.State(s.key, partitionpb.SubQueue_SUB_QUEUE_MAIN, c.Seq)
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
		if err := a.b.DeleteTopicScheduled(t.key, seq, at); err != nil {
			return err
		}
		a.countTopicScheduled(t, -1)
	}
	return nil
}
