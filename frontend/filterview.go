package frontend

import (
	"maps"
	"slices"
	"time"

	"github.com/quorumbus/quorumbus/frontend/amqp"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// filterView is what the subscription rules of a topic read of a message
// (besides its id, session id and partition key, which every NewMessage
// carries): the properties, and the application properties whose values
// a rule value can hold. The partition evaluates rules on it and never
// decodes AMQP, so that every replica reads the same values from the
// entry.
//
// Values of other types (binary, uuid, symbol keys, described values)
// are left out: a filter sees them as absent. Service Bus would compare
// some of them (a uuid with a uuid).
func filterView(p *amqp.Properties, app amqp.Map) *partitionpb.FilterView {
	v := &partitionpb.FilterView{
		CorrelationId:    messageIDString(p.CorrelationID),
		To:               p.To,
		ReplyTo:          p.ReplyTo,
		Subject:          p.Subject,
		ContentType:      string(p.ContentType),
		ReplyToSessionId: p.ReplyToGroupID,
	}
	for _, pair := range app {
		k, ok := pair.Key.(string)
		if !ok {
			continue
		}
		if rv := placementpb.PropertyRuleValue(pair.Value); rv != nil {
			if v.Properties == nil {
				v.Properties = make(map[string]*placementpb.RuleValue, len(app))
			}
			v.Properties[k] = rv
		}
	}
	return v
}

// withActionProperties returns bare with the system properties a rule's
// SQL action set (the non-empty fields of set but its properties) written
// into its properties section; bare itself when the action set none.
func withActionProperties(bare []byte, set *partitionpb.FilterView) ([]byte, error) {
	if set == nil || set.CorrelationId == "" && set.To == "" && set.ReplyTo == "" && set.Subject == "" &&
		set.ContentType == "" && set.ReplyToSessionId == "" {
		return bare, nil
	}
	var secs [8]amqp.Section
	sections, err := amqp.Sections(bare, secs[:0])
	if err != nil {
		return nil, err
	}
	p := &amqp.Properties{}
	for _, sec := range sections {
		if sec.Descriptor == amqp.SectionProperties {
			var m amqp.Message
			if err := m.Decode(sec.Raw); err != nil {
				return nil, err
			}
			if m.Properties != nil {
				p = m.Properties
			}
			break
		}
	}
	if set.CorrelationId != "" {
		p.CorrelationID = set.CorrelationId
	}
	if set.To != "" {
		p.To = set.To
	}
	if set.ReplyTo != "" {
		p.ReplyTo = set.ReplyTo
	}
	if set.Subject != "" {
		p.Subject = set.Subject
	}
	if set.ContentType != "" {
		p.ContentType = amqp.Symbol(set.ContentType)
	}
	if set.ReplyToSessionId != "" {
		p.ReplyToGroupID = set.ReplyToSessionId
	}
	return amqp.AppendWithSection(nil, sections, amqp.SectionProperties, &amqp.Message{Properties: p})
}

// withActionApplicationProperties returns props with what a rule's SQL
// action set and removed, in name order so that every delivery of the
// copy encodes the same.
func withActionApplicationProperties(props amqp.Map, set *partitionpb.FilterView, removed []string) amqp.Map {
	if len(removed) > 0 {
		kept := props[:0:0]
		for _, p := range props {
			if k, ok := p.Key.(string); !ok || !slices.Contains(removed, k) {
				kept = append(kept, p)
			}
		}
		props = kept
	}
	names := slices.Sorted(maps.Keys(set.GetProperties()))
	for _, k := range names {
		props.Set(k, amqpValue(set.Properties[k]))
	}
	return props
}

// amqpValue is the AMQP value of a rule value. A duration, which AMQP has
// no type for, is its milliseconds.
func amqpValue(v *placementpb.RuleValue) any {
	switch x := v.GetValue().(type) {
	case *placementpb.RuleValue_StringValue:
		return x.StringValue
	case *placementpb.RuleValue_LongValue:
		return x.LongValue
	case *placementpb.RuleValue_DoubleValue:
		return x.DoubleValue
	case *placementpb.RuleValue_BoolValue:
		return x.BoolValue
	case *placementpb.RuleValue_TimestampMs:
		return time.UnixMilli(x.TimestampMs).UTC()
	case *placementpb.RuleValue_DurationMs:
		return x.DurationMs
	}
	return nil
}
