// Package raftmux carries the hashicorp/raft traffic of every Raft group on
// a node over the node's one gRPC port.
//
// A Mux is registered once on the node's *grpc.Server and hands out one
// Transport per group. Every request names its group, and the receiving Mux
// passes it to that group's Transport. Peers are addressed by their gRPC
// address (raft.ServerAddress); all groups share one *grpc.ClientConn, and
// so one HTTP/2 connection, per peer address. Each pipelined AppendEntries
// flow (one group to one follower) is its own HTTP/2 stream on that
// connection, so a slow group does not hold up the responses of another.
package raftmux

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quorumbus/quorumbus/proto/raftpb"
	"github.com/quorumbus/quorumbus/proto/rpcnet"
)

// MaxMessageBytes bounds one gRPC message of the Raft service. An
// AppendEntries request holds up to raft.Config.MaxAppendEntries log entries,
// so a server must accept at least MaxAppendEntries times the largest entry;
// ServerOptions sets this limit on the server.
//
// Entries are normally a few hundred KiB, but one message may be up to
// 100 MB (Service Bus premium entities), so the limit is generous: it bounds
// what a peer may make us read, and the proposer keeps ordinary entries
// small.
const MaxMessageBytes = 1 << 30

// Defaults of Config.
const (
	DefaultMaxInFlight = 16
	DefaultTimeout     = 10 * time.Second
	DefaultChunkBytes  = 256 << 10
)

// ErrGroupNotFound is returned (as a gRPC NotFound status) to a peer that
// sends an RPC for a group this node does not run.
var ErrGroupNotFound = errors.New("raftmux: group not found")

// Config configures a Mux. The zero value is usable.
type Config struct {
	// MaxInFlight bounds the pipelined AppendEntries requests that one
	// group has outstanding towards one follower. Default DefaultMaxInFlight.
	MaxInFlight int
	// Timeout bounds every unary RPC; InstallSnapshot gets Timeout per
	// DefaultChunkBytes of snapshot. Default DefaultTimeout.
	Timeout time.Duration
	// ChunkBytes is the size of the pieces a snapshot is streamed in.
	// Default DefaultChunkBytes.
	ChunkBytes int
	// Creds is the cluster's mutual TLS the Mux dials peers with; nil:
	// plain text.
	Creds *rpcnet.Creds
	// DialOptions are added to the options the Mux dials peers with, after
	// rpcnet.Dial's and its own (tests route them through a network they
	// can cut).
	DialOptions []grpc.DialOption
	// Logger receives transport errors. Default slog.Default().
	Logger *slog.Logger
}

