package rpcbuf

import (
	"bytes"
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/quorumbus/quorumbus/proto/raftpb"
)

// TestCodecRoundTrip: messages small and large come back as they went,
// whether they arrive in one piece or several, and what Unmarshal returns
// does not alias the buffers, which go back to the pool: neither a message
// protobuf decodes nor one that keeps its buffer (OwnedUnmarshaler).
func TestCodecRoundTrip(t *testing.T) {
	var msgs []proto.Message
	for _, n := range []int{0, 10, 4 << 10, 300 << 10} {
		data := bytes.Repeat([]byte{0x5A}, n)
		msgs = append(msgs, wrapperspb.Bytes(data),
			&raftpb.AppendEntriesRequest{GroupId: 3, Entries: []*raftpb.Log{{Index: 7, Data: data}, {Index: 8, Data: data}}})
	}
	for _, in := range msgs {
		n := proto.Size(in)
		data, err := Codec{}.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		wire := data.Materialize()
		if want, _ := proto.Marshal(in); !bytes.Equal(wire, want) {
			t.Fatalf("%d bytes: encoding differs from protobuf's", n)
		}
		data.Free()
		for _, pieces := range []int{1, 3} {
			var split mem.BufferSlice
			rest := wire
			for i := range pieces {
				k := len(rest)
				if i < pieces-1 {
					k = len(rest) / 2
				}
				b := Shared.Get(k)
				copy(*b, rest[:k])
				split = append(split, mem.NewBuffer(b, Shared))
				rest = rest[k:]
			}
			out := in.ProtoReflect().New().Interface()
			if err := (Codec{}).Unmarshal(split, out); err != nil {
				t.Fatal(err)
			}
			for _, b := range split {
				copy(b.ReadOnlyData(), make([]byte, b.Len())) // scribble, as reuse would
			}
			split.Free()
			if !proto.Equal(in, out) {
				t.Fatalf("%d bytes in %d pieces: round trip differs", n, pieces)
			}
		}
	}
	if _, err := (Codec{}).Marshal("not a message"); err == nil {
		t.Fatal("Marshal of a string succeeded")
	}
}
