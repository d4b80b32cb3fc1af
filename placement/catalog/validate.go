package catalog

import (
	"fmt"
	"strings"

	"google.golang.org/protobuf/proto"

	pb "github.com/quorumbus/quorumbus/proto/placementpb"
)

// Limits of one namespace: at most 10,000 entities and 100 partitioned
// ones, as in Service Bus; a partitioned entity has 16 partitions unless
// created with another count. They are constants, not settings: every
// member of the meta group must apply the same rules.
const (
	MaxEntities            = 10_000
	MaxPartitionedEntities = 100
	MaxNameLength          = 260
	DefaultPartitions      = 16
	MaxPartitions          = 32
)

// Defaults and bounds of the entity properties, in the units of
// QueueProperties.
const (
	DefaultLockDurationMs    = 60_000
	MinLockDurationMs        = 1_000
	MaxLockDurationMs        = 300_000
	DefaultMaxDeliveryCount  = 10
	DefaultDuplicateWindowMs = 600_000
	MinDuplicateWindowMs     = 20_000
	MaxDuplicateWindowMs     = 7 * 24 * 3_600_000
	DefaultMaxSizeMB         = 1024
	MaxMaxSizeMB             = 81_920
	DefaultMaxMessageSizeKB  = 256
	MaxMaxMessageSizeKB      = 102_400
	// A partitioned entity takes messages, and batches, of at most 1 MB
	// (Service Bus: partitioned entities, seed 000).
	MaxPartitionedMessageSizeKB = 1024
	// session_accept_wait_ms, when set: at least 100 ms (a shorter wait
	// is a refusal before the request can reach the leader), at most the
	// minute Azure waits without one.
	MinSessionAcceptWaitMs = 100
	MaxSessionAcceptWaitMs = 60_000
)

// Key is the form of a name under which the catalog looks it up: names are
// case-insensitive. CheckName admits ASCII only, so lower-casing is enough.
func Key(name string) string { return strings.ToLower(name) }

// CheckName reports whether name may name an entity: 1 to 260 characters of
// letters, digits, '.', '-', '_' and '/', each '/'-separated segment
// starting and ending with a letter or digit. Subscriptions use the path
// form "<topic>/Subscriptions/<name>".
func CheckName(name string) error {
	if name == "" {
		return fmt.Errorf("%w: empty", ErrInvalidName)
	}
	if len(name) > MaxNameLength {
		return fmt.Errorf("%w: %d characters, at most %d", ErrInvalidName, len(name), MaxNameLength)
	}
	for seg := range strings.SplitSeq(name, "/") {
		if seg == "" {
			return fmt.Errorf("%w: %q has an empty path segment", ErrInvalidName, name)
		}
		for i := 0; i < len(seg); i++ {
			c := seg[i]
			alnum := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
			if alnum {
				continue
			}
			if c != '.' && c != '-' && c != '_' {
				return fmt.Errorf("%w: %q contains %q", ErrInvalidName, name, c)
			}
			if i == 0 || i == len(seg)-1 {
				return fmt.Errorf("%w: %q: segments start and end with a letter or digit", ErrInvalidName, name)
			}
		}
	}
	return nil
}

