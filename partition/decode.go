package partition

import (
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// Decoding an entry without copying its message bodies.
//
// proto.Unmarshal copies every bytes field. Every replica decodes every
// entry it applies, and an entry of sends is nearly all bodies, which the
// apply path only measures and points at (bodies stay in the Raft log,
// logbodies.go) or writes into a store batch, which copies them anyway: a
// profile of 300,000 sends on the dev cluster spent a tenth of its CPU in
// that decode, most of it copying bodies and collecting them again.
//
// aliasBatch decodes the shape EncodeBatch writes and lets the sections of
// each NewMessage point into the entry. It handles Enqueue commands itself
// and hands every other command to proto.Unmarshal. Anything it does not
// expect (a field it does not know, one repeated that proto would merge,
// a wire type out of place, a string that is not UTF-8) makes it give up,
// and DecodeBatch decodes the entry with proto.Unmarshal as before: the
// two agree on every entry the fast path accepts (FuzzDecodeBatch).

// aliasBatch decodes a Batch from p, the entry after its format byte. ok is
// false if p is not in the shape it decodes.
func aliasBatch(p []byte) (b *partitionpb.Batch, ok bool) {
	b = new(partitionpb.Batch)
	var seen fieldSet
	for len(p) > 0 {
		f, rest, ok := nextField(p)
		if !ok {
			return nil, false
		}
		p = rest
		switch {
		case f.num == 1 && f.typ == protowire.VarintType && seen.first(1):
			b.NowMs = int64(f.v)
		case f.num == 2 && f.typ == protowire.BytesType:
			c, ok := aliasCommand(f.b)
			if !ok {
				return nil, false
			}
			b.Commands = append(b.Commands, c)
		case f.num == 3 && f.typ == protowire.BytesType && seen.first(3) && utf8.Valid(f.b):
			b.Proposer = string(f.b)
		default:
			return nil, false
		}
	}
	return b, true
}

// aliasCommand decodes a Command: an Enqueue (with or without a request id)
// by hand, any other through proto.Unmarshal.
func aliasCommand(p []byte) (*partitionpb.Command, bool) {
	var enqueue, requestID []byte
	for q := p; len(q) > 0; {
		f, rest, ok := nextField(q)
		if !ok {
			return nil, false
		}
		q = rest
		switch {
		case f.typ != protowire.BytesType:
			return protoCommand(p)
		case f.num == 3 && enqueue == nil: // Command.enqueue
			enqueue = f.b
		case f.num == 12 && requestID == nil: // Command.request_id
			requestID = f.b
		default:
			return protoCommand(p)
		}
	}
	if enqueue == nil {
		return protoCommand(p)
	}
	e, ok := aliasEnqueue(enqueue)
	if !ok {
		return nil, false
	}
	return &partitionpb.Command{Op: &partitionpb.Command_Enqueue{Enqueue: e}, RequestId: requestID}, true
}

func protoCommand(p []byte) (*partitionpb.Command, bool) {
	c := new(partitionpb.Command)
	if proto.Unmarshal(p, c) != nil {
		return nil, false
	}
	return c, true
}

func aliasEnqueue(p []byte) (*partitionpb.Enqueue, bool) {
	e := new(partitionpb.Enqueue)
	var seen fieldSet
	for len(p) > 0 {
		f, rest, ok := nextField(p)
		if !ok {
			return nil, false
		}
		p = rest
		switch {
		case f.num == 1 && f.typ == protowire.VarintType && seen.first(1):
			e.EntityId = f.v
		case f.num == 2 && f.typ == protowire.VarintType && seen.first(2):
			e.Partition = uint32(f.v) // as proto truncates a uint32
		case f.num == 3 && f.typ == protowire.BytesType:
			m, ok := aliasNewMessage(f.b)
			if !ok {
				return nil, false
			}
			e.Messages = append(e.Messages, m)
		default:
			return nil, false
		}
	}
	return e, true
}

func aliasNewMessage(p []byte) (*partitionpb.NewMessage, bool) {
	m := new(partitionpb.NewMessage)
	var seen fieldSet
	for len(p) > 0 {
		f, rest, ok := nextField(p)
		if !ok || !seen.first(f.num) {
			return nil, false
		}
		p = rest
		varint, str := f.typ == protowire.VarintType, f.typ == protowire.BytesType && utf8.Valid(f.b)
		switch {
		case f.num == 1 && str:
			m.MessageId = string(f.b)
		case f.num == 2 && str:
			m.SessionId = string(f.b)
		case f.num == 3 && str:
			m.PartitionKey = string(f.b)
		case f.num == 4 && varint:
			m.TtlMs = int64(f.v)
		case f.num == 5 && varint:
			m.ScheduledEnqueueTimeMs = int64(f.v)
		case f.num == 6 && f.typ == protowire.BytesType:
			m.Header = f.b
		case f.num == 7 && f.typ == protowire.BytesType:
			m.Annotations = f.b
		case f.num == 8 && f.typ == protowire.BytesType:
			m.Bare = f.b
		default:
			return nil, false
		}
	}
	return m, true
}

// field is one varint or length-delimited field; b points into the entry,
// capped so that an append cannot write into it.
type field struct {
	num protowire.Number
	typ protowire.Type
	v   uint64
	b   []byte
}

// nextField consumes the field at the start of p. ok is false for a
// malformed field and for the wire types no message here uses.
func nextField(p []byte) (f field, rest []byte, ok bool) {
	num, typ, n := protowire.ConsumeTag(p)
	if n < 0 {
		return f, nil, false
	}
	p = p[n:]
	f.num, f.typ = num, typ
	switch typ {
	case protowire.VarintType:
		f.v, n = protowire.ConsumeVarint(p)
	case protowire.BytesType:
		f.b, n = protowire.ConsumeBytes(p)
		f.b = f.b[:len(f.b):len(f.b)]
	default:
		return f, nil, false
	}
	if n < 0 {
		return f, nil, false
	}
	return f, p[n:], true
}

// fieldSet records which of the field numbers 1-63 a message has shown.
type fieldSet uint64

// first reports whether num is seen for the first time, and records it.
func (s *fieldSet) first(num protowire.Number) bool {
	if num < 1 || num > 63 {
		return false
	}
	bit := fieldSet(1) << num
	if *s&bit != 0 {
		return false
	}
	*s |= bit
	return true
}
