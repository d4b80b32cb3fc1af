package gateway

import (
	"context"
	"sync"

	"github.com/quorumbus/quorumbus/proto/partitionpb"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// Runtime counts come from the partitions' own counters, read on each
// group's leader once a quorum confirmed it leads, within the node's read
// lease (docs/design-notes.md "Reads ask a quorum first"). One entity
// reads its partitions one Stats call each; a list or a scrape reads all
// the entity partitions a group holds for it with one GroupStats call:
// one call per group, not one per entity partition.

// counts sums an entity's partition counters, or returns nil (and logs)
// when a partition does not answer in time: the description is still
// served, without its runtime figures.
func (g *Gateway) counts(ctx context.Context, e *placementpb.Entity) *Counts {
	ctx, cancel := context.WithTimeout(ctx, g.cfg.StatsTimeout)
	defer cancel()
	var c Counts
	for p := range e.GetPartitionGroups() {
		st, err := g.cfg.Stats.Stats(ctx, e, uint32(p))
		if err != nil {
			g.log.Warn("reading an entity's counters", "entity", e.GetName(), "partition", p, "err", err)
			return nil
		}
		c.add(st)
	}
	return &c
}

// add sums one partition's counters into c; AccessedAt is the latest.
func (c *Counts) add(st *partitionpb.StatsResponse) {
	c.Active += st.GetActiveMessages()
	c.DeadLetter += st.GetDeadLetterMessages()
	c.Scheduled += st.GetScheduledMessages()
	c.SizeBytes += st.GetSizeBytes()
	c.AccessedAtMs = max(c.AccessedAtMs, st.GetAccessedAtMs())
}

// countDetails writes an entity's counts as Service Bus's CountDetails.
//
// The messages of an entity that forwards (ForwardTo) wait for its
// forwarder to move them to the destination (docs/topics.md): they are
// what Service Bus's TransferMessageCount counts, messages yet to be
// transferred, and not active messages ready for a receiver. The
// partitions count them as active (and cannot tell the deferred ones
// apart, which the forwarder leaves where they are: an entity that
// forwards has some only if a client received from it and deferred), so
// they are moved across here; the total is the same either way.
// TransferDeadLetterMessageCount is always 0: there is no transfer
// dead-letter queue; a message over the hop limit, the one transfer that
// fails for good, is dead-lettered in the entity's own dead-letter queue.
func countDetails(c *Counts, forwardTo string) *countDetailsOut {
	out := &countDetailsOut{
		NS:                     countNS,
		ActiveMessageCount:     int64(c.Active),
		DeadLetterMessageCount: int64(c.DeadLetter),
		ScheduledMessageCount:  int64(c.Scheduled),
	}
	if forwardTo != "" {
		out.TransferMessageCount, out.ActiveMessageCount = out.ActiveMessageCount, 0
	}
	return out
}

// accessedAt writes an entity's AccessedAt: the last send to or receive
// from any of its partitions, kept by the partitions themselves (no write
// of its own); "never" when they have none or could not be read.
func accessedAt(c *Counts) string {
	if c == nil {
		return zeroTime
	}
	return atomTime(msTime(c.AccessedAtMs))
}

// groupConcurrency bounds the GroupStats calls of one list or scrape in
// flight at once.
const groupConcurrency = 16

// forEachCounted reads the counters of each entity and hands them to set
// (nil when they could not be read), one call at a time. It asks each
// group that holds a partition of them once (GroupStats), naming the
// entity partitions it wants. An entity partition a group's leader does
// not know yet (created a moment ago, its partition still being
// configured) is read as a single entity is, which waits for it.
func (g *Gateway) forEachCounted(ctx context.Context, es []*placementpb.Entity, set func(i int, c *Counts)) {
	byGroup := map[uint64][]*partitionpb.EntityPartitionRef{}
	for _, e := range es {
		for p, group := range e.GetPartitionGroups() {
			byGroup[group] = append(byGroup[group], &partitionpb.EntityPartitionRef{EntityId: e.GetId(), Partition: uint32(p)})
		}
	}
	ctx, cancel := context.WithTimeout(ctx, g.cfg.StatsTimeout)
	defer cancel()
	var (
		mu     sync.Mutex
		got    = make(map[partKey]*partitionpb.StatsResponse, len(es))
		failed = map[uint64]bool{}
		wg     sync.WaitGroup
		sem    = make(chan struct{}, groupConcurrency)
	)
	for group, refs := range byGroup {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			stats, err := g.cfg.Stats.GroupStats(ctx, group, refs)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				g.log.Warn("reading a group's counters", "group", group, "entity_partitions", len(refs), "err", err)
				failed[group] = true
				return
			}
			for _, s := range stats {
				got[partKey{s.GetEntityId(), s.GetPartition()}] = s.GetStats()
			}
		}()
	}
	wg.Wait()
	var missing []int
	for i, e := range es {
		switch c, ok := sumOf(e, got, failed); {
		case !ok:
			missing = append(missing, i)
		default:
			set(i, c) // nil when a group failed
		}
	}
	// What the groups did not know, entity by entity (rare: only what
	// was created while the list was read).
	for _, i := range missing {
		set(i, g.counts(ctx, es[i]))
	}
}

type partKey struct {
	id   uint64
	part uint32
}

// sumOf adds up an entity's partitions from a GroupStats read: nil when a
// group failed to answer, ok false when a group answered without one of
// its partitions.
func sumOf(e *placementpb.Entity, got map[partKey]*partitionpb.StatsResponse, failed map[uint64]bool) (c *Counts, ok bool) {
	c = &Counts{}
	for p, group := range e.GetPartitionGroups() {
		if failed[group] {
			return nil, true
		}
		st, found := got[partKey{e.GetId(), uint32(p)}]
		if !found {
			return nil, false
		}
		c.add(st)
	}
	return c, true
}