// Normalize checks properties and returns a copy with every default filled
// in and the partitioning made explicit (PartitionCount is the effective
// count, 1 for a plain entity; EnablePartitioning is PartitionCount > 1).
// Normalizing normalized properties changes nothing. nil means all
// defaults.
func Normalize(p *pb.QueueProperties) (*pb.QueueProperties, error) {
	out := &pb.QueueProperties{}
	if p != nil {
		out = proto.Clone(p).(*pb.QueueProperties)
	}
	invalid := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidProperties}, args...)...)
	}

	switch d := out.LockDurationMs; {
	case d == 0:
		out.LockDurationMs = DefaultLockDurationMs
	case d < MinLockDurationMs || d > MaxLockDurationMs:
		return nil, invalid("lock duration %d ms is outside %d ms to %d ms (5 minutes)", d, MinLockDurationMs, MaxLockDurationMs)
	}
	if out.MaxDeliveryCount == 0 {
		out.MaxDeliveryCount = DefaultMaxDeliveryCount
	}
	if out.DefaultMessageTtlMs < 0 {
		return nil, invalid("default message TTL %d ms is negative", out.DefaultMessageTtlMs)
	}
	switch w := out.DuplicateDetectionWindowMs; {
	case w == 0:
		out.DuplicateDetectionWindowMs = DefaultDuplicateWindowMs
	case w < MinDuplicateWindowMs || w > MaxDuplicateWindowMs:
		return nil, invalid("duplicate detection window %d ms is outside 20 seconds to 7 days", w)
	}
	switch s := out.MaxSizeInMegabytes; {
	case s == 0:
		out.MaxSizeInMegabytes = DefaultMaxSizeMB
	case s < 1 || s > MaxMaxSizeMB:
		return nil, invalid("max size %d MB is outside 1 to %d", s, MaxMaxSizeMB)
	}
	switch s := out.MaxMessageSizeInKilobytes; {
	case s == 0:
		out.MaxMessageSizeInKilobytes = DefaultMaxMessageSizeKB
	case s < 1 || s > MaxMaxMessageSizeKB:
		return nil, invalid("max message size %d KB is outside 1 to %d", s, MaxMaxMessageSizeKB)
	}

	switch n := out.PartitionCount; {
	case n == 0 && out.EnablePartitioning:
		out.PartitionCount = DefaultPartitions
	case n == 0:
		out.PartitionCount = 1
	case n == 1 && out.EnablePartitioning:
		return nil, invalid("a partitioned entity needs at least 2 partitions")
	case n > MaxPartitions:
		return nil, invalid("%d partitions, at most %d", n, MaxPartitions)
	}
	out.EnablePartitioning = out.PartitionCount > 1
	if out.EnablePartitioning && out.MaxMessageSizeInKilobytes > MaxPartitionedMessageSizeKB {
		return nil, invalid("a partitioned entity takes messages of at most %d KB, not %d", MaxPartitionedMessageSizeKB, out.MaxMessageSizeInKilobytes)
	}

	if w := out.SessionAcceptWaitMs; w != nil && (*w < MinSessionAcceptWaitMs || *w > MaxSessionAcceptWaitMs) {
		return nil, invalid("session accept wait %d ms is outside %d ms to %d ms", *w, MinSessionAcceptWaitMs, MaxSessionAcceptWaitMs)
	}
	for _, fwd := range []string{out.ForwardTo, out.ForwardDeadLetteredMessagesTo} {
		if fwd == "" {
			continue
		}
		if err := CheckName(fwd); err != nil {
			return nil, invalid("forward target: %v", err)
		}
	}
	return out, nil
}

// checkForwarding rejects an entity that forwards to itself, and a
// subscription that forwards to its own topic, which would hand every
// message it takes back to itself.
func checkForwarding(name string, p *pb.QueueProperties) error {
	topic, _, isSub := SplitSubscriptionName(name)
	for _, fwd := range []string{p.ForwardTo, p.ForwardDeadLetteredMessagesTo} {
		if fwd != "" && Key(fwd) == Key(name) {
			return fmt.Errorf("%w: %q forwards to itself", ErrInvalidProperties, name)
		}
		if fwd != "" && isSub && Key(fwd) == Key(topic) {
			return fmt.Errorf("%w: %q forwards to its own topic", ErrInvalidProperties, name)
		}
	}
	return nil
}

// mergeUpdate returns the properties an update asks for, normalized. The
// properties fixed at creation (sessions, duplicate detection, partitioning)
// are taken from the current ones when the update leaves them unset, and
// an update that sets them to something else is rejected.
func mergeUpdate(cur, upd *pb.QueueProperties) (*pb.QueueProperties, error) {
	p := proto.Clone(upd).(*pb.QueueProperties)
	if p.DeadLetteringOnFilterEvaluationExceptions == nil {
		p.DeadLetteringOnFilterEvaluationExceptions = cur.DeadLetteringOnFilterEvaluationExceptions
	}
	if p.SessionAcceptWaitMs == nil {
		// The admin API does not know it (placement.proto).
		p.SessionAcceptWaitMs = cur.SessionAcceptWaitMs
	}
	if !p.RequiresSession {
		p.RequiresSession = cur.RequiresSession
	}
	if !p.RequiresDuplicateDetection {
		p.RequiresDuplicateDetection = cur.RequiresDuplicateDetection
	}
	if p.PartitionCount == 0 && !p.EnablePartitioning {
		p.PartitionCount, p.EnablePartitioning = cur.PartitionCount, cur.EnablePartitioning
	}
	out, err := Normalize(p)
	if err != nil {
		return nil, err
	}
	switch {
	case out.RequiresSession != cur.RequiresSession:
		return nil, fmt.Errorf("%w: requires_session is fixed at creation", ErrInvalidProperties)
	case out.RequiresDuplicateDetection != cur.RequiresDuplicateDetection:
		return nil, fmt.Errorf("%w: requires_duplicate_detection is fixed at creation", ErrInvalidProperties)
	case out.PartitionCount != cur.PartitionCount:
		return nil, fmt.Errorf("%w: the partition count is fixed at creation (%d)", ErrInvalidProperties, cur.PartitionCount)
	}
	return out, nil
}
