package cluster

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// The official Service Bus emulator is configured with a Config.json;
// `quorumbus dev --config` reads the same file so that a project moving
// from the emulator keeps its entity definitions.
//
//	{"UserConfig": {"Namespaces": [{"Name": "sbemulatorns",
//	  "Queues": [{"Name": "queue.1", "Properties": {"LockDuration": "PT1M", ...}}],
//	  "Topics": [{"Name": "topic.1", "Properties": {...},
//	    "Subscriptions": [{"Name": "subscription.1", "Properties": {...},
//	      "Rules": [{"Name": "r", "Properties": {"FilterType": "Sql",
//	        "SqlFilter": {"SqlExpression": "..."}, "Action": {"SqlExpression": "SET ..."}}}]}]}]}]}}

type emulatorConfig struct {
	UserConfig struct {
		Namespaces []struct {
			Name   string
			Queues []struct {
				Name       string
				Properties emulatorQueueProperties
			}
			Topics []struct {
				Name          string
				Properties    emulatorTopicProperties
				Subscriptions []struct {
					Name       string
					Properties emulatorSubscriptionProperties
					Rules      []struct {
						Name       string
						Properties emulatorRuleProperties
					}
				}
			}
		}
	}
}

type emulatorTopicProperties struct {
	DefaultMessageTimeToLive            string
	DuplicateDetectionHistoryTimeWindow string
	RequiresDuplicateDetection          bool
	MaxSizeInMegabytes                  int64
	MaxMessageSizeInKilobytes           int64
	PartitionCount                      uint32
	EnablePartitioning                  bool
}

type emulatorSubscriptionProperties struct {
	DeadLetteringOnMessageExpiration          bool
	DeadLetteringOnFilterEvaluationExceptions *bool // absent: true
	DefaultMessageTimeToLive                  string
	LockDuration                              string
	MaxDeliveryCount                          uint32
	ForwardDeadLetteredMessagesTo             string
	ForwardTo                                 string
	RequiresSession                           bool
	// SessionAcceptWait is quorumbus's own (the emulator has none): how
	// long an accept-next without a client timeout waits, an ISO 8601
	// duration at most PT1M.
	SessionAcceptWait string
}

type emulatorRuleProperties struct {
	FilterType string
	SqlFilter  struct {
		SqlExpression string
		Parameters    map[string]any
	}
	CorrelationFilter struct {
		ContentType      string
		CorrelationId    string
		Label            string
		Subject          string
		MessageId        string
		ReplyTo          string
		ReplyToSessionId string
		SessionId        string
		To               string
		Properties       map[string]any
	}
	Action *struct {
		SqlExpression string
		Parameters    map[string]any
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
	SessionAcceptWait                   string // as the subscription's
}

// QueueSpec is one entity to create: a queue, or what Kind says. A
// topic's spec comes before its subscriptions'.
type QueueSpec struct {
	Name  string
	Kind  placementpb.EntityKind
	Props *placementpb.QueueProperties
	Rules []*placementpb.Rule // subscriptions: none gives the $Default rule
}

// LoadEmulatorConfig reads the queues, topics, subscriptions and rules of
// every namespace of a Config.json. Filters are checked when the catalog
// creates the rules.
func LoadEmulatorConfig(path string) ([]QueueSpec, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var cfg emulatorConfig
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber() // rule values: 3 is a long, 3.5 a double
	if err := dec.Decode(&cfg); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%s: data after the configuration", path)
	}
	var out []QueueSpec
	for _, ns := range cfg.UserConfig.Namespaces {
		for _, q := range ns.Queues {
			props, err := q.Properties.toProto()
			if err != nil {
				return nil, fmt.Errorf("%s: queue %s: %w", path, q.Name, err)
			}
			out = append(out, QueueSpec{Name: q.Name, Props: props})
		}
		for _, t := range ns.Topics {
			props, err := t.Properties.toProto()
			if err != nil {
				return nil, fmt.Errorf("%s: topic %s: %w", path, t.Name, err)
			}
			out = append(out, QueueSpec{Name: t.Name, Kind: placementpb.EntityKind_ENTITY_KIND_TOPIC, Props: props})
			for _, s := range t.Subscriptions {
				name := t.Name + "/Subscriptions/" + s.Name
				props, err := s.Properties.toProto()
				if err != nil {
					return nil, fmt.Errorf("%s: subscription %s: %w", path, name, err)
				}
				spec := QueueSpec{Name: name, Kind: placementpb.EntityKind_ENTITY_KIND_SUBSCRIPTION, Props: props}
				for _, r := range s.Rules {
					rule, err := r.Properties.toProto(r.Name)
					if err != nil {
						return nil, fmt.Errorf("%s: subscription %s: %w", path, name, err)
					}
					spec.Rules = append(spec.Rules, rule)
				}
				out = append(out, spec)
			}
		}
	}
	return out, nil
}

