package catalog

import (
	"github.com/quorumbus/quorumbus/proto/partitionpb"
	pb "github.com/quorumbus/quorumbus/proto/placementpb"
)

// PartitionConfig is what the group holding one partition of e needs to know
// of it: the properties in the partition state machine's terms, defaults
// filled in. Every partition of an entity gets the whole entity's limits;
// MaxSizeBytes is per partition, as in Service Bus.
func PartitionConfig(e *pb.Entity, partition uint32) *partitionpb.EntityConfig {
	p, err := Normalize(e.GetProperties())
	if err != nil {
		// Cannot happen for an entity from the catalog, whose properties
		// were normalized when stored; fall back to all defaults.
		p, _ = Normalize(nil)
	}
	return &partitionpb.EntityConfig{
		EntityId:                   e.GetId(),
		Partition:                  partition,
		Name:                       e.GetName(),
		LockDurationMs:             p.LockDurationMs,
		MaxDeliveryCount:           p.MaxDeliveryCount,
		DefaultTtlMs:               p.DefaultMessageTtlMs,
		DeadLetteringOnExpiration:  p.DeadLetteringOnMessageExpiration,
		RequiresDuplicateDetection: p.RequiresDuplicateDetection,
		DuplicateDetectionWindowMs: p.DuplicateDetectionWindowMs,
		RequiresSession:            p.RequiresSession,
		MaxSizeBytes:               p.MaxSizeInMegabytes << 20,
		Status:                     uint32(e.GetStatus()),
		Kind:                       e.GetKind(),
		// A subscription's rules go to its partitions, which compile them
		// when the config applies; its topic id is the caller's to set
		// (TopicID), as the subscription entity does not hold it.
		Rules: e.GetRules(),
		DeadLetteringOnFilterEvaluationExceptions: e.GetKind() == pb.EntityKind_ENTITY_KIND_SUBSCRIPTION &&
			p.GetDeadLetteringOnFilterEvaluationExceptions(),
		ForwardTo:                     p.GetForwardTo(),
		ForwardDeadLetteredMessagesTo: p.GetForwardDeadLetteredMessagesTo(),
	}
}

// TopicID is the entity id of the topic of subscription e in s, 0 if e is
// not a subscription or its topic is gone.
func (s *State) TopicID(e *pb.Entity) uint64 {
	if e.GetKind() != pb.EntityKind_ENTITY_KIND_SUBSCRIPTION {
		return 0
	}
	name, _, ok := SplitSubscriptionName(e.GetName())
	if !ok {
		return 0
	}
	t := s.byName(name)
	if t == nil || t.GetKind() != pb.EntityKind_ENTITY_KIND_TOPIC {
		return 0
	}
	return t.GetId()
}
