package partition

import (
	"math"

	"github.com/quorumbus/quorumbus/partition/store"
)

// A topic partition's counters (issue 23). The topic holds no messages:
// its subscriptions hold copies, and the topic partition only records
// where a scheduled message's copies went (topicsched.go). Yet Service
// Bus reports a topic's size in bytes and its scheduled messages, so the
// topic's entity counters keep them, in the same apply as the changes
// they count (no scan of messages; persisted with its entity record, so
// snapshots and restarts carry them).
//
// Size. A message sent to a topic is stored once, whatever the number of
// its copies (logbodies.go, sharedblobs.go). Each copy carries a share of
// the message's size (StoredMessage.topic_share): the copies of one
// message split it between them, the first of k copies taking the
// remainder of size/k too, so that the shares add up to the size. (The
// copies after the first then carry the same share, and their state
// records stay alike: store.Batch.PutNewCopy.) The
// topic's size is the sum of the shares of the copies its subscriptions
// hold, scheduled or dead-lettered ones included: each message counted
// once while all its copies are held, less as subscriptions let theirs go,
// nothing once none holds one. Every change of a copy goes through
// applier.count, which takes its share off or puts it on the topic; a
// copy moved (locked, dead-lettered, activated) takes it off and puts it
// back, which nets to nothing. A subscription partition keeps the sum of
// the shares it holds (counts.share), which its delete takes off the
// topic without reading its messages.
//
// Scheduled. The topic's scheduled counter is the number of records of
// messages scheduled on it (topicsched.go): one more when a send
// schedules copies, one less when a cancel deletes a record or a record
// whose time has come is pruned. ActivateScheduled prunes the topics'
// due records as it activates the subscriptions' copies (their due time
// is the same), so a message stops counting when its copies become
// active. Deleting a subscription leaves the count as it is: the message
// is still scheduled on the topic until its time.
//
// Invariants, per topic partition t, after each entry:
//   - t.n.size is the sum of topic_share over the copies t's
//     subscription partitions hold, which is also the sum of their
//     n.share;
//   - t.n.scheduled is the number of t's 0x1c records;
//   - t.n.active, dead and locked are 0.
//
// Copies added by a version that did not count topics carry no share and
// never count; a topic's record from such a version has no scheduled
// counter, and Machine.load counts its records.

// topicShare is the share of the j-th of k copies of a message of size
// bytes.
func topicShare(size int64, k, j int) int64 {
	if k <= 0 {
		return 0
	}
	if j == 0 {
		return size/int64(k) + size%int64(k)
	}
	return size / int64(k)
}

// topicOf is the key of the topic partition whose sends subscription
// partition e receives.
func topicOf(e *entity) ekey {
	return ekey{ID: e.cfg.GetTopicId(), Part: e.key.Part}
}

// count counts the message in slot s in (d = +1) or out of (d = -1) e's
// counters, and its topic share in or out of its topic's size.
func (a *applier) count(e *entity, s store.Slot, d int64) {
	e.n.add(s, d)
	if s.Share != 0 {
		a.addTopicSize(topicOf(e), d*s.Share)
	}
}

// addTopicSize notes a change of topic partition k's size, made at the
// end of the entry (flushTopicSizes): a lock or a settlement moves a copy
// out and back in, and the topic's record is written only when its size
// changed.
func (a *applier) addTopicSize(k ekey, d int64) {
	if a.topicSizes == nil {
		a.topicSizes = map[ekey]int64{}
	}
	a.topicSizes[k] += d
}

// flushTopicSizes adds the size changes of the entry to the topics. A
// topic partition deleted meanwhile has none to take (its subscriptions
// go by their own deletes).
func (a *applier) flushTopicSizes() {
	for k, d := range a.topicSizes {
		if t, ok := a.entities[k]; ok && d != 0 && isTopic(t.cfg) {
			t.n.size += d
			a.dirty[k] = true
		}
	}
	clear(a.topicSizes)
}

// countTopicSize sets the size of topic partition t, created in this
// entry, from the shares its subscriptions' partitions hold: a topic
// partition deleted and created again under the same key (which the
// catalog never does: a topic's delete deletes its subscriptions, and
// ids are not reused) finds them holding copies. The changes noted for
// the topic earlier in the entry are in those shares already.
func (a *applier) countTopicSize(t *entity) {
	t.n.size = 0
	for _, s := range a.entities {
		if isSubscription(s.cfg) && topicOf(s) == t.key {
			t.n.size += s.n.share
		}
	}
	delete(a.topicSizes, t.key)
}

// releaseShares takes what subscription partition e, being deleted with
// its messages, held of its topic's size off the topic.
func (a *applier) releaseShares(e *entity) {
	if isSubscription(e.cfg) && e.n.share != 0 {
		a.addTopicSize(topicOf(e), -e.n.share)
	}
}

// countTopicScheduled changes topic partition t's scheduled counter by d
// records.
func (a *applier) countTopicScheduled(t *entity, d int64) {
	if d != 0 {
		t.n.scheduled += d
		a.dirty[t.key] = true
	}
}

// pruneDueTopicScheduled deletes the records of messages scheduled on
// the group's topics whose time has come, topic by topic in key order, at
// most budget in all (ActivateScheduled: the subscriptions' copies of
// those messages are activated by the same command).
func (a *applier) pruneDueTopicScheduled(budget int) error {
	for _, k := range sortedKeys(a.entities) {
		if budget <= 0 {
			return nil
		}
		t := a.entities[k]
		if !isTopic(t.cfg) || t.topicSchedFloor > a.now {
			continue
		}
		n, err := a.b.PruneTopicScheduled(t.key, a.now, &t.topicSchedFloor, budget)
		if err != nil {
			return err
		}
		a.countTopicScheduled(t, -int64(n))
		budget -= n
	}
	return nil
}

// nextTopicScheduledDue is the earliest time a record of a message
// scheduled on one of the group's topics may come due: the floor below
// which a topic has none (Machine.loadTopics sets it, and a prune moves
// it to the record left first; after a cancel it may be early, and the
// ActivateScheduled it brings prunes nothing and moves it). Call it with
// m.mu held.
func (m *Machine) nextTopicScheduledDue() (ms int64, ok bool) {
	for _, e := range m.entities {
		if isTopic(e.cfg) && e.topicSchedFloor != math.MaxInt64 && (!ok || e.topicSchedFloor < ms) {
			ms, ok = e.topicSchedFloor, true
		}
	}
	return ms, ok
}

// loadTopics finds, for each topic partition loaded, the earliest time a
// record of a scheduled message comes due (so that the leader proposes
// no ActivateScheduled for nothing after a load), and sets the scheduled
// counter of those whose entity records were written before topics were
// counted, from their records (not their messages).
func (m *Machine) loadTopics() error {
	for _, e := range m.entities {
		if !isTopic(e.cfg) {
			continue
		}
		at, ok, err := store.FirstTopicScheduled(m.db, e.key)
		if err != nil {
			return err
		}
		e.topicSchedFloor = math.MaxInt64
		if ok {
			e.topicSchedFloor = at
		}
		if e.uncounted {
			n, err := store.CountTopicScheduled(m.db, e.key)
			if err != nil {
				return err
			}
			e.n.scheduled, e.uncounted = n, false
		}
	}
	return nil
}
