package partition

import (
	"crypto/sha256"
	"encoding/binary"
	"slices"

	"github.com/quorumbus/quorumbus/partition/filter"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// Rules evaluated once, by the leader (issue 21's topic targets).
//
// Every replica applies a send to a topic, and evaluating every rule of
// every subscription on every message was a fifth of each replica's
// apply. So the leader, as it builds a batch, evaluates the rules of each
// Enqueue to a topic partition once and attaches the outcome: a
// partitionpb.TopicPlan, which rules matched each message, with a
// fingerprint of the topic's subscriptions and rules as the leader saw
// them and the batch's time. A replica applying the Enqueue uses the plan
// only if its own fingerprint of that topic partition is the same and it
// applies at the plan's time; otherwise it evaluates the rules itself, as
// a replica of a version that ignores the plan does. Either way the result
// is what evaluating the rules at apply gives, so apply stays
// deterministic: the same state and entry give the same result on every
// replica and on replay.
//
// What a rule reads, hence what the fingerprint and the time must cover:
// the message (in the entry), the batch's time (EnqueuedTimeUtc, and
// whether the message is scheduled), its time to live (the message's,
// else the topic's default), and, per subscription in copy order, its
// entity id, status, rules and dead_lettering_on_filter_evaluation_exceptions.
// A rule change committed between the build and the apply changes the
// fingerprint (unless it leaves the rules as they were). Actions still run
// at apply, on the copies the plan says matched: their newid() reads the
// topic's sequence counter, which only the apply knows. A message whose
// evaluation failed is left to the replicas (TopicPlan.evaluate), which
// then dead-letter its copies with the error they find.

// routeTable is what the leader's planner reads of the machine: per topic
// partition of the group that has subscriptions, its routes. Published
// whole (Machine.routes) and never changed afterwards, so the proposer
// reads it without the machine's lock while Apply runs.
type routeTable map[ekey]*topicRoutes

// topicRoutes is a topic partition's subscriptions as the planner needs
// them, copied from the entities (which Apply changes in place).
type topicRoutes struct {
	fingerprint uint64
	defaultTTL  int64 // the topic's DefaultTtlMs
	rules       int   // of every subscription, disabled ones included
	subs        []routedSub
}

type routedSub struct {
	disabled bool
	rules    []compiledRule // compiled once, read concurrently: Match changes nothing
}

// rulesSum sums up what of a subscription's config its copies depend on
// besides its identity: status, rules, and what an evaluation error does.
// It is taken when the config is applied or loaded (entity.rulesSum), and
// goes into its topic's fingerprint.
func rulesSum(cfg *partitionpb.EntityConfig) uint64 {
	if !isSubscription(cfg) {
		return 0
	}
	b, err := marshal.Marshal(&partitionpb.EntityConfig{
		Status: cfg.Status,
		Rules:  cfg.Rules,
		DeadLetteringOnFilterEvaluationExceptions: cfg.DeadLetteringOnFilterEvaluationExceptions,
	})
	if err != nil {
		// Rules that compiled marshal; if they did not, a sum no other
		// config has makes every plan of the topic stale, which is safe.
		return 0
	}
	sum := sha256.Sum256(b)
	return binary.BigEndian.Uint64(sum[:8])
}

// fingerprint of topic partition t with its subscriptions subs, in copy
// order.
func fingerprint(t *entity, subs []*entity) uint64 {
	buf := make([]byte, 0, 8*(1+2*len(subs)))
	buf = binary.BigEndian.AppendUint64(buf, uint64(t.cfg.GetDefaultTtlMs()))
	for _, s := range subs {
		buf = binary.BigEndian.AppendUint64(buf, s.key.ID)
		buf = binary.BigEndian.AppendUint64(buf, s.rulesSum)
	}
	sum := sha256.Sum256(buf)
	return binary.BigEndian.Uint64(sum[:8])
}

// publishRoutes builds the route table from the machine's entities and
// publishes it for PlanTopicSends. The caller holds m.mu for writing (or
// has the machine to itself, as load does).
func (m *Machine) publishRoutes() {
	x := &m.subs
	x.build(m.entities)
	x.changed = false
	table := make(routeTable, len(x.byTopic))
	for tk, subs := range x.byTopic {
		t, ok := m.entities[tk]
		if !ok || !isTopic(t.cfg) {
			continue // subscriptions whose topic partition is elsewhere, or gone
		}
		r := &topicRoutes{fingerprint: x.fingerprintOf(t), defaultTTL: t.cfg.DefaultTtlMs, subs: make([]routedSub, len(subs))}
		for i, s := range subs {
			r.subs[i] = routedSub{disabled: s.status() == partitionpb.EntityStatus_ENTITY_STATUS_DISABLED, rules: s.rules}
			r.rules += len(s.rules)
		}
		table[tk] = r
	}
	m.routes.Store(&table)
}

// PlanTopicSends evaluates, for each Enqueue of b to a topic partition of
// this group, its subscriptions' rules on its messages at b's time, and
// sets b's plans (partitionpb.TopicPlan) to them. The leader calls it once
// b.NowMs is set, before it encodes b. It reads the state last applied,
// without waiting for an Apply in progress: a plan made from a state that
// changes before its entry applies is stale, and replicas then evaluate
// the rules themselves.
func (m *Machine) PlanTopicSends(b *partitionpb.Batch) {
	b.TopicPlans = nil
	table := m.routes.Load()
	if table == nil || len(*table) == 0 {
		return
	}
	for i, c := range b.Commands {
		e := c.GetEnqueue()
		if e == nil {
			continue
		}
		if r := (*table)[ekey{ID: e.EntityId, Part: e.Partition}]; r != nil {
			b.TopicPlans = append(b.TopicPlans, r.plan(uint32(i), e.Messages, b.NowMs))
		}
	}
}

// plan evaluates the rules of r on msgs, of command cmd, at now.
func (r *topicRoutes) plan(cmd uint32, msgs []*partitionpb.NewMessage, now int64) *partitionpb.TopicPlan {
	p := &partitionpb.TopicPlan{Command: cmd, Fingerprint: r.fingerprint, NowMs: now, Matched: make([][]byte, len(msgs))}
	n := (r.rules + 7) / 8
	bits := make([]byte, n*len(msgs)) // one allocation for the batch's bitmaps
	for i, nm := range msgs {
		ttl := nm.TtlMs
		if ttl == 0 {
			ttl = r.defaultTTL
		}
		fm := filterMessage(nm, nm.GetFilterView(), now, ttl)
		matched := bits[i*n : (i+1)*n : (i+1)*n]
		if !r.match(fm, matched) {
			p.Evaluate = append(p.Evaluate, uint32(i))
			matched = nil
		}
		p.Matched[i] = matched
	}
	return p
}

// match sets the bit of each rule that matches fm, counting as
// TopicPlan.matched does; false if an evaluation failed.
func (r *topicRoutes) match(fm *filter.Message, bits []byte) bool {
	k := 0
	for _, s := range r.subs {
		if s.disabled {
			k += len(s.rules) // takes no copies: no bit set
			continue
		}
		for _, rule := range s.rules {
			ok, err := rule.filter.Match(fm)
			if err != nil {
				return false
			}
			if ok {
				bits[k/8] |= 1 << (k % 8)
			}
			k++
		}
	}
	return true
}

// planCounts counts the Enqueues to topics that came with a plan: taken,
// or stale (evaluated here instead).
type planCounts struct{ taken, stale uint64 }

// plansOf lists the plans of b by command index; nil if b has none. A
// command with several plans has its first (a leader makes one).
func plansOf(b *partitionpb.Batch) []*partitionpb.TopicPlan {
	if len(b.TopicPlans) == 0 {
		return nil
	}
	out := make([]*partitionpb.TopicPlan, len(b.Commands))
	for _, p := range b.TopicPlans {
		if int64(p.Command) < int64(len(out)) && out[p.Command] == nil {
			out[p.Command] = p
		}
	}
	return out
}

// planFor returns the plan of Enqueue c to topic partition t, the command
// being applied, if this replica may use it (see the top of this file),
// else nil.
func (a *applier) planFor(t *entity, c *partitionpb.Enqueue) *partitionpb.TopicPlan {
	if a.cmd >= len(a.topicPlans) || a.topicPlans[a.cmd] == nil {
		return nil
	}
	p := a.topicPlans[a.cmd]
	if p.NowMs != a.now || len(p.Matched) != len(c.Messages) || p.Fingerprint != a.subs.fingerprintOf(t) {
		a.plans.stale++
		return nil
	}
	a.plans.taken++
	return p
}

// plannedMatch is the outcome of message i's rules in plan p, nil when
// the replica must evaluate them: no usable plan, the message listed to
// evaluate, or a bitmap not of the size rules rules take.
func plannedMatch(p *partitionpb.TopicPlan, i, rules int) []byte {
	if p == nil || slices.Contains(p.Evaluate, uint32(i)) {
		return nil
	}
	if m := p.Matched[i]; len(m) == (rules+7)/8 {
		return m
	}
	return nil
}
