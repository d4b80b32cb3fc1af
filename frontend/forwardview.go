package frontend

import (
	"fmt"

	"github.com/quorumbus/quorumbus/frontend/amqp"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// ForTopic readies a message an auto-forwarder sends to a topic
// (node/forward.go; cmd wires it in front of routing.Router.Send): the
// topic's rules must see the message as a receiver of the source would,
// and a front-end fills in the view they read, which a forwarder has not.
//
// What the source's state added that rewrites the application
// properties (a rule action's changes, properties modified at
// settlement, and the DeadLetterReason and DeadLetterErrorDescription of
// a message forwarded from a dead-letter queue) is written into the bare
// message and taken out of the origin (but the dead-letter fields), so
// that the view is read from the message as delivered, and a rule action
// of the destination applies on top of it as it would on a message sent
// that way. The dead-letter fields stay in the origin: the copies carry
// DeadLetterSource as a queue's forwarded message does, and write the
// same two properties again when delivered.
//
// nm is changed in place; its old bare message is not written to.
func ForTopic(nm *partitionpb.NewMessage) error {
	if o := nm.GetForwarded(); o != nil && (o.ActionSet != nil || len(o.ActionRemoved) > 0 || len(o.ModifiedProperties) > 0 || o.DeadLetterSource != "") {
		m := &partitionpb.Message{Bare: nm.Bare, ActionSet: o.ActionSet, ActionRemoved: o.ActionRemoved, ModifiedProperties: o.ModifiedProperties,
			DeadLetterReason: o.DeadLetterReason, DeadLetterDescription: o.DeadLetterDescription, DeadLetterSource: o.DeadLetterSource}
		bare, err := appendRewrittenBare(nil, m)
		if err != nil {
			return fmt.Errorf("frontend: rewriting a forwarded message: %w", err)
		}
		nm.Bare = bare
		o.ActionSet, o.ActionRemoved, o.ModifiedProperties = nil, nil, nil
	}
	var secs [8]amqp.Section
	sections, err := amqp.Sections(nm.Bare, secs[:0])
	if err != nil {
		return fmt.Errorf("frontend: a forwarded message: %w", err)
	}
	props := &amqp.Properties{}
	var appProps amqp.Map
	for _, s := range sections {
		switch s.Descriptor {
		case amqp.SectionProperties, amqp.SectionApplicationProperties:
			var m amqp.Message
			if err := m.Decode(s.Raw); err != nil {
				return fmt.Errorf("frontend: a forwarded message: %w", err)
			}
			if m.Properties != nil {
				props = m.Properties
			}
			if m.ApplicationProperties != nil {
				appProps = m.ApplicationProperties
			}
		}
	}
	nm.FilterView = filterView(props, appProps)
	return nil
}
