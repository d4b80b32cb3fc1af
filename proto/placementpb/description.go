package placementpb

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// QueueDescription is a queue's properties under the names Service Bus
// gives them (its QueueDescription, the emulator's Config.json, the
// admin API), in Go's types. Properties maps it onto the catalog's
// QueueProperties: the one place where Service Bus names meet the
// catalog's. A zero field means the default.
type QueueDescription struct {
	LockDuration                        time.Duration
	MaxDeliveryCount                    uint32
	DefaultMessageTimeToLive            time.Duration
	DeadLetteringOnMessageExpiration    bool
	RequiresDuplicateDetection          bool
	DuplicateDetectionHistoryTimeWindow time.Duration
	RequiresSession                     bool
	MaxSizeInMegabytes                  int64
	MaxMessageSizeInKilobytes           int64
	PartitionCount                      uint32
	// EnablePartitioning without a PartitionCount asks for the default
	// count (the admin API has no count, only this flag).
	EnablePartitioning            bool
	ForwardTo                     string
	ForwardDeadLetteredMessagesTo string
	UserMetadata                  string
	// SessionAcceptWait is quorumbus's own (QueueProperties'
	// session_accept_wait_ms): 0 leaves it unset.
	SessionAcceptWait time.Duration
}

// Properties returns the catalog's properties of a queue so described.
func (d QueueDescription) Properties() *QueueProperties {
	ttl := d.DefaultMessageTimeToLive
	if ttl >= NeverExpires {
		ttl = 0
	}
	return &QueueProperties{
		LockDurationMs:                   d.LockDuration.Milliseconds(),
		MaxDeliveryCount:                 d.MaxDeliveryCount,
		DefaultMessageTtlMs:              ttl.Milliseconds(),
		DeadLetteringOnMessageExpiration: d.DeadLetteringOnMessageExpiration,
		RequiresDuplicateDetection:       d.RequiresDuplicateDetection,
		DuplicateDetectionWindowMs:       d.DuplicateDetectionHistoryTimeWindow.Milliseconds(),
		RequiresSession:                  d.RequiresSession,
		MaxSizeInMegabytes:               d.MaxSizeInMegabytes,
		MaxMessageSizeInKilobytes:        d.MaxMessageSizeInKilobytes,
		PartitionCount:                   d.PartitionCount,
		EnablePartitioning:               d.EnablePartitioning,
		ForwardTo:                        d.ForwardTo,
		ForwardDeadLetteredMessagesTo:    d.ForwardDeadLetteredMessagesTo,
		UserMetadata:                     d.UserMetadata,
		SessionAcceptWaitMs:              acceptWaitMs(d.SessionAcceptWait),
	}
}

// acceptWaitMs is a SessionAcceptWait as the catalog keeps it: nil when
// not given. A wait that rounds to 0 ms stays given, for the catalog to
// refuse.
func acceptWaitMs(d time.Duration) *int64 {
	if d == 0 {
		return nil
	}
	ms := d.Milliseconds()
	return &ms
}

// Describe is the inverse of Properties: the description of a queue with
// these catalog properties (normalized ones have every default filled in).
// A default message TTL of 0 (none) is described as Forever.
func Describe(p *QueueProperties) QueueDescription {
	ms := func(v int64) time.Duration { return time.Duration(v) * time.Millisecond }
	d := QueueDescription{
		LockDuration:                        ms(p.GetLockDurationMs()),
		MaxDeliveryCount:                    p.GetMaxDeliveryCount(),
		DefaultMessageTimeToLive:            ms(p.GetDefaultMessageTtlMs()),
		DeadLetteringOnMessageExpiration:    p.GetDeadLetteringOnMessageExpiration(),
		RequiresDuplicateDetection:          p.GetRequiresDuplicateDetection(),
		DuplicateDetectionHistoryTimeWindow: ms(p.GetDuplicateDetectionWindowMs()),
		RequiresSession:                     p.GetRequiresSession(),
		MaxSizeInMegabytes:                  p.GetMaxSizeInMegabytes(),
		MaxMessageSizeInKilobytes:           p.GetMaxMessageSizeInKilobytes(),
		PartitionCount:                      p.GetPartitionCount(),
		EnablePartitioning:                  p.GetEnablePartitioning() || p.GetPartitionCount() > 1,
		ForwardTo:                           p.GetForwardTo(),
		ForwardDeadLetteredMessagesTo:       p.GetForwardDeadLetteredMessagesTo(),
		UserMetadata:                        p.GetUserMetadata(),
		SessionAcceptWait:                   ms(p.GetSessionAcceptWaitMs()),
	}
	if d.DefaultMessageTimeToLive == 0 {
		d.DefaultMessageTimeToLive = Forever
	}
	return d
}

