package amqp

import (
	"fmt"
	"time"
	"unicode/utf8"
)

// Header is the message header section (spec 3.2.1).
type Header struct {
	Durable       bool
	Priority      uint8         // default 4
	TTL           time.Duration // 0: none; milliseconds on the wire
	FirstAcquirer bool
	DeliveryCount uint32
}

// Properties is the properties section (spec 3.2.4). Zero values are
// absent fields. MessageID and CorrelationID hold an ulong (uint64), UUID,
// []byte or string.
type Properties struct {
	MessageID          any
	UserID             []byte
	To                 string
	Subject            string
	ReplyTo            string
	CorrelationID      any
	ContentType        Symbol
	ContentEncoding    Symbol
	AbsoluteExpiryTime time.Time
	CreationTime       time.Time
	GroupID            string
	GroupSequence      uint32
	ReplyToGroupID     string
}

// Message is a decoded AMQP message: the annotated message of spec 3.2.
// Exactly one body kind is used: Data sections, Sequence sections, or a
// Value (HasValue distinguishes a null value from no value section).
type Message struct {
	Header                *Header
	DeliveryAnnotations   Map
	MessageAnnotations    Map
	Properties            *Properties
	ApplicationProperties Map
	Data                  [][]byte
	Sequence              [][]any
	Value                 any
	HasValue              bool
	Footer                Map
}

// CheckApplicationProperties checks an encoded application-properties
// section (descriptor included) against spec 3.2.5: a map (or null) whose
// keys are strings and whose values are of simple types, not lists, maps
// or arrays; a described value may wrap a simple value. What it accepts,
// Decode decodes. It allocates nothing, so that a broker that keeps the
// section as sent can afford to check every message.
func CheckApplicationProperties(raw []byte) error {
	d := decoder{b: raw}
	if err := d.expectDescribed(SectionApplicationProperties, "application-properties"); err != nil {
		return err
	}
	code, err := d.byte()
	if err != nil {
		return err
	}
	if code == codeNull {
		return d.end()
	}
	if code != codeMap8 && code != codeMap32 {
		return decodeErrorf("application-properties is a %s, not a map", typeName(code))
	}
	count, end, err := d.compoundHeader(code)
	if err != nil {
		return err
	}
	if count%2 != 0 {
		return decodeErrorf("map with odd element count %d", count)
	}
	for range count / 2 {
		kc, err := d.byte()
		if err != nil {
			return err
		}
		if kc != codeStr8 && kc != codeStr32 {
			return decodeErrorf("application-properties key is a %s: keys must be strings", typeName(kc))
		}
		key, err := d.variableAfter(kc)
		if err != nil {
			return err
		}
		if err := d.checkSimple(); err != nil {
			return fmt.Errorf("application property %q: %w", key, err)
		}
	}
	if d.off != end {
		return decodeErrorf("map of %d elements does not fill its size", count)
	}
	return d.end()
}

// end checks that nothing follows the value just read.
func (d *decoder) end() error {
	if d.remaining() != 0 {
		return decodeErrorf("%d bytes after the value", d.remaining())
	}
	return nil
}

// checkSimple consumes one value of a simple type, checked as value
// checks it, or one described value wrapping one.
func (d *decoder) checkSimple() error {
	code, err := d.byte()
	if err != nil {
		return err
	}
	if code == codeDescribed {
		// value takes ulong and symbol descriptors only.
		dc, err := d.byte()
		if err != nil {
			return err
		}
		switch dc {
		case codeUlong0:
		case codeSmallUlong, codeUlong, codeSym8, codeSym32:
			if dc == codeSym8 || dc == codeSym32 {
				_, err = d.variableAfter(dc)
			} else {
				err = d.need2(fixedWidth(dc))
			}
			if err != nil {
				return err
			}
		default:
			return decodeErrorf("descriptor must be ulong or symbol, got %s", typeName(dc))
		}
		if code, err = d.byte(); err != nil {
			return err
		}
	}
	switch code {
	case codeStr8, codeStr32, codeSym8, codeSym32, codeVbin8, codeVbin32:
		_, err := d.variableAfter(code)
		return err
	case codeBool:
		c, err := d.byte()
		if err == nil && c > 1 {
			return decodeErrorf("boolean byte 0x%02x", c)
		}
		return err
	case codeChar:
		v, err := d.u32()
		if err == nil && v > utf8.MaxRune {
			return decodeErrorf("char 0x%x out of range", v)
		}
		return err
	case codeList0, codeDescribed:
	default:
		if w := fixedWidth(code); w >= 0 && validFixedCode(code) {
			return d.need2(w)
		}
		if !validVariableCode(code) {
			return decodeErrorf("invalid format code 0x%02x", code)
		}
	}
	return decodeErrorf("a %s is not of a simple type", typeName(code))
}

