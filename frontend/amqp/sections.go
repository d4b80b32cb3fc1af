package amqp

import (
	"fmt"
	"slices"
)

// Descriptors of a message's sections (spec 3.2), in the order a message
// holds them. The bare message is the properties, the application
// properties and the body (data, amqp-sequence or amqp-value); the
// header, the annotations and the footer annotate it.
const (
	SectionHeader                uint64 = 0x70
	SectionDeliveryAnnotations   uint64 = 0x71
	SectionMessageAnnotations    uint64 = 0x72
	SectionProperties            uint64 = 0x73
	SectionApplicationProperties uint64 = 0x74
	SectionData                  uint64 = 0x75 // may repeat
	SectionAMQPSequence          uint64 = 0x76 // may repeat
	SectionAMQPValue             uint64 = 0x77
	SectionFooter                uint64 = 0x78
)

// Section is one encoded section of a message, found without decoding it.
type Section struct {
	Descriptor uint64
	Offset     int    // where Raw starts in the message Sections split
	Raw        []byte // the whole section, descriptor included
}

// Sections splits an encoded message into its sections without decoding
// their contents. Raw slices alias payload. It lets a broker keep the bare
// message's bytes as the sender made them (spec 3.2: the bare message is
// immutable) while it rewrites the annotations around them.
func Sections(payload []byte, dst []Section) ([]Section, error) {
	d := decoder{b: payload}
	for d.remaining() > 0 {
		start := d.off
		c, err := d.byte()
		if err != nil {
			return nil, err
		}
		if c != codeDescribed {
			return nil, decodeErrorf("message section is not described (0x%02x)", c)
		}
		desc, err := d.descriptor()
		if err != nil {
			return nil, err
		}
		if desc < SectionHeader || desc > SectionFooter {
			return nil, decodeErrorf("unknown message section 0x%x", desc)
		}
		if err := d.skip(); err != nil {
			return nil, err
		}
		dst = append(dst, Section{Descriptor: desc, Offset: start, Raw: payload[start:d.off]})
	}
	return dst, nil
}

// Data returns the bytes a data section holds (spec 3.2.6). They alias
// Raw: nothing is copied.
func (s Section) Data() ([]byte, error) {
	d := decoder{b: s.Raw}
	if err := d.expectDescribed(SectionData, "data"); err != nil {
		return nil, err
	}
	b, err := d.readBinary()
	if err != nil {
		return nil, err
	}
	return b, d.end()
}

// AppendWithSection appends to dst the message made of secs (what
// Sections returned, or a run of it such as the bare message's sections)
// with its section of descriptor desc set to m's: encoded from m as
// m.Append would encode it, in the place of the first section of that
// descriptor or, when there is none, before the first section the spec
// orders after it, so that a message in order stays in order. If m has no
// such section (a nil map, Header or Properties, no Value), the section is
// removed. Every other section is copied as it is, and the new one is
// encoded in place: nothing is allocated but dst's growth.
//
// Data and amqp-sequence sections may repeat, so "the" section is not
// defined for them: desc is one of the other seven.
func AppendWithSection(dst []byte, secs []Section, desc uint64, m *Message) ([]byte, error) {
	if desc < SectionHeader || desc > SectionFooter || desc == SectionData || desc == SectionAMQPSequence {
		return nil, fmt.Errorf("amqp: AppendWithSection of section 0x%x: only a section a message holds at most once can be set", desc)
	}
	at, replaced := len(secs), false
	for i, s := range secs {
		if s.Descriptor == desc {
			at, replaced = i, true
			break
		}
		if s.Descriptor > desc && at == len(secs) {
			at = i // keep looking: a section out of order may still be the one
		}
	}
	// Room for everything, the old section's size standing for the new
	// one's and 128 bytes for what it gains (an id, a dead-letter
	// reason), so that dst mostly grows once.
	n := 128
	for _, s := range secs {
		n += len(s.Raw)
	}
	dst = slices.Grow(dst, n)
	for _, s := range secs[:at] {
		dst = append(dst, s.Raw...)
	}
	only := m.only(desc)
	dst, err := only.Append(dst)
	if err != nil {
		return nil, err
	}
	rest := secs[at:]
	if replaced {
		rest = rest[1:]
	}
	n = 0
	for _, s := range rest {
		n += len(s.Raw)
	}
	dst = slices.Grow(dst, n)
	for _, s := range rest {
		dst = append(dst, s.Raw...)
	}
	return dst, nil
}
