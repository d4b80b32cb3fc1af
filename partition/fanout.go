package partition

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/quorumbus/quorumbus/partition/filter"
	"github.com/quorumbus/quorumbus/partition/rules"
	"github.com/quorumbus/quorumbus/partition/store"
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
		f, a, err := rules.Compile(r)
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

// isSubscription says whether cfg is a subscription's, which holds
// copies of its topic's messages.
func isSubscription(cfg *partitionpb.EntityConfig) bool {
	return cfg.GetKind() == placementpb.EntityKind_ENTITY_KIND_SUBSCRIPTION && cfg.GetTopicId() != 0
}

// subscriptionIndex maps each topic partition of the group to the
// subscription partitions that receive its sends, ordered by entity id:
// the order copies are made in, the same on every replica. It is built by
// one scan of the group's entity partitions on the first send to a topic
// after an upsert or delete (which make it stale) or a load, so that a
// send does not scan every entity of the group.
type subscriptionIndex struct {
	built   bool
	byTopic map[ekey][]*entity // key: the topic's entity id and partition
	// fingerprints of the topic partitions asked for since the build
	// (plan.go).
	fingerprints map[ekey]uint64
	// changed: made stale since the routes were last published
	// (Machine.publishRoutes).
	changed bool
}

// stale drops the index: the entities changed.
func (x *subscriptionIndex) stale() { *x = subscriptionIndex{changed: true} }

// build makes the index from the group's entities if it is stale.
func (x *subscriptionIndex) build(entities map[ekey]*entity) {
	if x.built {
		return
	}
	byTopic := map[ekey][]*entity{}
	for k, e := range entities {
		if isSubscription(e.cfg) {
			tk := ekey{ID: e.cfg.GetTopicId(), Part: k.Part}
			byTopic[tk] = append(byTopic[tk], e)
		}
	}
	for _, subs := range byTopic {
		slices.SortFunc(subs, func(x, y *entity) int {
			switch {
			case x.key.ID < y.key.ID:
				return -1
			case x.key.ID > y.key.ID:
				return 1
			}
			return 0
		})
	}
	*x = subscriptionIndex{built: true, byTopic: byTopic, fingerprints: map[ekey]uint64{}, changed: x.changed}
}

// fingerprintOf is topic partition t's fingerprint (plan.go) in the
// state the index was built from; the index must be built.
func (x *subscriptionIndex) fingerprintOf(t *entity) uint64 {
	f, ok := x.fingerprints[t.key]
	if !ok {
		f = fingerprint(t, x.byTopic[t.key])
		x.fingerprints[t.key] = f
	}
	return f
}

// subscriptionsOf lists the subscription partitions that receive the
// sends to topic partition t (subscriptionIndex). The caller must not
// change the slice.
func (a *applier) subscriptionsOf(t *entity) []*entity {
	a.subs.build(a.entities)
	return a.subs.byTopic[t.key]
}

