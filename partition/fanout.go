package partition

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/quorumbus/quorumbus/partition/filter"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// Topics and their subscriptions (issue 21).
//
// A topic partition and the partitions of its subscriptions with the same
// index live in one group (the catalog places them so). An Enqueue to a
// topic partition keeps nothing in the topic: it evaluates every
// subscription's rules on each message and adds a copy to each
// subscription partition per matching rule, all in the one apply of the
// one entry, so a message is in every subscription it matches or in none.
// The topic keeps only its sequence counter (each message sent gets a
// topic sequence number, the send's answer) and its duplicate detection.
//
// Rules are compiled when a subscription's config is applied or loaded,
// never per message; they read the message's FilterView, which the
// front-end took from the bare message, so replicas decode no AMQP.
//
// Every copy of a message kept in the log names the same bytes of the
// same entry: the body is written once whatever the number of copies
// (logbodies.go). Snapshots move each copy's body into its own record.

// ReasonFilterEvaluation is the dead-letter reason of a copy whose rule
// could not be evaluated, on a subscription with
// dead_lettering_on_filter_evaluation_exceptions.
const ReasonFilterEvaluation = "FilterEvaluationException"

// compiledRule is a subscription rule ready to evaluate.
type compiledRule struct {
	name   string
	filter filter.Filter
	action *filter.Action
}

// compileRules compiles the rules of a subscription's config.
func compileRules(cfg *partitionpb.EntityConfig) ([]compiledRule, error) {
	if len(cfg.GetRules()) == 0 {
		return nil, nil
	}
	out := make([]compiledRule, 0, len(cfg.Rules))
	for _, r := range cfg.Rules {
		f, a, err := r.Compile()
		if err != nil {
			return nil, err
		}
		out = append(out, compiledRule{name: r.GetName(), filter: f, action: a})
	}
	return out, nil
}

func isTopic(cfg *partitionpb.EntityConfig) bool {
	return cfg.GetKind() == placementpb.EntityKind_ENTITY_KIND_TOPIC
}

// subscriptionsOf lists the subscription partitions that receive the
// sends to topic partition t, by entity id: the order copies are made in,
// the same on every replica.
//
// It scans the group's entity partitions, once per Enqueue to a topic
// (not per message); a group holds few enough that an index was not worth
// keeping in step yet.
func (a *applier) subscriptionsOf(t *entity) []*entity {
	var subs []*entity
	for k, e := range a.entities {
		if k.part == t.key.part && e.cfg.GetTopicId() == t.key.id && e.cfg.GetKind() == placementpb.EntityKind_ENTITY_KIND_SUBSCRIPTION {
			subs = append(subs, e)
		}
	}
	slices.SortFunc(subs, func(x, y *entity) int {
		switch {
		case x.key.id < y.key.id:
			return -1
		case x.key.id > y.key.id:
			return 1
		}
		return 0
	})
	return subs
}

// filterMessage is what rules see of nm.
func filterMessage(nm *partitionpb.NewMessage, now, ttl int64) *filter.Message {
	v := nm.GetFilterView()
	m := &filter.Message{
		MessageID:        nm.MessageId,
		SessionID:        nm.SessionId,
		PartitionKey:     nm.PartitionKey,
		CorrelationID:    v.GetCorrelationId(),
		To:               v.GetTo(),
		ReplyTo:          v.GetReplyTo(),
		Subject:          v.GetSubject(),
		ContentType:      v.GetContentType(),
		ReplyToSessionID: v.GetReplyToSessionId(),
		Size:             newMessageSize(nm),
		EnqueuedTimeUtc:  filter.Timestamp(now),
		TimeToLive:       filter.Duration(ttl),
		State:            "Active",
	}
	if nm.ScheduledEnqueueTimeMs > now {
		m.ScheduledEnqueueTimeUtc = filter.Timestamp(nm.ScheduledEnqueueTimeMs)
		m.State = "Scheduled"
	}
	if len(v.GetProperties()) > 0 {
		m.Properties = make(map[string]any, len(v.Properties))
		for k, rv := range v.Properties {
			if x, err := rv.Any(); err == nil {
				m.Properties[k] = x
			}
		}
	}
	return m
}

// copyPlan is one copy of a message to add to a subscription.
type copyPlan struct {
	sub  *entity
	dead string // dead-letter reason; "" for the main queue
	desc string
}

