package cluster

import (
	"encoding/json"
	"fmt"
	"os"
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
	d := placementpb.QueueDescription{
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
	for _, f := range []struct {
		text string
		dst  *time.Duration
		name string
	}{
		{p.LockDuration, &d.LockDuration, "LockDuration"},
		{p.DefaultMessageTimeToLive, &d.DefaultMessageTimeToLive, "DefaultMessageTimeToLive"},
		{p.DuplicateDetectionHistoryTimeWindow, &d.DuplicateDetectionHistoryTimeWindow, "DuplicateDetectionHistoryTimeWindow"},
	} {
		if f.text == "" {
			continue
		}
		v, err := placementpb.ParseISODuration(f.text)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.name, err)
		}
		*f.dst = v
	}
	return d.Properties(), nil
}
