package filter

import (
	"encoding/hex"
	"strings"
)

// Timestamp is an instant in milliseconds since the Unix epoch, as AMQP
// encodes one. Zero means "not set" in a Message's system properties.
type Timestamp int64

// Duration is a span in milliseconds (a message's time to live). Zero means
// "not set" in a Message's system properties.
type Duration int64

// UUID is a 16-byte identifier in network byte order (AMQP's uuid).
type UUID [16]byte

// String formats the UUID as .NET and the SDKs do: lowercase,
// 8-4-4-4-12 hex digits.
func (u UUID) String() string {
	var b [36]byte
	hex.Encode(b[0:8], u[0:4])
	b[8] = '-'
	hex.Encode(b[9:13], u[4:6])
	b[13] = '-'
	hex.Encode(b[14:18], u[6:8])
	b[18] = '-'
	hex.Encode(b[19:23], u[8:10])
	b[23] = '-'
	hex.Encode(b[24:], u[10:])
	return string(b[:])
}

// Message is what a rule sees of a message: its broker and application
// (system) properties, and its application properties.
//
// An empty string and a zero Timestamp or Duration mean the property is not
// set: a filter sees it as null. Size, DeliveryCount and the sequence
// numbers are always set.
//
// Properties holds application properties with AMQP simple types: nil,
// string, bool, int, int8..int64, uint, uint8..uint64, float32, float64,
// Timestamp, Duration, UUID and []byte, or named types over a string,
// bool or number (read as that). The caller converts AMQP's decimal32,
// decimal64 and decimal128 to float64 (Azure compares decimals as
// doubles) and its timestamps to Timestamp. Values of other types (a time.Time
// must be given as a Timestamp) are present (EXISTS is true) but compare
// as unknown with everything.
type Message struct {
	MessageID        string
	CorrelationID    string
	To               string
	ReplyTo          string
	Subject          string // Label in the SQL language; sys.Subject too
	SessionID        string
	ReplyToSessionID string
	ContentType      string
	PartitionKey     string
	DeadLetterSource string
	State            string // Active, Deferred or Scheduled when known

	Size                   int64
	DeliveryCount          int64
	SequenceNumber         int64
	EnqueuedSequenceNumber int64

	EnqueuedTimeUtc         Timestamp
	ScheduledEnqueueTimeUtc Timestamp
	ExpiresAtUtc            Timestamp
	LockedUntilUtc          Timestamp
	TimeToLive              Duration
	LockToken               UUID // zero when not locked

	Properties map[string]any
}

// Clone returns a copy of m whose Properties map can be changed without
// changing m's. The values themselves are shared (they are immutable
// scalars, or byte slices no rule writes into).
func (m *Message) Clone() *Message {
	c := *m
	if m.Properties != nil {
		c.Properties = make(map[string]any, len(m.Properties))
		for k, v := range m.Properties {
			c.Properties[k] = v
		}
	}
	return &c
}

// sysProp names one system property.
type sysProp uint8

const (
	sysContentType sysProp = iota + 1
	sysCorrelationID
	sysDeadLetterSource
	sysDeliveryCount
	sysEnqueuedSequenceNumber
	sysEnqueuedTimeUtc
	sysExpiresAtUtc
	sysForcePersistence
	sysIsBodyConsumed
	sysLabel
	sysLockedUntilUtc
	sysLockToken
	sysMessageID
	sysPartitionKey
	sysReplyTo
	sysReplyToSessionID
	sysScheduledEnqueueTimeUtc
	sysSequenceNumber
	sysSessionID
	sysSize
	sysState
	sysTimeToLive
	sysTo
)

type sysPropInfo struct {
	name     string // canonical spelling, used by the printer
	writable bool   // SET and REMOVE may change it
}

var sysProps = map[sysProp]sysPropInfo{
	sysContentType:             {"ContentType", true},
	sysCorrelationID:           {"CorrelationId", true},
	sysDeadLetterSource:        {"DeadLetterSource", false},
	sysDeliveryCount:           {"DeliveryCount", false},
	sysEnqueuedSequenceNumber:  {"EnqueuedSequenceNumber", false},
	sysEnqueuedTimeUtc:         {"EnqueuedTimeUtc", false},
	sysExpiresAtUtc:            {"ExpiresAtUtc", false},
	sysForcePersistence:        {"ForcePersistence", false},
	sysIsBodyConsumed:          {"IsBodyConsumed", false},
	sysLabel:                   {"Label", true},
	sysLockedUntilUtc:          {"LockedUntilUtc", false},
	sysLockToken:               {"LockToken", false},
	sysMessageID:               {"MessageId", true},
	sysPartitionKey:            {"PartitionKey", true},
	sysReplyTo:                 {"ReplyTo", true},
	sysReplyToSessionID:        {"ReplyToSessionId", true},
	sysScheduledEnqueueTimeUtc: {"ScheduledEnqueueTimeUtc", true},
	sysSequenceNumber:          {"SequenceNumber", false},
	sysSessionID:               {"SessionId", true},
	sysSize:                    {"Size", false},
	sysState:                   {"State", false},
	sysTimeToLive:              {"TimeToLive", true},
	sysTo:                      {"To", true},
}

