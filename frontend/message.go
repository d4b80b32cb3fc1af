package frontend

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/quorumbus/quorumbus/frontend/amqp"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// Annotation keys Service Bus uses.
const (
	annSequenceNumber   amqp.Symbol = "x-opt-sequence-number"
	annEnqueuedTime     amqp.Symbol = "x-opt-enqueued-time"
	annLockedUntil      amqp.Symbol = "x-opt-locked-until"
	annLockToken        amqp.Symbol = "x-opt-lock-token"
	annPartitionKey     amqp.Symbol = "x-opt-partition-key"
	annScheduledTime    amqp.Symbol = "x-opt-scheduled-enqueue-time"
	annMessageState     amqp.Symbol = "x-opt-message-state"
	annDeadLetterSource amqp.Symbol = "x-opt-deadletter-source"
)

// batchMessageFormat is the message format (spec 2.7.5: Microsoft's
// vendor code, version 0) of a batch the SDKs send: each data section of
// its body holds one encoded message.
const batchMessageFormat uint32 = 0x80013700

// splitBatch returns the encoded messages of a batch, one per data
// section. They alias payload.
func splitBatch(payload []byte) ([][]byte, error) {
	secs, err := amqp.Sections(payload, nil)
	if err != nil {
		return nil, err
	}
	var out [][]byte
	for _, s := range secs {
		if s.Descriptor != amqp.SectionData {
			continue
		}
		b, err := s.Data()
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, nil
}

// incoming turns one encoded message from a sender into what a partition
// stores. The bare message is kept byte for byte (AMQP 3.2: it is
// immutable) except that a message without a message-id gets one, as
// Service Bus gives one to every message. Everything is copied: payload
// belongs to the engine.
func incoming(payload []byte) (*partitionpb.NewMessage, error) {
	return incomingFor(payload, false)
}

// incomingFor is incoming, and for a send to a topic (topic true) it also
// fills in the message's FilterView, what subscription rules read.
func incomingFor(payload []byte, topic bool) (*partitionpb.NewMessage, error) {
	var secs [8]amqp.Section
	sections, err := amqp.Sections(payload, secs[:0])
	if err != nil {
		return nil, err
	}
	nm := &partitionpb.NewMessage{}
	bare := len(sections) // index of the bare message's first section
	var props *amqp.Properties
	var appProps amqp.Map
	for i, s := range sections {
		switch s.Descriptor {
		case amqp.SectionHeader:
			var m amqp.Message
			if err := m.Decode(s.Raw); err != nil {
				return nil, err
			}
			nm.TtlMs = m.Header.TTL.Milliseconds()
			nm.Header = append(nm.Header, s.Raw...)
		case amqp.SectionDeliveryAnnotations:
			// Decoded only to check it: stored as sent, it is decoded
			// again for every delivery, where a malformed one would make
			// the message undeliverable.
			var m amqp.Message
			if err := m.Decode(s.Raw); err != nil {
				return nil, err
			}
			nm.Header = append(nm.Header, s.Raw...)
		case amqp.SectionMessageAnnotations:
			var m amqp.Message
			if err := m.Decode(s.Raw); err != nil {
				return nil, err
			}
			if v, ok := m.MessageAnnotations.Get(annPartitionKey); ok {
				if pk, ok := v.(string); ok {
					nm.PartitionKey = pk
				}
			}
			if v, ok := m.MessageAnnotations.Get(annScheduledTime); ok {
				if t, ok := v.(time.Time); ok {
					nm.ScheduledEnqueueTimeMs = t.UnixMilli()
				}
			}
			nm.Annotations = append([]byte(nil), s.Raw...)
		default:
			bare = min(bare, i)
			switch s.Descriptor {
			case amqp.SectionProperties:
				var m amqp.Message
				if err := m.Decode(s.Raw); err != nil {
					return nil, err
				}
				props = m.Properties
			case amqp.SectionApplicationProperties:
				// Service Bus holds senders to AMQP 3.2.5 (string keys,
				// simple values); the section is stored undecoded but
				// decoded again when settlement rewrites it.
				if err := amqp.CheckApplicationProperties(s.Raw); err != nil {
					return nil, err
				}
				if topic {
					var m amqp.Message
					if err := m.Decode(s.Raw); err != nil {
						return nil, err
					}
					appProps = m.ApplicationProperties
				}
			}
		}
	}
	if props == nil || props.MessageID == nil {
		// Give the message an id, rewriting (or adding) its properties;
		// the rest of the bare message is copied as it is.
		if props == nil {
			props = &amqp.Properties{}
		}
		props.MessageID = newMessageID()
		if nm.Bare, err = amqp.AppendWithSection(nil, sections[bare:], amqp.SectionProperties, &amqp.Message{Properties: props}); err != nil {
			return nil, err
		}
	} else {
		nm.Bare = append([]byte(nil), payload[sections[bare].Offset:]...)
	}
	nm.MessageId = messageIDString(props.MessageID)
	nm.SessionId = props.GroupID
	if topic {
		nm.FilterView = filterView(props, appProps)
	}
	return nm, nil
}

// messageIDs makes the ids of messages that arrive without one: 16 bytes,
// 32 hex digits like the ids Service Bus assigns, of which the first 8
// are random per process and the last 8 count. Unique without a call into
// the kernel's random source per message: a system call on the path of
// every send that names no id, where counting costs next to nothing.
var messageIDs struct {
	prefix [8]byte
	n      atomic.Uint64
}

func init() {
	rand.Read(messageIDs.prefix[:]) // never fails (crypto/rand)
}

func newMessageID() string {
	var b [16]byte
	copy(b[:8], messageIDs.prefix[:])
	binary.BigEndian.PutUint64(b[8:], messageIDs.n.Add(1))
	return hex.EncodeToString(b[:])
}

func messageIDString(id any) string {
	switch v := id.(type) {
	case string:
		return v
	case amqp.UUID:
		return v.String()
	case []byte:
		return hex.EncodeToString(v)
	case uint64:
		return fmt.Sprint(v)
	}
	return ""
}

// outgoing appends to dst a stored message rendered for delivery: the
// broker's header and annotations around the sender's bare message.
func outgoing(dst []byte, m *partitionpb.Message, locked bool) ([]byte, error) {
	var pre amqp.Message
	if len(m.Header) > 0 {
		if err := pre.Decode(m.Header); err != nil {
			return nil, err
		}
	}
	if pre.Header == nil {
		pre.Header = &amqp.Header{Priority: 4}
	}
	pre.Header.DeliveryCount = m.DeliveryCount
	if locked {
		pre.DeliveryAnnotations.Set(annLockToken, amqp.UUID(lockTokenUUID(m.LockToken)))
	}
	if len(m.Annotations) > 0 {
		var a amqp.Message
		if err := a.Decode(m.Annotations); err != nil {
			return nil, err
		}
		pre.MessageAnnotations = a.MessageAnnotations
	}
	ma := &pre.MessageAnnotations
	ma.Set(annSequenceNumber, int64(m.SequenceNumber))
	ma.Set(annEnqueuedTime, time.UnixMilli(m.EnqueuedTimeMs).UTC())
	if locked {
		ma.Set(annLockedUntil, time.UnixMilli(m.LockedUntilMs).UTC())
	}
	switch m.State {
	case partitionpb.MessageState_MESSAGE_STATE_DEFERRED:
		ma.Set(annMessageState, int64(1))
	case partitionpb.MessageState_MESSAGE_STATE_SCHEDULED:
		ma.Set(annMessageState, int64(2))
	}
	if m.DeadLetterSource != "" {
		ma.Set(annDeadLetterSource, m.DeadLetterSource)
	}
	out, err := pre.Append(slices.Grow(dst, 128+len(m.Bare)))
	if err != nil {
		return nil, err
	}
	if deadLettered(m) || len(m.ModifiedProperties) > 0 || m.ActionSet != nil || len(m.ActionRemoved) > 0 {
		return appendRewrittenBare(out, m)
	}
	return append(out, m.Bare...), nil
}

// appendRewrittenBare appends the bare message with its
// application-properties updated by what settlement recorded: the
// properties a client asked to modify when it abandoned, deferred or
// dead-lettered the message, and for a dead-lettered message the
// DeadLetterReason and DeadLetterErrorDescription (always strings: the SDK
// type-asserts them). Only that section is re-encoded; the others keep the
// sender's bytes.
func appendRewrittenBare(out []byte, m *partitionpb.Message) ([]byte, error) {
	bare, err := withActionProperties(m.Bare, m.ActionSet)
	if err != nil {
		return nil, err
	}
	var secs [8]amqp.Section
	sections, err := amqp.Sections(bare, secs[:0])
	if err != nil {
		return nil, err
	}
	var props amqp.Map
	for _, sec := range sections {
		if sec.Descriptor == amqp.SectionApplicationProperties {
			var a amqp.Message
			if err := a.Decode(sec.Raw); err != nil {
				return nil, err
			}
			props = a.ApplicationProperties
			break
		}
	}
	props = withActionApplicationProperties(props, m.ActionSet, m.ActionRemoved)
	for _, enc := range m.ModifiedProperties {
		var mod amqp.Message
		if err := mod.Decode(enc); err != nil {
			return nil, err
		}
		for _, p := range mod.ApplicationProperties {
			props.Set(p.Key, p.Value)
		}
	}
	if deadLettered(m) {
		props.Set("DeadLetterReason", m.DeadLetterReason)
		props.Set("DeadLetterErrorDescription", m.DeadLetterDescription)
	}
	if props == nil {
		props = amqp.Map{} // written empty: a nil map would remove the section
	}
	return amqp.AppendWithSection(out, sections, amqp.SectionApplicationProperties, &amqp.Message{ApplicationProperties: props})
}

// deadLettered reports whether m carries a dead-letter reason: it is in a
// dead-letter queue, or was auto-forwarded from one (DeadLetterSource is
// set only then, as on Service Bus).
func deadLettered(m *partitionpb.Message) bool {
	return m.SubQueue == partitionpb.SubQueue_SUB_QUEUE_DEAD_LETTER || m.DeadLetterSource != ""
}

// lockTokenUUID returns the 16 token bytes as a UUID value (RFC 4122
// order: what x-opt-lock-token and $management requests carry).
func lockTokenUUID(token []byte) [16]byte {
	var u [16]byte
	copy(u[:], token)
	return u
}

// appendDeliveryTag appends a lock token rendered as the delivery tag: the
// GUID in .NET byte order (the first three groups little-endian), which
// the SDK converts back.
func appendDeliveryTag(dst, token []byte) []byte {
	t := lockTokenUUID(token)
	return append(dst, t[3], t[2], t[1], t[0], t[5], t[4], t[7], t[6], t[8], t[9], t[10], t[11], t[12], t[13], t[14], t[15])
}