// Forever is Service Bus's "no limit" for a duration (.NET's
// TimeSpan.MaxValue, written P10675199DT2H48M5.4775807S), the largest
// time.Duration here. A default message TTL from NeverExpires on is
// stored as none (0): no message lives 290 years.
const (
	Forever      = time.Duration(1<<63 - 1)
	NeverExpires = 100 * 365 * 24 * time.Hour
)

// ForeverISO is how Service Bus writes Forever.
const ForeverISO = "P10675199DT2H48M5.4775807S"

// FormatISODuration writes d as Service Bus writes durations: PT1M, P14D,
// P1DT2H3M4.5S; Forever as ForeverISO.
func FormatISODuration(d time.Duration) string {
	if d == Forever {
		return ForeverISO
	}
	if d <= 0 {
		return "PT0S"
	}
	// strconv rather than fmt: a list of the namespace writes three
	// durations an entity.
	b := make([]byte, 0, 24)
	b = append(b, 'P')
	if days := d / (24 * time.Hour); days > 0 {
		b = append(strconv.AppendInt(b, int64(days), 10), 'D')
		d -= days * 24 * time.Hour
	}
	if d == 0 {
		return string(b)
	}
	b = append(b, 'T')
	if h := d / time.Hour; h > 0 {
		b = append(strconv.AppendInt(b, int64(h), 10), 'H')
		d -= h * time.Hour
	}
	if m := d / time.Minute; m > 0 {
		b = append(strconv.AppendInt(b, int64(m), 10), 'M')
		d -= m * time.Minute
	}
	if d > 0 {
		b = append(strconv.AppendFloat(b, d.Seconds(), 'f', -1, 64), 'S')
	}
	return string(b)
}

// ParseISODuration parses the ISO 8601 durations Service Bus uses:
// PnDTnHnMnS with any part optional and fractional seconds (PT1M, PT20S,
// P14D, P10675199DT2H48M5.4775807S for "forever").
func ParseISODuration(s string) (time.Duration, error) {
	orig := s
	if !strings.HasPrefix(s, "P") {
		return 0, fmt.Errorf("duration %q does not start with P", orig)
	}
	s = s[1:]
	var total float64 // seconds
	inTime := false
	units := map[bool]map[byte]float64{
		false: {'D': 86400, 'W': 7 * 86400},
		true:  {'H': 3600, 'M': 60, 'S': 1},
	}
	seen := false
	for len(s) > 0 {
		if s[0] == 'T' {
			if inTime {
				return 0, fmt.Errorf("duration %q has two T", orig)
			}
			inTime = true
			s = s[1:]
			continue
		}
		i := 0
		for i < len(s) && (s[i] >= '0' && s[i] <= '9' || s[i] == '.') {
			i++
		}
		if i == 0 || i == len(s) {
			return 0, fmt.Errorf("duration %q is malformed", orig)
		}
		n, err := strconv.ParseFloat(s[:i], 64)
		if err != nil {
			return 0, fmt.Errorf("duration %q: %w", orig, err)
		}
		mult, ok := units[inTime][s[i]]
		if !ok {
			return 0, fmt.Errorf("duration %q has an unknown unit %q", orig, s[i])
		}
		total += n * mult
		seen = true
		s = s[i+1:]
	}
	if !seen {
		return 0, fmt.Errorf("duration %q is empty", orig)
	}
	const maxSeconds = float64(1<<63-1) / float64(time.Second)
	if total >= maxSeconds {
		return time.Duration(1<<63 - 1), nil
	}
	return time.Duration(total * float64(time.Second)), nil
}