// sysByName maps the lowercase name of a system property to it. Subject is
// the newer SDKs' name for Label.
var sysByName = func() map[string]sysProp {
	m := make(map[string]sysProp, len(sysProps)+1)
	for p, info := range sysProps {
		m[strings.ToLower(info.name)] = p
	}
	m["subject"] = sysLabel
	return m
}()

func lookupSys(name string) (sysProp, bool) {
	p, ok := sysByName[strings.ToLower(name)]
	return p, ok
}

// sysValue reads a system property of m.
func sysValue(m *Message, p sysProp) value {
	switch p {
	case sysContentType:
		return optString(m.ContentType)
	case sysCorrelationID:
		return optString(m.CorrelationID)
	case sysDeadLetterSource:
		return optString(m.DeadLetterSource)
	case sysDeliveryCount:
		return intValue(m.DeliveryCount)
	case sysEnqueuedSequenceNumber:
		return intValue(m.EnqueuedSequenceNumber)
	case sysEnqueuedTimeUtc:
		return optTimestamp(m.EnqueuedTimeUtc)
	case sysExpiresAtUtc:
		return optTimestamp(m.ExpiresAtUtc)
	case sysForcePersistence, sysIsBodyConsumed:
		return boolValue(false)
	case sysLabel:
		return optString(m.Subject)
	case sysLockedUntilUtc:
		return optTimestamp(m.LockedUntilUtc)
	case sysLockToken:
		if m.LockToken == (UUID{}) {
			return value{}
		}
		return value{kind: kindUUID, x: m.LockToken}
	case sysMessageID:
		return optString(m.MessageID)
	case sysPartitionKey:
		return optString(m.PartitionKey)
	case sysReplyTo:
		return optString(m.ReplyTo)
	case sysReplyToSessionID:
		return optString(m.ReplyToSessionID)
	case sysScheduledEnqueueTimeUtc:
		return optTimestamp(m.ScheduledEnqueueTimeUtc)
	case sysSequenceNumber:
		return intValue(m.SequenceNumber)
	case sysSessionID:
		return optString(m.SessionID)
	case sysSize:
		return intValue(m.Size)
	case sysState:
		return optString(m.State)
	case sysTimeToLive:
		if m.TimeToLive == 0 {
			return value{}
		}
		return value{kind: kindDuration, i: int64(m.TimeToLive)}
	case sysTo:
		return optString(m.To)
	}
	return value{}
}

// setSys writes a writable system property of m; a null value clears it.
func setSys(m *Message, p sysProp, v value) error {
	name := sysProps[p].name
	switch p {
	case sysScheduledEnqueueTimeUtc:
		switch v.kind {
		case kindNull:
			m.ScheduledEnqueueTimeUtc = 0
		case kindTimestamp:
			m.ScheduledEnqueueTimeUtc = Timestamp(v.i)
		default:
			return evalErrorf("sys.%s takes a timestamp, not %s", name, v.kind)
		}
		return nil
	case sysTimeToLive:
		switch v.kind {
		case kindNull:
			m.TimeToLive = 0
		case kindDuration:
			m.TimeToLive = Duration(v.i)
		default:
			return evalErrorf("sys.%s takes a duration, not %s", name, v.kind)
		}
		return nil
	}
	var s string
	switch v.kind {
	case kindNull:
	case kindString:
		s = v.s
	case kindUUID:
		s = v.x.(UUID).String()
	default:
		return evalErrorf("sys.%s takes a string, not %s", name, v.kind)
	}
	switch p {
	case sysContentType:
		m.ContentType = s
	case sysCorrelationID:
		m.CorrelationID = s
	case sysLabel:
		m.Subject = s
	case sysMessageID:
		m.MessageID = s
	case sysPartitionKey:
		m.PartitionKey = s
	case sysReplyTo:
		m.ReplyTo = s
	case sysReplyToSessionID:
		m.ReplyToSessionID = s
	case sysSessionID:
		m.SessionID = s
	case sysTo:
		m.To = s
	default:
		return evalErrorf("sys.%s cannot be changed by an action", name)
	}
	return nil
}
