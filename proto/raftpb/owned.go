package raftpb

import (
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/quorumbus/quorumbus/proto/wire"
)

// UnmarshalOwned decodes an AppendEntriesRequest from b, which the caller
// hands over for good: the entries' data and extensions point into b
// instead of being copied out of it. A follower receives its leader's
// entries, several hundred KiB per request under load, as gRPC pieces that
// must be joined into one buffer before decoding anyway; decoding them in
// place saves protobuf's second copy of every entry. b must not change
// afterwards (the entries live on in Raft's log cache and the state machine
// reads them).
//
// Anything the fast path does not expect (unknown fields, a field of the
// wrong wire type) falls back to proto.Unmarshal, which copies.
func (m *AppendEntriesRequest) UnmarshalOwned(b []byte) error {
	if !m.aliasDecode(b) {
		m.Reset()
		return proto.Unmarshal(b, m)
	}
	return nil
}

func (m *AppendEntriesRequest) aliasDecode(b []byte) bool {
	m.Reset()
	var n int // entries, counted first so that they take one allocation
	for p := b; len(p) > 0; {
		num, typ, l := protowire.ConsumeField(p)
		if l < 0 {
			return false
		}
		if num == 7 && typ == protowire.BytesType {
			n++
		}
		p = p[l:]
	}
	var logs []Log
	if n > 0 {
		logs = make([]Log, 0, n)
		m.Entries = make([]*Log, 0, n)
	}
	for len(b) > 0 {
		f, rest, ok := wire.Next(b)
		if !ok {
			return false
		}
		b = rest
		varint, bytes := f.Typ == protowire.VarintType, f.Typ == protowire.BytesType
		switch {
		case f.Num == 1 && varint:
			m.GroupId = f.V
		case f.Num == 2 && bytes:
			if m.Header == nil {
				m.Header = &Header{}
			}
			// A repeated message field merges; proto.Merge keeps that.
			if (proto.UnmarshalOptions{Merge: true}).Unmarshal(f.B, m.Header) != nil {
				return false
			}
		case f.Num == 3 && varint:
			m.Term = f.V
		case f.Num == 4 && bytes:
			m.Leader = f.B
		case f.Num == 5 && varint:
			m.PrevLogEntry = f.V
		case f.Num == 6 && varint:
			m.PrevLogTerm = f.V
		case f.Num == 7 && bytes:
			logs = append(logs, Log{})
			e := &logs[len(logs)-1]
			if !e.aliasDecode(f.B) {
				return false
			}
			m.Entries = append(m.Entries, e)
		case f.Num == 8 && varint:
			m.LeaderCommitIndex = f.V
		default:
			return false
		}
	}
	return true
}

func (e *Log) aliasDecode(b []byte) bool {
	for len(b) > 0 {
		f, rest, ok := wire.Next(b)
		if !ok {
			return false
		}
		b = rest
		varint, bytes := f.Typ == protowire.VarintType, f.Typ == protowire.BytesType
		switch {
		case f.Num == 1 && varint:
			e.Index = f.V
		case f.Num == 2 && varint:
			e.Term = f.V
		case f.Num == 3 && varint:
			e.Type = uint32(f.V) // as proto truncates a uint32
		case f.Num == 4 && bytes:
			e.Data = f.B
		case f.Num == 5 && bytes:
			e.Extensions = f.B
		case f.Num == 6 && varint:
			e.AppendedAtUnixNano = int64(f.V)
		default:
			return false
		}
	}
	return true
}

// inlineData is the length from which MarshalPieces refers to an entry's
// data instead of copying it.
const inlineData = 512

