// Package rpcbuf holds what every gRPC endpoint of the cluster sets for
// bulk traffic: a buffer pool instead of gRPC's default one, and fixed
// flow-control windows.
//
// gRPC's default pool zeroes each buffer it hands out, over the buffer's
// whole capacity, and has no tier above 1 MiB. Raft AppendEntries and
// partition requests carry hundreds of KiB of message bodies, so clearing
// buffers that the codec overwrites at once shows in profiles of the
// cluster under load. This pool hands buffers out as they are:
// gRPC writes every byte of a buffer it takes before reading it.
package rpcbuf

import (
	"math/bits"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/mem"
)

const (
	minShift = 8  // 256 B: smaller buffers are allocated, not pooled
	maxShift = 27 // 128 MiB: larger buffers are allocated, not pooled
)

// Pool is a mem.BufferPool of power-of-two tiers that does not clear what
// it hands out.
type Pool struct {
	tiers [maxShift - minShift + 1]sync.Pool
}

var _ mem.BufferPool = (*Pool)(nil)

// Shared is the pool of the process.
var Shared = new(Pool)

// tier returns the index of the smallest tier holding n bytes, or -1.
func tier(n int) int {
	if n <= 1<<minShift {
		if n <= 0 {
			return -1
		}
		return 0
	}
	shift := bits.Len(uint(n - 1))
	if shift > maxShift {
		return -1
	}
	return shift - minShift
}

// Get returns a buffer of length n whose contents are undefined.
func (p *Pool) Get(n int) *[]byte {
	t := tier(n)
	if t < 0 || n < 1<<minShift/2 {
		b := make([]byte, n)
		return &b
	}
	if b, ok := p.tiers[t].Get().(*[]byte); ok {
		*b = (*b)[:n]
		return b
	}
	b := make([]byte, n, 1<<(t+minShift))
	return &b
}

// Put returns a buffer obtained from Get. Buffers whose capacity is not a
// tier's exactly (those Get allocated unpooled) are dropped.
func (p *Pool) Put(b *[]byte) {
	c := cap(*b)
	t := tier(c)
	if t < 0 || c != 1<<(t+minShift) {
		return
	}
	*b = (*b)[:0]
	p.tiers[t].Put(b)
}

// Flow-control windows and socket buffers for the cluster's bulk traffic.
// gRPC starts a stream at a 64 KiB window and grows it by estimating the
// link's bandwidth-delay product; a Raft entry or a send request of a few
// hundred KiB then waits for window updates on its way. Fixed windows large
// enough for several such messages take those round trips out (the commit
// that introduced them has the measurements).
const (
	streamWindow = 8 << 20
	connWindow   = 32 << 20
	socketBuffer = 256 << 10
)

// ServerOptions makes a gRPC server use the shared pool, for its transport
// and its codec, and the windows above.
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		experimental.BufferPool(Shared),
		grpc.ForceServerCodecV2(Codec{}),
		grpc.InitialWindowSize(streamWindow),
		grpc.InitialConnWindowSize(connWindow),
		grpc.ReadBufferSize(socketBuffer),
		grpc.WriteBufferSize(socketBuffer),
	}
}

// DialOptions makes a gRPC client use the shared pool, for its transport
// and its codec, and the windows above.
func DialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		experimental.WithBufferPool(Shared),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(Codec{})),
		grpc.WithInitialWindowSize(streamWindow),
		grpc.WithInitialConnWindowSize(connWindow),
		grpc.WithReadBufferSize(socketBuffer),
		grpc.WithWriteBufferSize(socketBuffer),
	}
}