// variableAfter reads the bytes of a binary, string or symbol whose
// constructor has been consumed; a string's must be UTF-8.
func (d *decoder) variableAfter(code byte) ([]byte, error) {
	width := 1
	if code&0xf0 == 0xb0 {
		width = 4
	}
	n, err := d.size(width)
	if err != nil {
		return nil, err
	}
	b, err := d.bytes(n)
	if err == nil && (code == codeStr8 || code == codeStr32) && !utf8.Valid(b) {
		return nil, decodeErrorf("string is not valid UTF-8")
	}
	return b, err
}

// Decode parses an encoded message. Byte slices in the result are copies,
// so the message outlives payload.
func (m *Message) Decode(payload []byte) error {
	*m = Message{}
	d := decoder{b: payload}
	last := uint64(0)
	for d.remaining() > 0 {
		c, err := d.byte()
		if err != nil {
			return err
		}
		if c != codeDescribed {
			return decodeErrorf("message section is not described (0x%02x)", c)
		}
		desc, err := d.descriptor()
		if err != nil {
			return err
		}
		// Sections come in the spec's order; body sections may repeat.
		if desc < last || (desc == last && desc != SectionData && desc != SectionAMQPSequence) {
			return decodeErrorf("message section 0x%x out of order", desc)
		}
		last = desc
		switch desc {
		case SectionHeader:
			m.Header = new(Header)
			err = m.Header.decode(&d)
		case SectionDeliveryAnnotations:
			m.DeliveryAnnotations, err = d.readMap()
		case SectionMessageAnnotations:
			m.MessageAnnotations, err = d.readMap()
		case SectionProperties:
			m.Properties = new(Properties)
			err = m.Properties.decode(&d)
		case SectionApplicationProperties:
			m.ApplicationProperties, err = d.readMap()
		case SectionData:
			if m.HasValue || m.Sequence != nil {
				return decodeErrorf("message mixes body kinds")
			}
			var b []byte
			if b, err = d.readBinary(); err == nil {
				m.Data = append(m.Data, append([]byte{}, b...))
			}
		case SectionAMQPSequence:
			if m.HasValue || m.Data != nil {
				return decodeErrorf("message mixes body kinds")
			}
			var v any
			if v, err = d.value(); err == nil {
				list, ok := v.([]any)
				if !ok {
					return decodeErrorf("amqp-sequence section holds %T, not a list", v)
				}
				m.Sequence = append(m.Sequence, list)
			}
		case SectionAMQPValue:
			if m.Data != nil || m.Sequence != nil {
				return decodeErrorf("message mixes body kinds")
			}
			m.Value, err = d.value()
			m.HasValue = true
		case SectionFooter:
			m.Footer, err = d.readMap()
		default:
			return decodeErrorf("unknown message section 0x%x", desc)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// Append encodes the message.
func (m *Message) Append(b []byte) ([]byte, error) {
	var err error
	if m.Header != nil {
		b = m.Header.append(b)
	}
	if m.DeliveryAnnotations != nil {
		if b, err = appendMap(appendDescriptor(b, SectionDeliveryAnnotations), m.DeliveryAnnotations); err != nil {
			return nil, err
		}
	}
	if m.MessageAnnotations != nil {
		if b, err = appendMap(appendDescriptor(b, SectionMessageAnnotations), m.MessageAnnotations); err != nil {
			return nil, err
		}
	}
	if m.Properties != nil {
		if b, err = m.Properties.append(b); err != nil {
			return nil, err
		}
	}
	if m.ApplicationProperties != nil {
		if b, err = appendMap(appendDescriptor(b, SectionApplicationProperties), m.ApplicationProperties); err != nil {
			return nil, err
		}
	}
	for _, data := range m.Data {
		b = appendBinary(appendDescriptor(b, SectionData), data)
	}
	for _, seq := range m.Sequence {
		if b, err = appendValue(appendDescriptor(b, SectionAMQPSequence), seq); err != nil {
			return nil, err
		}
	}
	if m.HasValue {
		if b, err = appendValue(appendDescriptor(b, SectionAMQPValue), m.Value); err != nil {
			return nil, err
		}
	}
	if m.Footer != nil {
		if b, err = appendMap(appendDescriptor(b, SectionFooter), m.Footer); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// only returns a message holding m's section of descriptor desc and no
// other.
func (m *Message) only(desc uint64) Message {
	var s Message
	switch desc {
	case SectionHeader:
		s.Header = m.Header
	case SectionDeliveryAnnotations:
		s.DeliveryAnnotations = m.DeliveryAnnotations
	case SectionMessageAnnotations:
		s.MessageAnnotations = m.MessageAnnotations
	case SectionProperties:
		s.Properties = m.Properties
	case SectionApplicationProperties:
		s.ApplicationProperties = m.ApplicationProperties
	case SectionData:
		s.Data = m.Data
	case SectionAMQPSequence:
		s.Sequence = m.Sequence
	case SectionAMQPValue:
		s.Value, s.HasValue = m.Value, m.HasValue
	case SectionFooter:
		s.Footer = m.Footer
	}
	return s
}

func (h *Header) decode(d *decoder) error {
	h.Priority = 4
	f := d.openFields()
	f.boolean(&h.Durable)
	f.u8(&h.Priority)
	var ttl uint32
	if f.u32(&ttl) {
		h.TTL = time.Duration(ttl) * time.Millisecond
	}
	f.boolean(&h.FirstAcquirer)
	f.u32(&h.DeliveryCount)
	return f.done()
}

func (h *Header) append(b []byte) []byte {
	b, f := beginFields(b, SectionHeader)
	b = appendOptBool(b, f, h.Durable)
	if h.Priority != 4 {
		b = appendUbyte(b, h.Priority)
	} else {
		b = appendNull(b)
	}
	f.field(b, h.Priority == 4)
	b = appendOptUint(b, f, uint32(h.TTL/time.Millisecond))
	b = appendOptBool(b, f, h.FirstAcquirer)
	// delivery-count is written even at its default 0: some clients (rhea,
	// under the JavaScript SDK) report an absent count as undefined rather
	// than 0.
	b = appendUint(b, h.DeliveryCount)
	f.field(b, false)
	return f.end(b)
}

func (p *Properties) decode(d *decoder) error {
	f := d.openFields()
	f.value(&p.MessageID)
	var user []byte
	if f.binary(&user) {
		p.UserID = append([]byte{}, user...)
	}
	f.str(&p.To)
	f.str(&p.Subject)
	f.str(&p.ReplyTo)
	f.value(&p.CorrelationID)
	f.sym(&p.ContentType)
	f.sym(&p.ContentEncoding)
	f.timestamp(&p.AbsoluteExpiryTime)
	f.timestamp(&p.CreationTime)
	f.str(&p.GroupID)
	f.u32(&p.GroupSequence)
	f.str(&p.ReplyToGroupID)
	if err := f.done(); err != nil {
		return err
	}
	for _, id := range []any{p.MessageID, p.CorrelationID} {
		switch id.(type) {
		case nil, uint64, UUID, []byte, string:
		default:
			return decodeErrorf("message id of type %T", id)
		}
	}
	return nil
}

func (p *Properties) append(b []byte) ([]byte, error) {
	b, f := beginFields(b, SectionProperties)
	var err error
	if b, err = appendValue(b, p.MessageID); err != nil {
		return nil, err
	}
	f.field(b, p.MessageID == nil)
	if p.UserID != nil {
		b = appendBinary(b, p.UserID)
	} else {
		b = appendNull(b)
	}
	f.field(b, p.UserID == nil)
	b = appendOptString(b, f, p.To)
	b = appendOptString(b, f, p.Subject)
	b = appendOptString(b, f, p.ReplyTo)
	if b, err = appendValue(b, p.CorrelationID); err != nil {
		return nil, err
	}
	f.field(b, p.CorrelationID == nil)
	b = appendOptSymbol(b, f, p.ContentType)
	b = appendOptSymbol(b, f, p.ContentEncoding)
	b = appendOptTime(b, f, p.AbsoluteExpiryTime)
	b = appendOptTime(b, f, p.CreationTime)
	b = appendOptString(b, f, p.GroupID)
	b = appendOptUint(b, f, p.GroupSequence)
	b = appendOptString(b, f, p.ReplyToGroupID)
	return f.end(b), nil
}

func appendOptTime(b []byte, f *fieldList, t time.Time) []byte {
	if t.IsZero() {
		b = appendNull(b)
	} else {
		b = appendTimestamp(b, t)
	}
	f.field(b, t.IsZero())
	return b
}
