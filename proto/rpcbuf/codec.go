package rpcbuf

import (
	"bytes"
	"fmt"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// Codec is gRPC's protobuf codec on the shared pool. gRPC's own codec
// takes its buffers from gRPC's default pool whatever the server or dial
// options say, so each request and Raft entry was marshalled into a buffer
// cleared first, and each message that arrived in more than one piece was
// copied into another. The wire format and the name are the same as
// gRPC's.
type Codec struct{}

var _ encoding.CodecV2 = Codec{}

// Name is the content subtype, as gRPC's: peers see no difference.
func (Codec) Name() string { return "proto" }

// PiecesMarshaler is a message that encodes itself as pieces, some of which
// may point into its own fields (raftpb.AppendEntriesRequest); those must
// not change until gRPC has written them.
type PiecesMarshaler interface {
	MarshalPieces() (pieces [][]byte, ok bool)
}

// Marshal encodes v, a protobuf message, into one buffer of the pool, or
// into the pieces it gives (PiecesMarshaler).
func (Codec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("rpcbuf: cannot marshal %T, not a protobuf message", v)
	}
	if p, ok := v.(PiecesMarshaler); ok {
		if pieces, ok := p.MarshalPieces(); ok {
			bs := make(mem.BufferSlice, len(pieces))
			for i, q := range pieces {
				bs[i] = mem.SliceBuffer(q)
			}
			return bs, nil
		}
	}
	size := proto.Size(m)
	// Safe after Size, and only so: it reuses the size Size cached.
	opts := proto.MarshalOptions{UseCachedSize: true}
	if mem.IsBelowBufferPoolingThreshold(size) {
		b, err := opts.Marshal(m)
		if err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	buf := Shared.Get(size)
	out, err := opts.MarshalAppend((*buf)[:0], m)
	if err != nil {
		Shared.Put(buf)
		return nil, err
	}
	*buf = out
	return mem.BufferSlice{mem.NewBuffer(buf, Shared)}, nil
}

// OwnedUnmarshaler is a message that decodes from a buffer it may keep
// and point into: Unmarshal joins the pieces into a new buffer, not one of
// the pool, and hands it over (raftpb.AppendEntriesRequest).
type OwnedUnmarshaler interface {
	UnmarshalOwned(b []byte) error
}

// Unmarshal decodes data into v. A message that arrived in one piece is
// decoded where it lies; protobuf copies what it keeps.
func (Codec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("rpcbuf: cannot unmarshal into %T, not a protobuf message", v)
	}
	if o, ok := v.(OwnedUnmarshaler); ok {
		// bytes.Join allocates without zeroing first: for a Raft
		// request of a few hundred KiB, clearing the new buffer cost
		// more than copying into it.
		pieces := make([][]byte, len(data))
		for i, d := range data {
			pieces[i] = d.ReadOnlyData()
		}
		return o.UnmarshalOwned(bytes.Join(pieces, nil))
	}
	if len(data) == 1 {
		return proto.Unmarshal(data[0].ReadOnlyData(), m)
	}
	buf := data.MaterializeToBuffer(Shared)
	defer buf.Free()
	return proto.Unmarshal(buf.ReadOnlyData(), m)
}