// filterMessage is what rules see of nm.
func filterMessage(nm *partitionpb.NewMessage, v *partitionpb.FilterView, now, ttl int64) *filter.Message {
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
			if x, err := rules.ValueAny(rv); err == nil {
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
	// What the rule's action changed, if it has one.
	set     *partitionpb.FilterView
	removed []string
}

// route decides the copies of a message: per subscription, one per
// matching rule, each changed by its rule's action. match says whether the
// k-th rule matches (counting the rules of every subscription, disabled
// ones included, as TopicPlan.matched does), on fm when it evaluates the
// rule. fm gives the message as rules see it, built once when first asked
// for. ids makes newid()'s source for the actions, once, when the first
// action runs (most sends meet none).
func route(subs []*entity, match func(k int, r *compiledRule) (bool, error), fm func() *filter.Message, ids func() func() filter.UUID) []copyPlan {
	out := make([]copyPlan, 0, len(subs)) // one copy per subscription, the usual case
	var newID func() filter.UUID
	k := 0
	for _, s := range subs {
		if s.status() == partitionpb.EntityStatus_ENTITY_STATUS_DISABLED {
			k += len(s.rules)
			continue // a disabled subscription takes no copies
		}
		for j := range s.rules {
			r := &s.rules[j]
			ok, err := match(k, r)
			k++
			if err != nil {
				if errors.Is(err, filter.ErrEvaluation) && s.cfg.DeadLetteringOnFilterEvaluationExceptions {
					out = append(out, copyPlan{sub: s, dead: ReasonFilterEvaluation, desc: fmt.Sprintf("rule %s: %v", r.name, err)})
				}
				continue
			}
			if !ok {
				continue
			}
			cp := copyPlan{sub: s}
			if r.action != nil {
				if newID == nil {
					newID = ids()
				}
				after, err := r.action.Apply(fm(), newID)
				if err != nil {
					if errors.Is(err, filter.ErrEvaluation) && s.cfg.DeadLetteringOnFilterEvaluationExceptions {
						out = append(out, copyPlan{sub: s, dead: ReasonFilterEvaluation, desc: fmt.Sprintf("rule %s: action: %v", r.name, err)})
					}
					continue
				}
				cp.set, cp.removed = actionChanges(fm(), after)
			}
			out = append(out, cp)
		}
	}
	return out
}

// publish applies an Enqueue to topic partition t (enqueue has checked
// the messages as it does for any entity): every check first, then the
// copies, so that a refused send writes nothing.
func (a *applier) publish(t *entity, c *partitionpb.Enqueue) (*partitionpb.Result, error) {
	subs := a.subscriptionsOf(t)
	plan := a.planFor(t, c)
	rules := 0
	for _, s := range subs {
		rules += len(s.rules)
	}
	plans := make([][]copyPlan, len(c.Messages))
	added := map[*entity]int64{}
	for i, nm := range c.Messages {
		if a.format < FormatV7 && (len(nm.StagedBody) > 0 || nm.Forwarded != nil) {
			// As the versions that wrote such entries applied them.
			return nil, fmt.Errorf("%w: not implemented: message %d: a message staged in chunks or forwarded, sent to topic %s", ErrInvalid, i, t.cfg.Name)
		}
		if nm.Forwarded != nil && nm.FilterView == nil {
			return nil, fmt.Errorf("%w: message %d: forwarded to topic %s without the view its rules read", ErrInvalid, i, t.cfg.Name)
		}
		ttl := nm.TtlMs
		if ttl == 0 {
			ttl = t.cfg.DefaultTtlMs
		}
		var fm *filter.Message
		view := func() *filter.Message {
			if fm == nil {
				fm = filterMessage(nm, a.viewOf(nm), a.now, ttl)
			}
			return fm
		}
		match := func(_ int, r *compiledRule) (bool, error) { return r.filter.Match(view()) }
		if bits := plannedMatch(plan, i, rules); bits != nil {
			// The leader's outcome (plan.go): what Match would say here.
			match = func(k int, _ *compiledRule) (bool, error) { return bits[k/8]&(1<<(k%8)) != 0, nil }
		}
		p := route(subs, match, view, func() func() filter.UUID { return newIDs(t, i) })
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
	if err := a.pruneForward(t, dedupPrune+len(c.Messages)); err != nil {
		return nil, err
	}
	if err := a.pruneTopicScheduled(t, dedupPrune+len(c.Messages)); err != nil {
		return nil, err
	}
	r := &partitionpb.Result{SequenceNumbers: make([]uint64, 0, len(c.Messages))}
	// One state message for every copy: add encodes it into the batch
	// and keeps nothing of it, and a send of 64 messages to 10
	// subscriptions allocated 640 of them.
	scratch := new(partitionpb.StoredMessage)
	for i, nm := range c.Messages {
		// A forwarded message's origin is remembered by the topic
		// partition, in the batch that adds its copies: a resend is
		// answered with the topic sequence number it got, and adds none.
		var origin []byte
		var took *forwardEntry
		if nm.Forwarded != nil {
			origin = originID(nm.Forwarded)
			var err error
			if took, err = a.forwardEntry(t, origin); err != nil {
				return nil, err
			}
			if took.fresh(a.now) {
				r.SequenceNumbers = append(r.SequenceNumbers, took.seq)
				if err := a.dropStagedOf(t, nm); err != nil {
					return nil, err
				}
				continue
			}
		}
		var seen *dedupEntry
		if dedup && nm.MessageId != "" {
			d, err := a.dedupEntry(t, nm.MessageId)
			if err != nil {
				return nil, err
			}
			if d != nil && a.now-d.at < t.cfg.DuplicateDetectionWindowMs {
				r.SequenceNumbers = append(r.SequenceNumbers, d.seq)
				if err := a.dropStagedOf(t, nm); err != nil {
					return nil, err
				}
				continue
			}
			seen = &dedupEntry{}
			if d != nil {
				seen = d
			}
		}
		seq := t.nextSequence()
		a.dirty[t.key] = true
		// A scheduled message's copies are recorded for a cancel by the
		// topic's number (topicsched.go); format 7 on (codec.go).
		var sched []store.ScheduledCopy
		var prev copyShape
		size := newMessageSize(nm)
		for j, cp := range plans[i] {
			m, err := a.addCopy(t, cp, nm, i, topicShare(size, len(plans[i]), j), scratch, &prev)
			if err != nil {
				return nil, err
			}
			if m.State == partitionpb.MessageState_MESSAGE_STATE_SCHEDULED && a.format >= FormatV7 {
				sched = append(sched, store.ScheduledCopy{Sub: cp.sub.key.ID, Seq: m.SequenceNumber})
			}
		}
		if len(sched) > 0 {
			if err := a.recordTopicScheduled(t, seq, nm.ScheduledEnqueueTimeMs, sched); err != nil {
				return nil, err
			}
			a.countTopicScheduled(t, +1)
		}
		if len(nm.StagedBody) > 0 {
			// Stored once: the copies share the topic's blob.
			if err := a.shareBlob(t, nm, len(plans[i])); err != nil {
				return nil, err
			}
		} else if blob := a.sharedBodyID(nm, i); blob != nil && len(plans[i]) > 0 {
			if err := a.b.ShareBody(t.key, blob, nm.Bare, len(plans[i])); err != nil {
				return nil, err
			}
		}
		if seen != nil {
			if err := a.recordDedup(t, nm.MessageId, seq, seen); err != nil {
				return nil, err
			}
		}
		if origin != nil {
			if err := a.recordForward(t, origin, seq, took); err != nil {
				return nil, err
			}
		}
		r.SequenceNumbers = append(r.SequenceNumbers, seq)
	}
	return r, nil
}

// sharedBodyID is the name of the blob that keeps the bare message of
// message i of the Enqueue being applied to a topic once for its copies,
// when the machine keeps no bodies in the Raft log; nil when the copies
// keep it otherwise: in the log (keepInLog), staged, whole in each copy
// (an entry that did not walk, as keepInLog stores those), or not at all
// (no bare message). See bodyBlobID.
func (a *applier) sharedBodyID(nm *partitionpb.NewMessage, i int) []byte {
	if a.logs != nil || i >= len(a.spans) || len(nm.StagedBody) > 0 || len(nm.Bare) == 0 {
		return nil
	}
	return bodyBlobID(a.entry, a.spans[i])
}

// dropStagedOf deletes the staged blob of nm, a message not taken (a
// duplicate), if it is still staged (dropStaged).
func (a *applier) dropStagedOf(t *entity, nm *partitionpb.NewMessage) error {
	return a.dropStaged(&partitionpb.Enqueue{EntityId: t.key.ID, Partition: t.key.Part, Messages: []*partitionpb.NewMessage{nm}})
}

// copyShape is what tells a copy's state record from the one of the
// copy of the same message added before it, besides its sequence number.
type copyShape struct {
	plain        bool // no rule action changed it, and it is not dead-lettered
	ttl, expires int64
	share        int64
}

// addCopy adds message i of the Enqueue being applied to a subscription,
// with share bytes of its topic's size (topiccounts.go), built in m (which
// it resets) and returned. prev is the shape of the copy
// of message i added before, if any, and becomes this one's: a copy of
// the same shape as the one before it reuses its record's encoding
// (store.Batch.PutNewCopy; partition's tests have the store check it).
// Its time to live is the message's, else the topic's default (the
// front-end's ttl_ms), capped by the subscription's default, as Service
// Bus takes the smaller.
func (a *applier) addCopy(t *entity, cp copyPlan, nm *partitionpb.NewMessage, i int, share int64, m *partitionpb.StoredMessage, prev *copyShape) (*partitionpb.StoredMessage, error) {
	s := cp.sub
	m.Reset() // m is the caller's, reused copy after copy
	m.SequenceNumber = s.nextSequence()
	m.EnqueuedTimeMs = a.now
	m.SubQueue = partitionpb.SubQueue_SUB_QUEUE_MAIN
	m.State = partitionpb.MessageState_MESSAGE_STATE_ACTIVE
	m.ScheduledEnqueueTimeMs = nm.ScheduledEnqueueTimeMs
	m.MessageId, m.SessionId, m.PartitionKey = nm.MessageId, nm.SessionId, nm.PartitionKey
	m.Header, m.Annotations, m.Bare = nm.Header, nm.Annotations, nm.Bare
	m.TtlMs = nm.TtlMs
	m.TopicShare = share
	if d := s.cfg.DefaultTtlMs; d > 0 && (m.TtlMs == 0 || m.TtlMs > d) {
		m.TtlMs = d
	}
	withOrigin(m, nm.Forwarded)
	m.ActionSet, m.ActionRemoved = mergeActions(m.ActionSet, m.ActionRemoved, cp.set, cp.removed)
	switch blob := a.sharedBodyID(nm, i); {
	case len(nm.StagedBody) > 0:
		if err := a.useSharedBlob(s, t, nm, m); err != nil {
			return nil, err
		}
	case blob != nil:
		if err := a.shareBody(s, m, blob, 0); err != nil {
			return nil, err
		}
	default:
		a.keepInLog(m, i)
	}
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
	shape := copyShape{plain: cp.set == nil && len(cp.removed) == 0 && cp.dead == "", ttl: m.TtlMs, expires: m.ExpiresAtMs, share: share}
	like := shape.plain && *prev == shape
	*prev = shape
	return m, a.add(s, m, like)
}

// mergeActions is what a copy's rule action changed (set, removed) on top
// of what the copy already carried (curSet, curRemoved: a forwarded
// message's origin; the front-end's ForTopic writes a rule action's
// changes into the bare message before it forwards to a topic, so this is
// mostly the new changes alone). A property set anew is no longer
// removed, and one removed anew no longer set.
func mergeActions(curSet *partitionpb.FilterView, curRemoved []string, set *partitionpb.FilterView, removed []string) (*partitionpb.FilterView, []string) {
	if curSet == nil && len(curRemoved) == 0 {
		return set, removed
	}
	out := &partitionpb.FilterView{}
	if curSet != nil {
		out = proto.Clone(curSet).(*partitionpb.FilterView)
	}
	if set != nil {
		over := func(dst *string, v string) {
			if v != "" {
				*dst = v
			}
		}
		over(&out.CorrelationId, set.CorrelationId)
		over(&out.To, set.To)
		over(&out.ReplyTo, set.ReplyTo)
		over(&out.Subject, set.Subject)
		over(&out.ContentType, set.ContentType)
		over(&out.ReplyToSessionId, set.ReplyToSessionId)
		for k, v := range set.Properties {
			if out.Properties == nil {
				out.Properties = map[string]*placementpb.RuleValue{}
			}
			out.Properties[k] = v
		}
	}
	var gone []string
	for _, k := range curRemoved {
		if _, ok := set.GetProperties()[k]; !ok {
			gone = append(gone, k)
		}
	}
	for _, k := range removed {
		delete(out.Properties, k)
		if !slices.Contains(gone, k) {
			gone = append(gone, k)
		}
	}
	slices.Sort(gone)
	if proto.Size(out) == 0 {
		out = nil
	}
	return out, gone
}

// newIDs is newid()'s source for the actions run on message i of an
// Enqueue to topic t: identifiers derived from the topic partition, its
// sequence counter, i and a count, so that every replica makes the same
// ones (the leader stamps nothing). They are unique per topic partition
// (the counter only grows) but not random: do not take them for secrets.
func newIDs(t *entity, i int) func() filter.UUID {
	n := uint64(0)
	return func() filter.UUID {
		var in [8 * 5]byte
		for k, v := range []uint64{t.key.ID, uint64(t.key.Part), t.next, uint64(i), n} {
			binary.BigEndian.PutUint64(in[8*k:], v)
		}
		n++
		sum := sha256.Sum256(in[:])
		var u filter.UUID
		copy(u[:], sum[:16])
		u[6] = u[6]&0x0f | 0x40 // version 4, variant 10, as a random UUID
		u[8] = u[8]&0x3f | 0x80
		return u
	}
}

// actionChanges is what an action changed from before to after: the
// system properties the front-end can write back (a property an action
// clears keeps its value: the view cannot say "unset"), the application
// properties set to a new value, and those removed (or set to null, or to
// a value a rule value cannot hold), by name.
func actionChanges(before, after *filter.Message) (*partitionpb.FilterView, []string) {
	set := &partitionpb.FilterView{}
	pick := func(b, a string) string {
		if a != b {
			return a
		}
		return ""
	}
	set.CorrelationId = pick(before.CorrelationID, after.CorrelationID)
	set.To = pick(before.To, after.To)
	set.ReplyTo = pick(before.ReplyTo, after.ReplyTo)
	set.Subject = pick(before.Subject, after.Subject)
	set.ContentType = pick(before.ContentType, after.ContentType)
	set.ReplyToSessionId = pick(before.ReplyToSessionID, after.ReplyToSessionID)
	var removed []string
	for k, v := range after.Properties {
		rv := anyRuleValue(v)
		if rv == nil {
			removed = append(removed, k)
			continue
		}
		if old, ok := before.Properties[k]; ok {
			if orv := anyRuleValue(old); orv != nil && proto.Equal(orv, rv) {
				continue
			}
		}
		if set.Properties == nil {
			set.Properties = map[string]*placementpb.RuleValue{}
		}
		set.Properties[k] = rv
	}
	for k := range before.Properties {
		if _, ok := after.Properties[k]; !ok {
			removed = append(removed, k)
		}
	}
	slices.Sort(removed)
	if proto.Size(set) == 0 {
		set = nil
	}
	return set, removed
}

// anyRuleValue is the rule value of an application property as an action
// leaves it, nil when none holds it.
func anyRuleValue(v any) *placementpb.RuleValue {
	switch x := v.(type) {
	case string:
		return &placementpb.RuleValue{Value: &placementpb.RuleValue_StringValue{StringValue: x}}
	case bool:
		return &placementpb.RuleValue{Value: &placementpb.RuleValue_BoolValue{BoolValue: x}}
	case int64:
		return &placementpb.RuleValue{Value: &placementpb.RuleValue_LongValue{LongValue: x}}
	case float64:
		return &placementpb.RuleValue{Value: &placementpb.RuleValue_DoubleValue{DoubleValue: x}}
	case filter.Timestamp:
		return &placementpb.RuleValue{Value: &placementpb.RuleValue_TimestampMs{TimestampMs: int64(x)}}
	case filter.Duration:
		return &placementpb.RuleValue{Value: &placementpb.RuleValue_DurationMs{DurationMs: int64(x)}}
	case filter.UUID: // newid(): Service Bus sets a Guid; a rule value holds its text
		return &placementpb.RuleValue{Value: &placementpb.RuleValue_StringValue{StringValue: x.String()}}
	}
	return nil
}