// MarshalPieces encodes the request as pieces whose concatenation is its
// protobuf encoding (the same bytes as proto.Marshal), with the data of
// larger entries as pieces of their own that point at the entries' data
// rather than copies of it. A leader sends the same entries to each
// follower and gRPC copies the pieces into its frames anyway; marshalling
// them into one buffer first copied every entry once more per follower.
// The entries' data must not change until the pieces are written (Raft's
// entries never do). ok is false for a request or entry with unknown
// fields, which proto.Marshal must encode.
func (m *AppendEntriesRequest) MarshalPieces() (pieces [][]byte, ok bool) {
	if len(m.ProtoReflect().GetUnknown()) > 0 {
		return nil, false
	}
	hsize := 0
	if m.Header != nil {
		hsize = proto.Size(m.Header)
	}
	// Everything but the referenced data goes into one buffer, sized
	// first so that the pieces cut from it stay where they are.
	n, refs := 0, 0
	n += sizeVarint(1, m.GroupId) + sizeVarint(3, m.Term) + sizeVarint(5, m.PrevLogEntry) +
		sizeVarint(6, m.PrevLogTerm) + sizeVarint(8, m.LeaderCommitIndex) + sizeBytes(4, m.Leader)
	if m.Header != nil {
		n += protowire.SizeTag(2) + protowire.SizeBytes(hsize)
	}
	for _, e := range m.Entries {
		if len(e.ProtoReflect().GetUnknown()) > 0 {
			return nil, false
		}
		s := e.size()
		n += protowire.SizeTag(7) + protowire.SizeBytes(s)
		if len(e.Data) >= inlineData {
			n -= len(e.Data)
			refs++
		}
	}
	b := make([]byte, 0, n)
	pieces = make([][]byte, 0, 2*refs+1)
	b = appendVarint(b, 1, m.GroupId)
	if m.Header != nil {
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(hsize))
		var err error
		if b, err = (proto.MarshalOptions{UseCachedSize: true}).MarshalAppend(b, m.Header); err != nil {
			return nil, false
		}
	}
	b = appendVarint(b, 3, m.Term)
	b = appendBytes(b, 4, m.Leader)
	b = appendVarint(b, 5, m.PrevLogEntry)
	b = appendVarint(b, 6, m.PrevLogTerm)
	from := 0
	for _, e := range m.Entries {
		b = protowire.AppendTag(b, 7, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(e.size()))
		b = appendVarint(b, 1, e.Index)
		b = appendVarint(b, 2, e.Term)
		b = appendVarint(b, 3, uint64(e.Type))
		if len(e.Data) >= inlineData {
			b = protowire.AppendTag(b, 4, protowire.BytesType)
			b = protowire.AppendVarint(b, uint64(len(e.Data)))
			pieces = append(pieces, b[from:len(b):len(b)], e.Data)
			from = len(b)
		} else {
			b = appendBytes(b, 4, e.Data)
		}
		b = appendBytes(b, 5, e.Extensions)
		b = appendVarint(b, 6, uint64(e.AppendedAtUnixNano))
	}
	b = appendVarint(b, 8, m.LeaderCommitIndex)
	if len(b) != n || cap(b) != n {
		return nil, false // a size above was wrong; let protobuf do it
	}
	return append(pieces, b[from:]), true
}

// size is the length of e's encoding.
func (e *Log) size() int {
	return sizeVarint(1, e.Index) + sizeVarint(2, e.Term) + sizeVarint(3, uint64(e.Type)) +
		sizeBytes(4, e.Data) + sizeBytes(5, e.Extensions) + sizeVarint(6, uint64(e.AppendedAtUnixNano))
}

// The helpers below encode proto3 scalars: a zero value is left out.

func sizeVarint(num protowire.Number, v uint64) int {
	if v == 0 {
		return 0
	}
	return protowire.SizeTag(num) + protowire.SizeVarint(v)
}

func sizeBytes(num protowire.Number, v []byte) int {
	if len(v) == 0 {
		return 0
	}
	return protowire.SizeTag(num) + protowire.SizeBytes(len(v))
}

func appendVarint(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	return protowire.AppendVarint(protowire.AppendTag(b, num, protowire.VarintType), v)
}

func appendBytes(b []byte, num protowire.Number, v []byte) []byte {
	if len(v) == 0 {
		return b
	}
	return protowire.AppendBytes(protowire.AppendTag(b, num, protowire.BytesType), v)
}
