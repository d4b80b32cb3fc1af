package raftpb

import (
	"bytes"
	"math/rand/v2"
	"testing"
	"unsafe"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

func randomRequest(r *rand.Rand, maxData int) *AppendEntriesRequest {
	m := &AppendEntriesRequest{
		GroupId: r.Uint64(), Term: r.Uint64N(100), PrevLogEntry: r.Uint64(), PrevLogTerm: r.Uint64N(3),
		LeaderCommitIndex: r.Uint64(),
	}
	if r.IntN(4) > 0 {
		m.Header = &Header{ProtocolVersion: r.Int32N(4) - 1, Id: []byte("node-1"), Addr: []byte("127.0.0.1:5301")}
	}
	if r.IntN(2) == 0 {
		m.Leader = []byte("127.0.0.1:5301")
	}
	for range r.IntN(5) {
		l := &Log{Index: r.Uint64(), Term: r.Uint64N(9), Type: r.Uint32N(8), AppendedAtUnixNano: r.Int64() - 1<<62}
		if n := r.IntN(maxData); n > 0 {
			l.Data = make([]byte, n)
			for i := range l.Data {
				l.Data[i] = byte(r.Uint32())
			}
		}
		if r.IntN(3) == 0 {
			l.Extensions = []byte{1, 2, 3}
		}
		m.Entries = append(m.Entries, l)
	}
	return m
}

// TestUnmarshalOwned: requests decode as proto.Unmarshal decodes them, with
// the entries' data pointing into the buffer.
func TestUnmarshalOwned(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 500 {
		in := randomRequest(r, 3000)
		b, err := proto.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		var got AppendEntriesRequest
		if err := got.UnmarshalOwned(b); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if !proto.Equal(&got, in) {
			t.Fatalf("request %d: decoded %v, want %v", i, &got, in)
		}
		for _, e := range got.Entries {
			if len(e.Data) > 0 && !within(e.Data, b) {
				t.Fatalf("request %d: entry data was copied", i)
			}
		}
	}
}

func within(p, b []byte) bool {
	start, end := uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(unsafe.Pointer(unsafe.SliceData(b)))+uintptr(len(b))
	q := uintptr(unsafe.Pointer(unsafe.SliceData(p)))
	return q >= start && q+uintptr(len(p)) <= end
}

// TestUnmarshalOwnedFallback: what the fast path does not know (an unknown
// field, here one a newer peer might send, and a field of another wire
// type) is decoded by protobuf, unknown fields kept.
func TestUnmarshalOwnedFallback(t *testing.T) {
	in := randomRequest(rand.New(rand.NewPCG(3, 4)), 3000)
	b, _ := proto.Marshal(in)
	for name, extra := range map[string][]byte{
		"unknown field":    protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.VarintType), 5),
		"entries a varint": protowire.AppendVarint(protowire.AppendTag(nil, 7, protowire.VarintType), 5),
	} {
		enc := append(bytes.Clone(b), extra...)
		var want, got AppendEntriesRequest
		werr := proto.Unmarshal(enc, &want)
		gerr := got.UnmarshalOwned(enc)
		if (werr == nil) != (gerr == nil) || (werr == nil && !proto.Equal(&got, &want)) {
			t.Fatalf("%s: got %v (%v), want %v (%v)", name, &got, gerr, &want, werr)
		}
	}
}

// FuzzUnmarshalOwned: on any input the fast path agrees with protobuf, in
// error and in result, and what it decodes MarshalPieces encodes as
// protobuf does.
func FuzzUnmarshalOwned(f *testing.F) {
	r := rand.New(rand.NewPCG(5, 6))
	for range 8 {
		b, _ := proto.Marshal(randomRequest(r, 40)) // small: the fuzzer mutates bytes
		f.Add(b)
	}
	f.Add([]byte{0x3a, 0x02, 0x22, 0x05})
	f.Fuzz(func(t *testing.T, b []byte) {
		var want, got AppendEntriesRequest
		werr := proto.Unmarshal(b, &want)
		gerr := got.UnmarshalOwned(bytes.Clone(b))
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("protobuf says %v, UnmarshalOwned %v", werr, gerr)
		}
		if werr != nil {
			return
		}
		if !proto.Equal(&got, &want) {
			t.Fatalf("decoded %v, protobuf %v", &got, &want)
		}
		if pieces, ok := want.MarshalPieces(); ok {
			enc, err := proto.Marshal(&want)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(bytes.Join(pieces, nil), enc) {
				t.Fatalf("MarshalPieces of %v differs from protobuf's encoding", &want)
			}
		} else if !hasUnknown(&want) {
			t.Fatalf("MarshalPieces refused %v", &want)
		}
	})
}

// TestMarshalPieces: the pieces join to protobuf's encoding, large entry
// data is referred to rather than copied, and the result decodes back.
func TestMarshalPieces(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for i := range 500 {
		in := randomRequest(r, 3000)
		pieces, ok := in.MarshalPieces()
		if !ok {
			t.Fatalf("request %d: not marshalled", i)
		}
		want, err := proto.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		if got := bytes.Join(pieces, nil); !bytes.Equal(got, want) {
			t.Fatalf("request %d: %d bytes in %d pieces, protobuf's encoding has %d", i, len(got), len(pieces), len(want))
		}
		refs := 0
		for _, e := range in.Entries {
			for _, p := range pieces {
				if len(e.Data) >= inlineData && len(p) == len(e.Data) && unsafe.SliceData(p) == unsafe.SliceData(e.Data) {
					refs++
				}
			}
			if len(e.Data) >= inlineData {
				refs--
			}
		}
		if refs != 0 {
			t.Fatalf("request %d: large entry data copied (%d)", i, refs)
		}
	}
	var unknown AppendEntriesRequest
	unknown.ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.VarintType), 1))
	if _, ok := unknown.MarshalPieces(); ok {
		t.Fatal("a request with unknown fields was marshalled in pieces")
	}
}

func hasUnknown(m *AppendEntriesRequest) bool {
	if len(m.ProtoReflect().GetUnknown()) > 0 {
		return true
	}
	for _, e := range m.Entries {
		if len(e.ProtoReflect().GetUnknown()) > 0 {
			return true
		}
	}
	return false
}