// route decides the copies of nm: per subscription, one per matching rule.
func route(subs []*entity, fm *filter.Message) ([]copyPlan, error) {
	var out []copyPlan
	for _, s := range subs {
		if s.status() == partitionpb.EntityStatus_ENTITY_STATUS_DISABLED {
			continue // a disabled subscription takes no copies
		}
		for _, r := range s.rules {
			ok, err := r.filter.Match(fm)
			if err != nil {
				if errors.Is(err, filter.ErrEvaluation) && s.cfg.DeadLetteringOnFilterEvaluationExceptions {
					out = append(out, copyPlan{sub: s, dead: ReasonFilterEvaluation, desc: fmt.Sprintf("rule %s: %v", r.name, err)})
				}
				continue
			}
			if !ok {
				continue
			}
			if r.action != nil {
				return nil, fmt.Errorf("%w: not implemented: SQL rule actions (rule %q of %s matches the message)", ErrInvalid, r.name, s.cfg.Name)
			}
			out = append(out, copyPlan{sub: s})
		}
	}
	return out, nil
}

// publish applies an Enqueue to topic partition t (enqueue has checked
// the messages as it does for any entity): every check first, then the
// copies, so that a refused send writes nothing.
func (a *applier) publish(t *entity, c *partitionpb.Enqueue) (*partitionpb.Result, error) {
	subs := a.subscriptionsOf(t)
	plans := make([][]copyPlan, len(c.Messages))
	added := map[*entity]int64{}
	for i, nm := range c.Messages {
		if len(nm.StagedBody) > 0 {
			return nil, fmt.Errorf("%w: not implemented: message %d: a message staged in chunks (over 1 MiB) sent to topic %s", ErrInvalid, i, t.cfg.Name)
		}
		ttl := nm.TtlMs
		if ttl == 0 {
			ttl = t.cfg.DefaultTtlMs
		}
		p, err := route(subs, filterMessage(nm, a.now, ttl))
		if err != nil {
			return nil, fmt.Errorf("message %d: %w", i, err)
		}
		for _, cp := range p {
			if cp.dead == "" && cp.sub.cfg.RequiresSession {
				if err := checkSessionID(nm.SessionId); err != nil {
					return nil, fmt.Errorf("%w: message %d: subscription %s requires sessions, and the message has no session id of at most %d bytes", err, i, cp.sub.cfg.Name, MaxSessionIDBytes)
				}
			}
			added[cp.sub] += newMessageSize(nm)
		}
		plans[i] = p
	}
	for _, s := range subs {
		if max := s.cfg.MaxSizeBytes; max > 0 && added[s] > 0 && s.n.size+added[s] > max {
			return nil, fmt.Errorf("%w: %s holds %d bytes, %d more exceed its %d", ErrQuotaExceeded, s.cfg.Name, s.n.size, added[s], max)
		}
	}
	dedup := t.cfg.RequiresDuplicateDetection
	if err := a.pruneDedup(t, dedupPrune+len(c.Messages)); err != nil {
		return nil, err
	}
	r := &partitionpb.Result{SequenceNumbers: make([]uint64, 0, len(c.Messages))}
	for i, nm := range c.Messages {
		var seen *dedupEntry
		if dedup && nm.MessageId != "" {
			d, err := a.dedupEntry(t, nm.MessageId)
			if err != nil {
				return nil, err
			}
			if d != nil && a.now-d.at < t.cfg.DuplicateDetectionWindowMs {
				r.SequenceNumbers = append(r.SequenceNumbers, d.seq)
				continue
			}
			seen = &dedupEntry{}
			if d != nil {
				seen = d
			}
		}
		seq := t.nextSequence()
		a.dirty[t.key] = true
		for _, cp := range plans[i] {
			if err := a.addCopy(cp, nm, i); err != nil {
				return nil, err
			}
		}
		if seen != nil {
			if err := a.recordDedup(t, nm.MessageId, seq, seen); err != nil {
				return nil, err
			}
		}
		r.SequenceNumbers = append(r.SequenceNumbers, seq)
	}
	return r, nil
}

// addCopy adds message i of the Enqueue being applied to a subscription.
// Its time to live is the message's, else the topic's default (the
// front-end's ttl_ms), capped by the subscription's default, as Service
// Bus takes the smaller.
func (a *applier) addCopy(cp copyPlan, nm *partitionpb.NewMessage, i int) error {
	s := cp.sub
	m := &partitionpb.StoredMessage{
		SequenceNumber:         s.nextSequence(),
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
	if d := s.cfg.DefaultTtlMs; d > 0 && (m.TtlMs == 0 || m.TtlMs > d) {
		m.TtlMs = d
	}
	a.keepInLog(m, i)
	if cp.dead != "" {
		m.SubQueue = partitionpb.SubQueue_SUB_QUEUE_DEAD_LETTER
		m.DeadLetterReason, m.DeadLetterDescription = cp.dead, cp.desc
	} else {
		from := a.now
		if nm.ScheduledEnqueueTimeMs > a.now {
			m.State = partitionpb.MessageState_MESSAGE_STATE_SCHEDULED
			from = nm.ScheduledEnqueueTimeMs
		}
		if m.TtlMs > 0 && from <= math.MaxInt64-m.TtlMs {
			m.ExpiresAtMs = from + m.TtlMs
		}
	}
	return a.add(s, m)
}
