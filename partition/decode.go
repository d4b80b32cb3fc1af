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
		num, typ, n := protowire.ConsumeTag(p)
		if n < 0 {
			return nil, false
		}
		p = p[n:]
		switch {
		case num == 1 && typ == protowire.VarintType && seen.first(1):
			v, n := protowire.ConsumeVarint(p)
			if n < 0 {
				return nil, false
			}
			b.NowMs, p = int64(v), p[n:]
		case num == 2 && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(p)
			if n < 0 {
				return nil, false
			}
			c, ok := aliasCommand(v)
			if !ok {
				return nil, false
			}
			b.Commands, p = append(b.Commands, c), p[n:]
		case num == 3 && typ == protowire.BytesType && seen.first(3):
			v, n := protowire.ConsumeBytes(p)
			if n < 0 || !utf8.Valid(v) {
				return nil, false
			}
			b.Proposer, p = string(v), p[n:]
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
		num, typ, n := protowire.ConsumeTag(q)
		if n < 0 || typ != protowire.BytesType {
			return protoCommand(p)
		}
		v, m := protowire.ConsumeBytes(q[n:])
		if m < 0 {
			return nil, false
		}
		switch {
		case num == 3 && enqueue == nil: // Command.enqueue
			enqueue = v
		case num == 12 && requestID == nil: // Command.request_id
			requestID = v
		default:
			return protoCommand(p)
		}
		q = q[n+m:]
	}
	if enqueue == nil {
		return protoCommand(p)
	}
	e, ok := aliasEnqueue(enqueue)
	if !ok {
		return nil, false
	}
	c := &partitionpb.Command{Op: &partitionpb.Command_Enqueue{Enqueue: e}}
	if requestID != nil {
		c.RequestId = requestID[:len(requestID):len(requestID)]
	}
	return c, true
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
		num, typ, n := protowire.ConsumeTag(p)
		if n < 0 {
			return nil, false
		}
		p = p[n:]
		switch {
		case (num == 1 || num == 2) && typ == protowire.VarintType && seen.first(num):
			v, n := protowire.ConsumeVarint(p)
			if n < 0 {
				return nil, false
			}
			if num == 1 {
				e.EntityId = v
			} else {
				e.Partition = uint32(v) // as proto truncates a uint32
			}
			p = p[n:]
		case num == 3 && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(p)
			if n < 0 {
				return nil, false
			}
			m, ok := aliasNewMessage(v)
			if !ok {
				return nil, false
			}
			e.Messages, p = append(e.Messages, m), p[n:]
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
		num, typ, n := protowire.ConsumeTag(p)
		if n < 0 || num < 1 || num > 8 || !seen.first(num) {
			return nil, false
		}
		p = p[n:]
		if num == 4 || num == 5 {
			if typ != protowire.VarintType {
				return nil, false
			}
			v, n := protowire.ConsumeVarint(p)
			if n < 0 {
				return nil, false
			}
			if num == 4 {
				m.TtlMs = int64(v)
			} else {
				m.ScheduledEnqueueTimeMs = int64(v)
			}
			p = p[n:]
			continue
		}
		if typ != protowire.BytesType {
			return nil, false
		}
		v, n := protowire.ConsumeBytes(p)
		if n < 0 {
			return nil, false
		}
		p = p[n:]
		v = v[:len(v):len(v)] // an append must not write into the entry
		switch num {
		case 1, 2, 3:
			if !utf8.Valid(v) {
				return nil, false
			}
			s := string(v)
			switch num {
			case 1:
				m.MessageId = s
			case 2:
				m.SessionId = s
			default:
				m.PartitionKey = s
			}
		case 6:
			m.Header = v
		case 7:
			m.Annotations = v
		case 8:
			m.Bare = v
		}
	}
	return m, true
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
