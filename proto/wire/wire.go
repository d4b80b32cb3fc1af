// Package wire walks protobuf encodings field by field, for the decoders
// that let bytes fields point into their input instead of copying them
// (partition's Raft entries, raftpb's AppendEntries requests).
package wire

import "google.golang.org/protobuf/encoding/protowire"

// Field is one varint or length-delimited field; B points into the input,
// capped so that an append cannot write into what follows it.
type Field struct {
	Num protowire.Number
	Typ protowire.Type
	V   uint64
	B   []byte
}

// Next consumes the field at the start of p. ok is false for a malformed
// field and for the wire types other than varint and bytes, which the
// messages decoded this way do not use.
func Next(p []byte) (f Field, rest []byte, ok bool) {
	num, typ, n := protowire.ConsumeTag(p)
	if n < 0 {
		return f, nil, false
	}
	p = p[n:]
	f.Num, f.Typ = num, typ
	switch typ {
	case protowire.VarintType:
		f.V, n = protowire.ConsumeVarint(p)
	case protowire.BytesType:
		f.B, n = protowire.ConsumeBytes(p)
		f.B = f.B[:len(f.B):len(f.B)]
	default:
		return f, nil, false
	}
	if n < 0 {
		return f, nil, false
	}
	return f, p[n:], true
}

// Set records which of the field numbers 1-63 a message has shown.
type Set uint64

// First reports whether num is seen for the first time, and records it.
func (s *Set) First(num protowire.Number) bool {
	if num < 1 || num > 63 {
		return false
	}
	bit := Set(1) << num
	if *s&bit != 0 {
		return false
	}
	*s |= bit
	return true
}
