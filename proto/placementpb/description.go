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
	ForwardTo                           string
	ForwardDeadLetteredMessagesTo       string
}

// Properties returns the catalog's properties of a queue so described.
func (d QueueDescription) Properties() *QueueProperties {
	return &QueueProperties{
		LockDurationMs:                   d.LockDuration.Milliseconds(),
		MaxDeliveryCount:                 d.MaxDeliveryCount,
		DefaultMessageTtlMs:              d.DefaultMessageTimeToLive.Milliseconds(),
		DeadLetteringOnMessageExpiration: d.DeadLetteringOnMessageExpiration,
		RequiresDuplicateDetection:       d.RequiresDuplicateDetection,
		DuplicateDetectionWindowMs:       d.DuplicateDetectionHistoryTimeWindow.Milliseconds(),
		RequiresSession:                  d.RequiresSession,
		MaxSizeInMegabytes:               d.MaxSizeInMegabytes,
		MaxMessageSizeInKilobytes:        d.MaxMessageSizeInKilobytes,
		PartitionCount:                   d.PartitionCount,
		ForwardTo:                        d.ForwardTo,
		ForwardDeadLetteredMessagesTo:    d.ForwardDeadLetteredMessagesTo,
	}
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
