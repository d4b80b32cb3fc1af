package raftpb

import (
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
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
		num, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return false
		}
		b = b[l:]
		var ok bool
		switch {
		case typ == protowire.VarintType && num != 2 && num != 4 && num != 7:
			var v uint64
			if v, l = protowire.ConsumeVarint(b); l < 0 {
				return false
			}
			ok = true
			switch num {
			case 1:
				m.GroupId = v
			case 3:
				m.Term = v
			case 5:
				m.PrevLogEntry = v
			case 6:
				m.PrevLogTerm = v
			case 8:
				m.LeaderCommitIndex = v
			default:
				ok = false
			}
		case typ == protowire.BytesType && (num == 2 || num == 4 || num == 7):
			var v []byte
			if v, l = protowire.ConsumeBytes(b); l < 0 {
				return false
			}
			switch num {
			case 2:
				if m.Header == nil {
					m.Header = &Header{}
				}
				// A repeated message field merges; proto.Merge keeps that.
				ok = proto.UnmarshalOptions{Merge: true}.Unmarshal(v, m.Header) == nil
			case 4:
				m.Leader = v
				ok = true
			case 7:
				logs = append(logs, Log{})
				e := &logs[len(logs)-1]
				ok = e.aliasDecode(v)
				m.Entries = append(m.Entries, e)
			}
		}
		if !ok {
			return false
		}
		b = b[l:]
	}
	return true
}

func (e *Log) aliasDecode(b []byte) bool {
	for len(b) > 0 {
		num, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return false
		}
		b = b[l:]
		switch {
		case typ == protowire.VarintType && (num == 1 || num == 2 || num == 3 || num == 6):
			v, l := protowire.ConsumeVarint(b)
			if l < 0 {
				return false
			}
			switch num {
			case 1:
				e.Index = v
			case 2:
				e.Term = v
			case 3:
				e.Type = uint32(v)
			case 6:
				e.AppendedAtUnixNano = int64(v)
			}
			b = b[l:]
		case typ == protowire.BytesType && (num == 4 || num == 5):
			v, l := protowire.ConsumeBytes(b)
			if l < 0 {
				return false
			}
			if num == 4 {
				e.Data = v
			} else {
				e.Extensions = v
			}
			b = b[l:]
		default:
			return false
		}
	}
	return true
}