func (c *Config) setDefaults() {
	if c.MaxInFlight == 0 {
		c.MaxInFlight = DefaultMaxInFlight
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.ChunkBytes == 0 {
		c.ChunkBytes = DefaultChunkBytes
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate reports whether the configuration, after defaults, is usable.
func (c Config) Validate() error {
	c.setDefaults()
	switch {
	case c.MaxInFlight < 1:
		return fmt.Errorf("raftmux: MaxInFlight %d < 1", c.MaxInFlight)
	case c.Timeout < 0:
		return fmt.Errorf("raftmux: negative Timeout %v", c.Timeout)
	case c.ChunkBytes < 1 || c.ChunkBytes > MaxMessageBytes/2:
		return fmt.Errorf("raftmux: ChunkBytes %d outside [1, %d]", c.ChunkBytes, MaxMessageBytes/2)
	}
	return nil
}

// ServerOptions are the options a *grpc.Server needs to serve a Mux: a
// message limit large enough for AppendEntries batches, and rpcnet's
// (credentials, the keepalive policy that admits the pings a Mux's
// clients send).
func ServerOptions(creds *rpcnet.Creds) []grpc.ServerOption {
	return append([]grpc.ServerOption{grpc.MaxRecvMsgSize(MaxMessageBytes)}, rpcnet.ServerOptions(creds)...)
}

// Mux multiplexes the Raft transports of many groups over one gRPC server
// and one client connection per peer.
type Mux struct {
	cfg Config
	log *slog.Logger

	mu         sync.Mutex
	transports map[uint64]*Transport
	conns      map[raft.ServerAddress]*grpc.ClientConn
	closed     bool

	// Counters for tests and debugging.
	pipelined      atomic.Int64 // AppendEntries received over pipeline streams
	snapshotChunks atomic.Int64 // InstallSnapshot stream messages received
}

// New returns a Mux. It serves nothing until Register puts it on a server.
func New(cfg Config) (*Mux, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	return &Mux{
		cfg:        cfg,
		log:        cfg.Logger,
		transports: make(map[uint64]*Transport),
		conns:      make(map[raft.ServerAddress]*grpc.ClientConn),
	}, nil
}

// Register serves the Mux's Raft service on s.
func (m *Mux) Register(s grpc.ServiceRegistrar) {
	raftpb.RegisterRaftServer(s, &server{m: m})
}

// Transport returns a new transport for group groupID, whose own address
// (the address of the gRPC server the Mux is registered on) is localAddr.
// It replaces, and closes, an earlier transport of the same group. Raft
// closes its transport on shutdown (raft.WithClose).
func (m *Mux) Transport(groupID uint64, localAddr raft.ServerAddress) *Transport {
	t := newTransport(m, groupID, localAddr)
	m.mu.Lock()
	old := m.transports[groupID]
	if m.closed {
		t.shutdown()
	} else {
		m.transports[groupID] = t
	}
	m.mu.Unlock()
	if old != nil {
		old.shutdown()
	}
	return t
}

// Close closes every transport and every connection to a peer.
func (m *Mux) Close() error {
	m.mu.Lock()
	m.closed = true
	transports := m.transports
	conns := m.conns
	m.transports = map[uint64]*Transport{}
	m.conns = map[raft.ServerAddress]*grpc.ClientConn{}
	m.mu.Unlock()
	for _, t := range transports {
		t.shutdown()
	}
	var errs []error
	for _, c := range conns {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

func (m *Mux) transport(group uint64) *Transport {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.transports[group]
}

func (m *Mux) unregister(t *Transport) {
	m.mu.Lock()
	if m.transports[t.group] == t {
		delete(m.transports, t.group)
	}
	m.mu.Unlock()
}

// client returns a Raft client on the shared connection to addr, dialing it
// on first use.
func (m *Mux) client(addr raft.ServerAddress) (raftpb.RaftClient, error) {
	cc, err := m.Conn(addr)
	if err != nil {
		return nil, err
	}
	return raftpb.NewRaftClient(cc), nil
}

// Conn returns the shared connection to the node at addr, dialing it on
// first use: the one this node's Raft traffic to that node travels on, so
// that a call on it fails when that traffic would.
func (m *Mux) Conn(addr raft.ServerAddress) (*grpc.ClientConn, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, raft.ErrTransportShutdown
	}
	if cc, ok := m.conns[addr]; ok {
		return cc, nil
	}
	opts := []grpc.DialOption{
		// A peer that left every group this node shares with it gets no
		// more RPCs: after a minute its connection goes idle, which closes
		// the socket and stops reconnecting (gRPC's default waits 30
		// minutes). Peers in a group are never idle: Raft heartbeats them.
		grpc.WithIdleTimeout(time.Minute),
	}
	opts = append(opts, m.cfg.DialOptions...)
	cc, err := rpcnet.Dial(string(addr), m.cfg.Creds, opts...)
	if err != nil {
		return nil, fmt.Errorf("raftmux: dial %s: %w", addr, err)
	}
	m.conns[addr] = cc
	return cc, nil
}

// server receives the Raft RPCs of all groups and hands each to its group's
// transport.
type server struct {
	raftpb.UnimplementedRaftServer
	m *Mux
}

// dispatch hands one RPC to a group's raft and waits for the answer.
func (s *server) dispatch(ctx context.Context, group uint64, cmd any, data io.Reader, heartbeat bool) (any, error) {
	t := s.m.transport(group)
	if t == nil {
		return nil, status.Errorf(codes.NotFound, "%v: %d", ErrGroupNotFound, group)
	}
	return s.dispatchTo(ctx, t, cmd, data, heartbeat)
}

// dispatchTo is dispatch to a group's transport the caller looked up.
func (s *server) dispatchTo(ctx context.Context, t *Transport, cmd any, data io.Reader, heartbeat bool) (any, error) {
	respCh := make(chan raft.RPCResponse, 1)
	rpc := raft.RPC{Command: cmd, Reader: data, RespChan: respCh}
	if err := t.deliver(ctx, rpc, heartbeat); err != nil {
		return nil, err
	}
	resp, err := t.await(ctx, respCh)
	if err != nil {
		return nil, err
	}
	if resp.Error != nil {
		return nil, status.Error(codes.Unknown, resp.Error.Error())
	}
	return resp.Response, nil
}

// withheld refuses a vote request, or a leadership transfer
// (Ballot.Self), to a replica that withholds it (Transport.WithholdVotes).
func (s *server) withheld(group uint64, b Ballot) error {
	if t := s.m.transport(group); t != nil {
		return t.withheld(b)
	}
	return nil
}

// ballot is the vote a request asks for.
func ballot(h *raftpb.Header, lastLogIndex, lastLogTerm uint64) Ballot {
	return Ballot{Candidate: raft.ServerID(h.GetId()), LastLogIndex: lastLogIndex, LastLogTerm: lastLogTerm}
}

func (s *server) AppendEntries(ctx context.Context, pb *raftpb.AppendEntriesRequest) (*raftpb.AppendEntriesResponse, error) {
	t := s.m.transport(pb.GroupId)
	if t == nil {
		return nil, status.Errorf(codes.NotFound, "%v: %d", ErrGroupNotFound, pb.GroupId)
	}
	req := appendEntriesRequestFromPB(pb)
	resp, err := s.dispatchTo(ctx, t, req, nil, isHeartbeat(req))
	if err != nil {
		return nil, err
	}
	ar := resp.(*raft.AppendEntriesResponse)
	t.observeAppend(req, ar)
	return appendEntriesResponseToPB(ar), nil
}

// Heartbeats answers one group's heartbeats from one leader, in order. An
// error ends the stream; the leader opens another for its next heartbeat.
func (s *server) Heartbeats(stream grpc.BidiStreamingServer[raftpb.AppendEntriesRequest, raftpb.AppendEntriesResponse]) error {
	for {
		pb, err := stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		resp, err := s.AppendEntries(stream.Context(), pb)
		if err != nil {
			return err
		}
		if err := stream.Send(resp); err != nil {
			return err
		}
	}
}

func (s *server) RequestVote(ctx context.Context, pb *raftpb.RequestVoteRequest) (*raftpb.RequestVoteResponse, error) {
	if err := s.withheld(pb.GroupId, ballot(pb.Header, pb.LastLogIndex, pb.LastLogTerm)); err != nil {
		return nil, err
	}
	resp, err := s.dispatch(ctx, pb.GroupId, requestVoteRequestFromPB(pb), nil, false)
	if err != nil {
		return nil, err
	}
	return requestVoteResponseToPB(resp.(*raft.RequestVoteResponse)), nil
}

func (s *server) RequestPreVote(ctx context.Context, pb *raftpb.RequestPreVoteRequest) (*raftpb.RequestPreVoteResponse, error) {
	if err := s.withheld(pb.GroupId, ballot(pb.Header, pb.LastLogIndex, pb.LastLogTerm)); err != nil {
		return nil, err
	}
	resp, err := s.dispatch(ctx, pb.GroupId, requestPreVoteRequestFromPB(pb), nil, false)
	if err != nil {
		return nil, err
	}
	return requestPreVoteResponseToPB(resp.(*raft.RequestPreVoteResponse)), nil
}

func (s *server) TimeoutNow(ctx context.Context, pb *raftpb.TimeoutNowRequest) (*raftpb.TimeoutNowResponse, error) {
	if err := s.withheld(pb.GroupId, Ballot{Self: true}); err != nil {
		return nil, err
	}
	resp, err := s.dispatch(ctx, pb.GroupId, timeoutNowRequestFromPB(pb), nil, false)
	if err != nil {
		return nil, err
	}
	return timeoutNowResponseToPB(resp.(*raft.TimeoutNowResponse)), nil
}

// InstallSnapshot reads the request from the stream's first message and
// lets raft read the snapshot data straight off the stream.
func (s *server) InstallSnapshot(stream grpc.ClientStreamingServer[raftpb.InstallSnapshotChunk, raftpb.InstallSnapshotResponse]) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	if first.Request == nil {
		return status.Error(codes.InvalidArgument, "raftmux: InstallSnapshot stream does not start with a request")
	}
	req := installSnapshotRequestFromPB(first.Request)
	s.m.snapshotChunks.Add(1)
	recv := func() (*raftpb.InstallSnapshotChunk, error) {
		c, err := stream.Recv()
		if err == nil {
			s.m.snapshotChunks.Add(1)
		}
		return c, err
	}
	data := &chunkReader{recv: recv, buf: first.Data}
	resp, err := s.dispatch(stream.Context(), first.Request.GroupId, req, io.LimitReader(data, req.Size), false)
	if err != nil {
		return err
	}
	return stream.SendAndClose(installSnapshotResponseToPB(resp.(*raft.InstallSnapshotResponse)))
}

// AppendEntriesPipeline serves one pipelined flow. A goroutine hands the
// requests to raft in arrival order as soon as they arrive; this one sends
// raft's answers back in the same order.
func (s *server) AppendEntriesPipeline(stream grpc.BidiStreamingServer[raftpb.AppendEntriesRequest, raftpb.AppendEntriesResponse]) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel() // also ends the receiving goroutine: its Recv fails once we return

	queue := make(chan pipelined, s.m.cfg.MaxInFlight)
	recvErr := make(chan error, 1)
	go func() {
		defer close(queue)
		recvErr <- s.receivePipelined(ctx, stream, queue)
	}()
	for p := range queue {
		resp, err := p.t.await(ctx, p.respCh)
		if err != nil {
			return err
		}
		var out *raftpb.AppendEntriesResponse
		if resp.Error != nil {
			out = &raftpb.AppendEntriesResponse{Error: resp.Error.Error()}
		} else {
			ar := resp.Response.(*raft.AppendEntriesResponse)
			p.t.observeAppend(p.req, ar)
			out = appendEntriesResponseToPB(ar)
		}
		if err := stream.Send(out); err != nil {
			return err
		}
	}
	return <-recvErr
}

// pipelined is a request of a pipelined flow that raft has been given.
type pipelined struct {
	t      *Transport
	req    *raft.AppendEntriesRequest
	respCh chan raft.RPCResponse
}

func (s *server) receivePipelined(ctx context.Context, stream grpc.BidiStreamingServer[raftpb.AppendEntriesRequest, raftpb.AppendEntriesResponse], queue chan<- pipelined) error {
	for {
		pb, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return err
		}
		s.m.pipelined.Add(1)
		t := s.m.transport(pb.GroupId)
		if t == nil {
			return status.Errorf(codes.NotFound, "%v: %d", ErrGroupNotFound, pb.GroupId)
		}
		respCh := make(chan raft.RPCResponse, 1)
		req := appendEntriesRequestFromPB(pb)
		if err := t.deliver(ctx, raft.RPC{Command: req, RespChan: respCh}, false); err != nil {
			return err
		}
		select {
		case queue <- pipelined{t: t, req: req, respCh: respCh}:
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		}
	}
}

// chunkReader reads the data of an InstallSnapshot stream.
type chunkReader struct {
	recv func() (*raftpb.InstallSnapshotChunk, error)
	buf  []byte
	err  error
}

func (r *chunkReader) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		if r.err != nil {
			return 0, r.err
		}
		chunk, err := r.recv()
		if err != nil {
			r.err = err
			continue
		}
		r.buf = chunk.Data
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}
