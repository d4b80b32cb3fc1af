package partition

import (
	"encoding/binary"
	"unicode/utf8"
)

// Cutting a bare message's body for a preview (PeekRequest.
// body_prefix_bytes). A bare message is a run of AMQP 1.0 sections
// (properties, application-properties, the body as data sections, one
// amqp-value or amqp-sequence sections, footer), each a described value.
// The cut keeps every section before the body byte for byte, so the
// message still decodes and a preview still shows its properties, and
// keeps at most prefix bytes of the body:
//   - data sections: their bytes up to the prefix, the last one shortened;
//   - an amqp-value that is a string or binary: its start (a string cut at
//     a character's boundary); any other amqp-value or amqp-sequence is
//     kept whole if its encoding fits in what is left of the prefix, else
//     left out;
//   - a footer (which may hold the body's hash) only when nothing was cut.
// A bare message that does not parse as sections is left as it is: the
// cut is an optimisation for a reader who would decode it anyway.

// AMQP section descriptors (AMQP 1.0, 3.2).
const (
	sectionData     = 0x75
	sectionSequence = 0x76
	sectionValue    = 0x77
	sectionFooter   = 0x78
)

// cutBody returns bare with its body cut to prefix bytes, and whether
// anything was cut. It never changes bare; when nothing is cut it returns
// bare itself.
func cutBody(bare []byte, prefix int) ([]byte, bool) {
	var out []byte
	left := prefix
	cut := false
	for pos := 0; pos < len(bare); {
		code, valueAt, ok := sectionAt(bare, pos)
		if !ok {
			return bare, false
		}
		end, ok := valueEnd(bare, valueAt)
		if !ok {
			return bare, false
		}
		switch code {
		case sectionData:
			payload, ok := binaryValue(bare[valueAt:end])
			if !ok {
				return bare, false
			}
			if len(payload) > left {
				payload, cut = payload[:left], true
			}
			if len(payload) > 0 || !cut {
				out = appendData(out, payload)
			}
			left -= len(payload)
		case sectionValue:
			s, text, isBytes := stringOrBinary(bare[valueAt:end])
			switch {
			case isBytes && len(s) <= left:
				out = append(out, bare[pos:end]...)
				left -= len(s)
			case isBytes:
				cut, s = true, s[:left]
				if text {
					s = wholeRunes(s)
				}
				out = appendValue(out, s, text)
				left -= len(s)
			case end-pos <= left:
				out = append(out, bare[pos:end]...)
				left -= end - pos
			default:
				cut = true
			}
		case sectionSequence:
			if end-pos <= left && !cut {
				out = append(out, bare[pos:end]...)
				left -= end - pos
			} else {
				cut = true
			}
		case sectionFooter:
			if !cut {
				out = append(out, bare[pos:end]...)
			}
		default: // properties, application-properties and the like
			out = append(out, bare[pos:end]...)
		}
		pos = end
	}
	if !cut {
		return bare, false
	}
	return out, true
}

// sectionAt parses the descriptor of the section at pos: a described
// constructor (0x00) and a numeric descriptor (smallulong or ulong). It
// returns the section's code and where its value starts.
func sectionAt(b []byte, pos int) (code uint64, valueAt int, ok bool) {
	if pos+2 >= len(b) || b[pos] != 0x00 {
		return 0, 0, false
	}
	switch b[pos+1] {
	case 0x53: // smallulong
		return uint64(b[pos+2]), pos + 3, true
	case 0x80: // ulong
		if pos+10 > len(b) {
			return 0, 0, false
		}
		return binary.BigEndian.Uint64(b[pos+2:]), pos + 10, true
	}
	return 0, 0, false
}

// valueEnd returns where the encoded AMQP value at pos ends. The
// constructor's high nibble gives its width (AMQP 1.0, 1.6.1): fixed
// widths of 0, 1, 2, 4, 8 or 16 bytes, or a 1- or 4-byte length (or size)
// before the bytes; 0x00 is a described value (descriptor, then value).
func valueEnd(b []byte, pos int) (int, bool) {
	if pos >= len(b) {
		return 0, false
	}
	c := b[pos]
	if c == 0x00 {
		d, ok := valueEnd(b, pos+1)
		if !ok {
			return 0, false
		}
		return valueEnd(b, d)
	}
	var n int
	switch c >> 4 {
	case 0x4:
		n = 0
	case 0x5:
		n = 1
	case 0x6:
		n = 2
	case 0x7:
		n = 4
	case 0x8:
		n = 8
	case 0x9:
		n = 16
	case 0xa, 0xc, 0xe: // one-byte length or size
		if pos+2 > len(b) {
			return 0, false
		}
		n = 1 + int(b[pos+1])
	case 0xb, 0xd, 0xf: // four-byte length or size
		if pos+5 > len(b) {
			return 0, false
		}
		l := binary.BigEndian.Uint32(b[pos+1:])
		if uint64(l) > uint64(len(b)) {
			return 0, false
		}
		n = 4 + int(l)
	default:
		return 0, false
	}
	end := pos + 1 + n
	if end > len(b) {
		return 0, false
	}
	return end, true
}

// binaryValue returns the bytes of an encoded binary (vbin8, vbin32).
func binaryValue(v []byte) ([]byte, bool) {
	s, text, ok := stringOrBinary(v)
	return s, ok && !text
}

// stringOrBinary returns the bytes of an encoded string or binary, and
// whether it is a string.
func stringOrBinary(v []byte) (s []byte, text bool, ok bool) {
	if len(v) == 0 {
		return nil, false, false
	}
	switch v[0] {
	case 0xa0, 0xa1: // vbin8, str8-utf8
		return v[2:], v[0] == 0xa1, true
	case 0xb0, 0xb1: // vbin32, str32-utf8
		return v[5:], v[0] == 0xb1, true
	}
	return nil, false, false
}

// appendData appends a data section holding payload.
func appendData(b, payload []byte) []byte {
	b = append(b, 0x00, 0x53, sectionData)
	return appendBinary(b, payload, false)
}

// appendValue appends an amqp-value section holding a string or binary.
func appendValue(b, s []byte, text bool) []byte {
	b = append(b, 0x00, 0x53, sectionValue)
	return appendBinary(b, s, text)
}

func appendBinary(b, s []byte, text bool) []byte {
	var c8, c32 byte = 0xa0, 0xb0
	if text {
		c8, c32 = 0xa1, 0xb1
	}
	if len(s) <= 0xff {
		b = append(b, c8, byte(len(s)))
	} else {
		b = append(b, c32)
		b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
	}
	return append(b, s...)
}

// wholeRunes drops the start of a UTF-8 character that a cut left at the
// end of s (at most UTFMax-1 bytes).
func wholeRunes(s []byte) []byte {
	for i := 0; i < utf8.UTFMax-1 && len(s) > 0; i++ {
		if r, n := utf8.DecodeLastRune(s); r != utf8.RuneError || n > 1 {
			break
		}
		s = s[:len(s)-1]
	}
	return s
}
