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
	out, cut, _ := cutHead(bare, true, prefix)
	return out, cut
}

// cutHead is cutBody of a bare message of which head holds all (complete)
// or only the first bytes, as read from a staged blob, so that a preview
// of a 100 MB message reads a little more than the preview. ok is false
// when head holds too little to decide: the caller reads the message
// whole and cuts that; it is always true when complete.
func cutHead(head []byte, complete bool, prefix int) (out []byte, cut, ok bool) {
	malformed := func() ([]byte, bool, bool) {
		if complete {
			return head, false, true // left as it is
		}
		return nil, false, false
	}
	left := prefix
	for pos := 0; pos < len(head); {
		code, valueAt, good := sectionAt(head, pos)
		if !good {
			return malformed()
		}
		end, good := declaredEnd(head, valueAt)
		if !good {
			return malformed()
		}
		if end > len(head) {
			if complete {
				return malformed()
			}
			// The section runs on past what was read, the last one read.
			out, cut, ok = cutPartial(head, out, code, pos, valueAt, end, left, cut)
			return out, cut, ok
		}
		switch code {
		case sectionData:
			start, n, text, isBytes := bytesAt(head, valueAt)
			if !isBytes || text {
				return malformed()
			}
			payload := head[start : start+n]
			if len(payload) > left {
				payload, cut = payload[:left], true
			}
			if len(payload) > 0 || !cut {
				out = appendData(out, payload)
			}
			left -= len(payload)
		case sectionValue:
			start, n, text, isBytes := bytesAt(head, valueAt)
			switch {
			case isBytes && n <= left:
				out = append(out, head[pos:end]...)
				left -= n
			case isBytes:
				s := head[start : start+left]
				if text {
					s = wholeRunes(s)
				}
				out, cut = appendValue(out, s, text), true
				left -= len(s)
			case end-pos <= left:
				out = append(out, head[pos:end]...)
				left -= end - pos
			default:
				cut = true
			}
		case sectionSequence:
			if end-pos <= left && !cut {
				out = append(out, head[pos:end]...)
				left -= end - pos
			} else {
				cut = true
			}
		case sectionFooter:
			if !cut {
				out = append(out, head[pos:end]...)
			}
		default: // properties, application-properties and the like
			out = append(out, head[pos:end]...)
		}
		pos = end
	}
	switch {
	case !complete && !cut:
		// What follows head may be more body: only the whole message says.
		return nil, false, false
	case !cut:
		return head, false, true
	}
	return out, true, true
}

// cutPartial ends cutHead at a section of which head holds only the
// start (pos to len(head), of a section that ends at end): a body
// section whose kept part head holds is cut there; one that does not fit
// what is left of the prefix is left out, as is a footer after a cut;
// anything else needs the whole message.
func cutPartial(head, out []byte, code uint64, pos, valueAt, end, left int, cut bool) ([]byte, bool, bool) {
	switch code {
	case sectionData, sectionValue:
		start, n, text, isBytes := bytesAt(head, valueAt)
		switch {
		case isBytes && code == sectionData && text:
			return nil, false, false
		case isBytes && n > left && len(head)-start >= left:
			s := head[start : start+left]
			if code == sectionData {
				if len(s) > 0 {
					out = appendData(out, s)
				}
				return out, true, true
			}
			if text {
				s = wholeRunes(s)
			}
			return appendValue(out, s, text), true, true
		case !isBytes && code == sectionValue && end-pos > left:
			return out, true, true
		}
	case sectionSequence:
		if end-pos > left || cut {
			return out, true, true
		}
	case sectionFooter:
		if cut {
			return out, true, true
		}
	}
	return nil, false, false
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

// declaredEnd returns where the encoded AMQP value at pos ends, as its
// encoding declares: past len(b) when b holds only its start (ok is false
// only when b does not hold enough to tell). The constructor's high
// nibble gives its width (AMQP 1.0, 1.6.1): fixed widths of 0, 1, 2, 4, 8
// or 16 bytes, or a 1- or 4-byte length (or size) before the bytes; 0x00
// is a described value (a descriptor, then the value).
func declaredEnd(b []byte, pos int) (int, bool) {
	if pos >= len(b) {
		return 0, false
	}
	c := b[pos]
	if c == 0x00 {
		d, ok := declaredEnd(b, pos+1)
		if !ok || d > len(b) {
			return 0, false
		}
		return declaredEnd(b, d)
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
		if uint64(l) > 1<<32-16 { // keeps the sum below in range
			return 0, false
		}
		n = 4 + int(l)
	default:
		return 0, false
	}
	return pos + 1 + n, true
}

// bytesAt parses the encoded string or binary at pos (str8, str32,
// vbin8, vbin32): where its bytes start, how many it declares (head may
// hold fewer), and whether it is a string.
func bytesAt(b []byte, pos int) (start, n int, text, ok bool) {
	if pos >= len(b) {
		return 0, 0, false, false
	}
	switch c := b[pos]; c {
	case 0xa0, 0xa1: // vbin8, str8-utf8
		if pos+2 > len(b) {
			return 0, 0, false, false
		}
		return pos + 2, int(b[pos+1]), c == 0xa1, true
	case 0xb0, 0xb1: // vbin32, str32-utf8
		if pos+5 > len(b) {
			return 0, 0, false, false
		}
		return pos + 5, int(binary.BigEndian.Uint32(b[pos+1:])), c == 0xb1, true
	}
	return 0, 0, false, false
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
