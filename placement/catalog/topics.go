package catalog

import (
	"fmt"
	"strings"

	"google.golang.org/protobuf/proto"

	pb "github.com/quorumbus/quorumbus/proto/placementpb"
)

// subscriptionsSegment is the path segment between a topic's name and a
// subscription's: <topic>/Subscriptions/<name>, as the SDKs address it.
const subscriptionsSegment = "Subscriptions"

// Azure's limits of subscriptions: per topic, and the length of a
// subscription's own name (the last segment of its entity name).
const (
	MaxSubscriptions          = 2000
	MaxSubscriptionNameLength = 50
)

// SubscriptionName is the entity name of subscription sub of topic.
func SubscriptionName(topic, sub string) string {
	return topic + "/" + subscriptionsSegment + "/" + sub
}

// SplitSubscriptionName splits <topic>/Subscriptions/<name>; ok is false
// for a name of another form.
func SplitSubscriptionName(name string) (topic, sub string, ok bool) {
	i := strings.LastIndexByte(name, '/')
	if i < 0 {
		return "", "", false
	}
	rest, sub := name[:i], name[i+1:]
	j := strings.LastIndexByte(rest, '/')
	if j < 0 || !strings.EqualFold(rest[j+1:], subscriptionsSegment) || j == 0 || sub == "" {
		return "", "", false
	}
	return rest[:j], sub, true
}

// hasSubscriptionsSegment reports whether a name has a Subscriptions path
// segment, which only subscription names may have.
func hasSubscriptionsSegment(name string) bool {
	for seg := range strings.SplitSeq(name, "/") {
		if strings.EqualFold(seg, subscriptionsSegment) {
			return true
		}
	}
	return false
}

func kindName(k pb.EntityKind) string {
	return strings.ToLower(strings.TrimPrefix(k.String(), "ENTITY_KIND_"))
}

// CheckKindProperties refuses the properties Service Bus does not give an
// entity of this kind. A value equal to the default Normalize fills in
// counts as unset, so normalized properties pass. A subscription's
// partitioning comes from its topic, so it must not be asked for.
func CheckKindProperties(kind pb.EntityKind, p *pb.QueueProperties) error {
	if p == nil {
		return nil
	}
	var bad []string
	flag := func(set bool, name string) {
		if set {
			bad = append(bad, name)
		}
	}
	switch kind {
	case pb.EntityKind_ENTITY_KIND_QUEUE:
		flag(p.GetDeadLetteringOnFilterEvaluationExceptions(), "DeadLetteringOnFilterEvaluationExceptions")
	case pb.EntityKind_ENTITY_KIND_TOPIC:
		flag(p.LockDurationMs != 0 && p.LockDurationMs != DefaultLockDurationMs, "LockDuration")
		flag(p.MaxDeliveryCount != 0 && p.MaxDeliveryCount != DefaultMaxDeliveryCount, "MaxDeliveryCount")
		flag(p.DeadLetteringOnMessageExpiration, "DeadLetteringOnMessageExpiration")
		flag(p.RequiresSession, "RequiresSession")
		flag(p.ForwardTo != "", "ForwardTo")
		flag(p.ForwardDeadLetteredMessagesTo != "", "ForwardDeadLetteredMessagesTo")
		flag(p.GetDeadLetteringOnFilterEvaluationExceptions(), "DeadLetteringOnFilterEvaluationExceptions")
		flag(p.SessionAcceptWaitMs != nil, "SessionAcceptWait")
	case pb.EntityKind_ENTITY_KIND_SUBSCRIPTION:
		flag(p.RequiresDuplicateDetection, "RequiresDuplicateDetection")
		flag(p.DuplicateDetectionWindowMs != 0 && p.DuplicateDetectionWindowMs != DefaultDuplicateWindowMs, "DuplicateDetectionHistoryTimeWindow")
		flag(p.MaxSizeInMegabytes != 0 && p.MaxSizeInMegabytes != DefaultMaxSizeMB, "MaxSizeInMegabytes")
		flag(p.MaxMessageSizeInKilobytes != 0 && p.MaxMessageSizeInKilobytes != DefaultMaxMessageSizeKB, "MaxMessageSizeInKilobytes")
	}
	if len(bad) > 0 {
		return fmt.Errorf("%w: a %s has no %s", ErrInvalidProperties, kindName(kind), strings.Join(bad, ", "))
	}
	return nil
}