func (p emulatorTopicProperties) toProto() (*placementpb.QueueProperties, error) {
	d := placementpb.TopicDescription{
		RequiresDuplicateDetection: p.RequiresDuplicateDetection,
		MaxSizeInMegabytes:         p.MaxSizeInMegabytes,
		MaxMessageSizeInKilobytes:  p.MaxMessageSizeInKilobytes,
		PartitionCount:             p.PartitionCount,
		EnablePartitioning:         p.EnablePartitioning,
	}
	err := parseDurations(
		durationField{p.DefaultMessageTimeToLive, &d.DefaultMessageTimeToLive, "DefaultMessageTimeToLive"},
		durationField{p.DuplicateDetectionHistoryTimeWindow, &d.DuplicateDetectionHistoryTimeWindow, "DuplicateDetectionHistoryTimeWindow"},
	)
	if err != nil {
		return nil, err
	}
	return d.Properties(), nil
}

func (p emulatorSubscriptionProperties) toProto() (*placementpb.QueueProperties, error) {
	d := placementpb.SubscriptionDescription{
		MaxDeliveryCount:                          p.MaxDeliveryCount,
		DeadLetteringOnMessageExpiration:          p.DeadLetteringOnMessageExpiration,
		DeadLetteringOnFilterEvaluationExceptions: p.DeadLetteringOnFilterEvaluationExceptions,
		RequiresSession:                           p.RequiresSession,
		ForwardTo:                                 p.ForwardTo,
		ForwardDeadLetteredMessagesTo:             p.ForwardDeadLetteredMessagesTo,
	}
	err := parseDurations(
		durationField{p.LockDuration, &d.LockDuration, "LockDuration"},
		durationField{p.DefaultMessageTimeToLive, &d.DefaultMessageTimeToLive, "DefaultMessageTimeToLive"},
		durationField{p.SessionAcceptWait, &d.SessionAcceptWait, "SessionAcceptWait"},
	)
	if err != nil {
		return nil, err
	}
	return d.Properties(), nil
}

func (p emulatorRuleProperties) toProto(name string) (*placementpb.Rule, error) {
	c := p.CorrelationFilter
	d := placementpb.RuleDescription{
		Name:          name,
		FilterType:    p.FilterType,
		SqlExpression: p.SqlFilter.SqlExpression,
		SqlParameters: p.SqlFilter.Parameters,
		Correlation: placementpb.CorrelationDescription{
			CorrelationID: c.CorrelationId, MessageID: c.MessageId, To: c.To, ReplyTo: c.ReplyTo,
			Label: c.Label, Subject: c.Subject, SessionID: c.SessionId, ReplyToSessionID: c.ReplyToSessionId,
			ContentType: c.ContentType, Properties: c.Properties,
		},
	}
	if p.Action != nil {
		d.ActionExpression, d.ActionParameters = p.Action.SqlExpression, p.Action.Parameters
	}
	return d.Rule()
}

type durationField struct {
	text string
	dst  *time.Duration
	name string
}

func parseDurations(fields ...durationField) error {
	for _, f := range fields {
		if f.text == "" {
			continue
		}
		v, err := placementpb.ParseISODuration(f.text)
		if err != nil {
			return fmt.Errorf("%s: %w", f.name, err)
		}
		*f.dst = v
	}
	return nil
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
	err := parseDurations(
		durationField{p.LockDuration, &d.LockDuration, "LockDuration"},
		durationField{p.DefaultMessageTimeToLive, &d.DefaultMessageTimeToLive, "DefaultMessageTimeToLive"},
		durationField{p.DuplicateDetectionHistoryTimeWindow, &d.DuplicateDetectionHistoryTimeWindow, "DuplicateDetectionHistoryTimeWindow"},
		durationField{p.SessionAcceptWait, &d.SessionAcceptWait, "SessionAcceptWait"},
	)
	if err != nil {
		return nil, err
	}
	return d.Properties(), nil
}
