package cluster

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// The official Service Bus emulator is configured with a Config.json;
// `quorumbus dev --config` reads the same file so that a project moving
// from the emulator keeps its entity definitions.
//
//	{"UserConfig": {"Namespaces": [{"Name": "sbemulatorns",
//	  "Queues": [{"Name": "queue.1", "Properties": {"LockDuration": "PT1M", ...}}]}]}}

type emulatorConfig struct {
	UserConfig struct {
		Namespaces []struct {
			Name   string
			Queues []struct {
				Name       string
				Properties emulatorQueueProperties
			}
			Topics []json.RawMessage
		}
	}
}

type emulatorQueueProperties struct {
	DeadLetteringOnMessageExpiration    bool
	DefaultMessageTimeToLive            string
	DuplicateDetectionHistoryTimeWindow string
	ForwardDeadLetteredMessagesTo       string
	ForwardTo                           string
	LockDuration                        string
	MaxDeliveryCount                    uint32
	RequiresDuplicateDetection          bool
	RequiresSession                     bool
	MaxSizeInMegabytes                  int64
	MaxMessageSizeInKilobytes           int64
	PartitionCount                      uint32
}

// QueueSpec is one queue to create.
type QueueSpec struct {
	Name  string
	Props *placementpb.QueueProperties
}

// LoadEmulatorConfig reads the queues of every namespace of a Config.json.
// Topics are reported, not silently dropped: they come with the topics
// issue.
func LoadEmulatorConfig(path string) ([]QueueSpec, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var cfg emulatorConfig
	if err := json.Unmarshal(data, &cfg); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var out []QueueSpec
	for _, ns := range cfg.UserConfig.Namespaces {
		if len(ns.Topics) > 0 {
			return nil, fmt.Errorf("%s: namespace %s defines topics, which are not implemented yet", path, ns.Name)
		}
		for _, q := range ns.Queues {
			props, err := q.Properties.toProto()
			if err != nil {
				return nil, fmt.Errorf("%s: queue %s: %w", path, q.Name, err)
			}
			out = append(out, QueueSpec{Name: q.Name, Props: props})
		}
	}
	return out, nil
}

func (p emulatorQueueProperties) toProto() (*placementpb.QueueProperties, error) {
	out := &placementpb.QueueProperties{
		MaxDeliveryCount:                 p.MaxDeliveryCount,
		DeadLetteringOnMessageExpiration: p.DeadLetteringOnMessageExpiration,
		RequiresDuplicateDetection:       p.RequiresDuplicateDetection,
		RequiresSession:                  p.RequiresSession,
		MaxSizeInMegabytes:               p.MaxSizeInMegabytes,
		MaxMessageSizeInKilobytes:        p.MaxMessageSizeInKilobytes,
		PartitionCount:                   p.PartitionCount,
		ForwardTo:                        p.ForwardTo,
		ForwardDeadLetteredMessagesTo:    p.ForwardDeadLetteredMessagesTo,
	}
	for _, d := range []struct {
		text string
		dst  *int64
		name string
	}{
		{p.LockDuration, &out.LockDurationMs, "LockDuration"},
		{p.DefaultMessageTimeToLive, &out.DefaultMessageTtlMs, "DefaultMessageTimeToLive"},
		{p.DuplicateDetectionHistoryTimeWindow, &out.DuplicateDetectionWindowMs, "DuplicateDetectionHistoryTimeWindow"},
	} {
		if d.text == "" {
			continue
		}
		v, err := ParseISODuration(d.text)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", d.name, err)
		}
		*d.dst = v.Milliseconds()
	}
	return out, nil
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