// subscriptionDefaults fills in what Normalize cannot, not knowing the
// kind: a subscription dead-letters a copy its rule fails on unless told
// otherwise (Azure's default).
func subscriptionDefaults(kind pb.EntityKind, p *pb.QueueProperties) {
	if kind == pb.EntityKind_ENTITY_KIND_SUBSCRIPTION && p.DeadLetteringOnFilterEvaluationExceptions == nil {
		p.DeadLetteringOnFilterEvaluationExceptions = proto.Bool(true)
	}
}

// checkPlacement checks what depends on an entity's kind when it is
// created: a subscription belongs to an existing topic and lives on its
// topic's partition groups (so that a send to a topic partition reaches
// its subscriptions in one Raft group); no other name may look like a
// subscription's; only subscriptions have rules.
func (s *State) checkPlacement(c *pb.CreateEntityCommand, props *pb.QueueProperties) error {
	if c.Kind != pb.EntityKind_ENTITY_KIND_SUBSCRIPTION {
		if hasSubscriptionsSegment(c.Name) {
			return fmt.Errorf("%w: %q: only a subscription's name has a %s segment", ErrInvalidName, c.Name, subscriptionsSegment)
		}
		if len(c.Rules) > 0 {
			return fmt.Errorf("%w: a %s has no rules", ErrInvalidRule, kindName(c.Kind))
		}
		return nil
	}
	topicName, subName, ok := SplitSubscriptionName(c.Name)
	if !ok {
		return fmt.Errorf("%w: %q: a subscription is named <topic>/%s/<name>", ErrInvalidName, c.Name, subscriptionsSegment)
	}
	if len(subName) > MaxSubscriptionNameLength {
		return fmt.Errorf("%w: subscription name %q: at most %d characters", ErrInvalidName, subName, MaxSubscriptionNameLength)
	}
	topic := s.byName(topicName)
	if topic == nil || topic.Kind != pb.EntityKind_ENTITY_KIND_TOPIC {
		return fmt.Errorf("%w: topic %q of subscription %q", ErrNotFound, topicName, c.Name)
	}
	if props.PartitionCount != topic.Properties.GetPartitionCount() || !equalGroups(c.PartitionGroups, topic.PartitionGroups) {
		return fmt.Errorf("%w: subscription %q must be placed on the partition groups of topic %q", ErrConflict, c.Name, topic.Name)
	}
	if n := len(s.subscriptionsOf(topic)); n >= MaxSubscriptions {
		return fmt.Errorf("%w: topic %q has %d subscriptions, the limit", ErrTooManyEntities, topic.Name, n)
	}
	return nil
}

func equalGroups(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// subscriptionPrefix is what the keys of a topic's subscriptions start
// with.
func subscriptionPrefix(topic string) string {
	return Key(topic) + "/" + Key(subscriptionsSegment) + "/"
}

// subscriptionEntries are a topic's subscriptions in the name index,
// ordered by name. A subscription's own name has no '/' and a topic's
// name no Subscriptions segment (checkPlacement), so the prefix range
// holds exactly the topic's subscriptions.
func (s *State) subscriptionEntries(topic string) []indexEntry {
	return s.index.withPrefix(pb.EntityKind_ENTITY_KIND_SUBSCRIPTION, subscriptionPrefix(topic))
}

// subscriptionsOf lists a topic's subscriptions, ordered by name.
func (s *State) subscriptionsOf(topic *pb.Entity) []*pb.Entity {
	return s.entitiesOf(s.subscriptionEntries(topic.Name))
}

// Subscriptions lists a topic's subscriptions ordered by name (ignoring
// case), skipping the first skip; top 0 means no limit. ok is false when
// there is no such topic. The cost is the page's, not the namespace's.
func (s *State) Subscriptions(topic string, skip, top int) (subs []*pb.Entity, ok bool) {
	t := s.byName(topic)
	if t == nil || t.Kind != pb.EntityKind_ENTITY_KIND_TOPIC {
		return nil, false
	}
	return s.outwardAll(s.entitiesOf(window(s.subscriptionEntries(t.Name), skip, top))), true
}
