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
	}
}
