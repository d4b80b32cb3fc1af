package raftmux

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quorumbus/quorumbus/proto/raftpb"
)

var (
	_ raft.Transport   = (*Transport)(nil)
	_ raft.WithPreVote = (*Transport)(nil)
	_ raft.WithClose   = (*Transport)(nil)
)

// Transport is the raft.Transport of one group on one node. It sends
// through its Mux's shared connections and receives what the Mux's server
// routes to its group.
type Transport struct {
	mux   *Mux
	group uint64
	local raft.ServerAddress

	consumeCh chan raft.RPC

	hbMu        sync.Mutex
	heartbeatFn func(raft.RPC)

	// withholding, when set, says whether this replica may vote in the
	// ballot it is given (Ballot.Self: for itself, or take a leadership
	// transfer); an error says why not.
	withholding atomic.Pointer[func(Ballot) error]
	// appended, when set, is told of every AppendEntries this replica
	// answered with success (ObserveAppends).
	appended atomic.Pointer[func(*raft.AppendEntriesRequest, *raft.AppendEntriesResponse)]

	streamsMu  sync.Mutex
	heartbeats map[raft.ServerAddress]*heartbeatStream // by follower

	// lastLogs is each follower's last log index as its latest answer to
	// AppendEntries (heartbeats included) gave it: what the leader knows
	// of a follower's progress, which hashicorp/raft keeps to itself.
	lastLogs sync.Map // raft.ServerAddress -> uint64
	// acks is each follower's latest acknowledgement of this replica's
	// leadership (confirm.go).
	acks sync.Map // raft.ServerAddress -> ack

	// ctx is cancelled when the transport closes; every outgoing call
	// derives from it.
	ctx       context.Context
	cancel    context.CancelFunc
	closeOnce sync.Once
}

func newTransport(m *Mux, group uint64, local raft.ServerAddress) *Transport {
	ctx, cancel := context.WithCancel(context.Background())
	return &Transport{
		mux:       m,
		group:     group,
		local:     local,
		consumeCh: make(chan raft.RPC),
		ctx:       ctx,
		cancel:    cancel,
	}
}

// Consumer implements raft.Transport.
func (t *Transport) Consumer() <-chan raft.RPC { return t.consumeCh }

// LocalAddr implements raft.Transport.
func (t *Transport) LocalAddr() raft.ServerAddress { return t.local }

// Group returns the id of the group the transport carries.
func (t *Transport) Group() uint64 { return t.group }

// SetHeartbeatHandler implements raft.Transport.
func (t *Transport) SetHeartbeatHandler(cb func(rpc raft.RPC)) {
	t.hbMu.Lock()
	t.heartbeatFn = cb
	t.hbMu.Unlock()
}

// Ballot is a vote this replica is asked for, or would ask for itself.
type Ballot struct {
	// Self: this replica's own vote request (or pre-vote), or a
	// leadership transfer to it; the other fields are then zero.
	Self bool
	// Candidate is the candidate's server id, from the request's header.
	Candidate raft.ServerID
	// LastLogIndex and LastLogTerm are the candidate's last log entry.
	LastLogIndex, LastLogTerm uint64
}

// WithholdVotes keeps this replica out of elections as far as why says:
// while why(Ballot{Self: true}) returns an error, the replica's own vote
// requests fail with it and leadership transfers to it are refused; a
// candidate's vote request is refused while why returns an error for it.
func (t *Transport) WithholdVotes(why func(Ballot) error) {
	t.withholding.Store(&why)
}

// withheld returns why this replica does not vote in b, or nil.
func (t *Transport) withheld(b Ballot) error {
	if p := t.withholding.Load(); p != nil {
		if err := (*p)(b); err != nil {
			return status.Errorf(codes.FailedPrecondition, "raftmux: group %d: %v", t.group, err)
		}
	}
	return nil
}

// ObserveAppends has fn told of every AppendEntries request (heartbeats
// and pipelined ones included) that this replica's raft answered with
// success, after raft stored its entries. fn runs on the RPC's goroutine
// and must be quick.
func (t *Transport) ObserveAppends(fn func(*raft.AppendEntriesRequest, *raft.AppendEntriesResponse)) {
	t.appended.Store(&fn)
}

// observeAppend hands a successful AppendEntries to the observer, if any.
func (t *Transport) observeAppend(req *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) {
	if p := t.appended.Load(); p != nil && resp.Success {
		(*p)(req, resp)
	}
}

// EncodePeer implements raft.Transport: a peer is its gRPC address.
func (t *Transport) EncodePeer(_ raft.ServerID, addr raft.ServerAddress) []byte {
	return []byte(addr)
}

// DecodePeer implements raft.Transport.
func (t *Transport) DecodePeer(buf []byte) raft.ServerAddress {
	return raft.ServerAddress(buf)
}

// Close implements raft.WithClose. Raft calls it when it shuts down.
func (t *Transport) Close() error {
	t.mux.unregister(t)
	t.shutdown()
	return nil
}

func (t *Transport) shutdown() {
	t.closeOnce.Do(t.cancel)
}

// deliver hands an incoming RPC to raft: to the heartbeat handler if it is
// a heartbeat and one is set, else to the consumer channel.
func (t *Transport) deliver(ctx context.Context, rpc raft.RPC, heartbeat bool) error {
	if heartbeat {
		t.hbMu.Lock()
		fn := t.heartbeatFn
		t.hbMu.Unlock()
		if fn != nil {
			fn(rpc)
			return nil
		}
	}
	select {
	case t.consumeCh <- rpc:
		return nil
	case <-t.ctx.Done():
		return status.Errorf(codes.Unavailable, "raftmux: group %d: %v", t.group, raft.ErrTransportShutdown)
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	}
}

// await waits for raft's answer to a delivered RPC.
func (t *Transport) await(ctx context.Context, respCh <-chan raft.RPCResponse) (raft.RPCResponse, error) {
	select {
	case resp := <-respCh:
		return resp, nil
	case <-t.ctx.Done():
		return raft.RPCResponse{}, status.Errorf(codes.Unavailable, "raftmux: group %d: %v", t.group, raft.ErrTransportShutdown)
	case <-ctx.Done():
		return raft.RPCResponse{}, status.FromContextError(ctx.Err()).Err()
	}
}

// call runs one unary RPC to target under the transport's timeout.
func call[Req, Resp any](t *Transport, target raft.ServerAddress, timeout time.Duration, req *Req,
	rpc func(raftpb.RaftClient, context.Context, *Req, ...grpc.CallOption) (*Resp, error)) (*Resp, error) {
	c, err := t.mux.client(target)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(t.ctx, timeout)
	defer cancel()
	resp, err := rpc(c, ctx, req)
	if err != nil {
		return nil, t.callError(target, err)
	}
	return resp, nil
}

// openStream opens a stream to target that ends when cancel is called or
// the transport closes.
func openStream[S any](t *Transport, target raft.ServerAddress,
	open func(raftpb.RaftClient, context.Context, ...grpc.CallOption) (S, error)) (S, context.CancelFunc, error) {
	var none S
	c, err := t.mux.client(target)
	if err != nil {
		return none, nil, err
	}
	ctx, cancel := context.WithCancel(t.ctx)
	stream, err := open(c, ctx)
	if err != nil {
		cancel()
		return none, nil, t.callError(target, err)
	}
	return stream, cancel, nil
}

func (t *Transport) callError(target raft.ServerAddress, err error) error {
	if t.ctx.Err() != nil {
		return raft.ErrTransportShutdown
	}
	return fmt.Errorf("raftmux: group %d to %s: %s", t.group, target, status.Convert(err).Message())
}

// AppendEntries implements raft.Transport. Heartbeats go on the
// follower's heartbeat stream.
func (t *Transport) AppendEntries(_ raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	req := appendEntriesRequestToPB(t.group, args)
	var out *raftpb.AppendEntriesResponse
	var err error
	sent := time.Now()
	if isHeartbeat(args) {
		out, err = t.heartbeatStream(target).call(t, target, req)
	} else {
		out, err = call(t, target, t.mux.cfg.Timeout, req, raftpb.RaftClient.AppendEntries)
	}
	if err != nil {
		return err
	}
	appendEntriesResponseFromPB(out, resp)
	t.lastLogs.Store(target, resp.LastLog)
	t.acknowledge(target, args.Term, sent, resp)
	return nil
}

// FollowerLastLog is target's last log index from its latest answer to
// this transport's AppendEntries; false when it never answered.
func (t *Transport) FollowerLastLog(target raft.ServerAddress) (uint64, bool) {
	v, ok := t.lastLogs.Load(target)
	if !ok {
		return 0, false
	}
	return v.(uint64), true
}

// heartbeatStream carries a group's heartbeats to one follower. hashicorp/raft
// sends them one at a time per follower, each waiting for its answer, so
// one stream in request-answer turns serves them all; a unary call per
// heartbeat opened an HTTP/2 stream each time, which was most of what an
// idle dev cluster cost.
type heartbeatStream struct {
	mu     sync.Mutex
	stream grpc.BidiStreamingClient[raftpb.AppendEntriesRequest, raftpb.AppendEntriesResponse]
	cancel context.CancelFunc // ends stream
	unary  bool               // the follower has no heartbeat stream (an older version)
}

func (t *Transport) heartbeatStream(target raft.ServerAddress) *heartbeatStream {
	t.streamsMu.Lock()
	defer t.streamsMu.Unlock()
	if t.heartbeats == nil {
		t.heartbeats = make(map[raft.ServerAddress]*heartbeatStream)
	}
	h := t.heartbeats[target]
	if h == nil {
		h = &heartbeatStream{}
		t.heartbeats[target] = h
	}
	return h
}

// call sends one heartbeat and waits for its answer under the transport's
// timeout. A failure ends the stream, and the next heartbeat opens one.
func (h *heartbeatStream) call(t *Transport, target raft.ServerAddress, req *raftpb.AppendEntriesRequest) (*raftpb.AppendEntriesResponse, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.unary {
		return call(t, target, t.mux.cfg.Timeout, req, raftpb.RaftClient.AppendEntries)
	}
	if h.stream == nil {
		stream, cancel, err := openStream(t, target, raftpb.RaftClient.Heartbeats)
		if err != nil {
			return nil, err
		}
		h.stream, h.cancel = stream, cancel
	}
	timer := time.AfterFunc(t.mux.cfg.Timeout, h.cancel)
	defer timer.Stop()
	err := h.stream.Send(req)
	var resp *raftpb.AppendEntriesResponse
	if err == nil || errors.Is(err, io.EOF) { // on EOF, Recv says why the stream ended
		resp, err = h.stream.Recv()
	}
	if err != nil {
		h.cancel()
		h.stream, h.cancel = nil, nil
		if status.Code(err) == codes.Unimplemented {
			h.unary = true
			return call(t, target, t.mux.cfg.Timeout, req, raftpb.RaftClient.AppendEntries)
		}
		return nil, t.callError(target, err)
	}
	return resp, nil
}

// RequestVote implements raft.Transport.
func (t *Transport) RequestVote(_ raft.ServerID, target raft.ServerAddress, args *raft.RequestVoteRequest, resp *raft.RequestVoteResponse) error {
	if err := t.withheld(Ballot{Self: true}); err != nil {
		return err
	}
	out, err := call(t, target, t.mux.cfg.Timeout, requestVoteRequestToPB(t.group, args), raftpb.RaftClient.RequestVote)
	if err != nil {
		return err
	}
	requestVoteResponseFromPB(out, resp)
	return nil
}

// RequestPreVote implements raft.WithPreVote.
func (t *Transport) RequestPreVote(_ raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	if err := t.withheld(Ballot{Self: true}); err != nil {
		return err
	}
	out, err := call(t, target, t.mux.cfg.Timeout, requestPreVoteRequestToPB(t.group, args), raftpb.RaftClient.RequestPreVote)
	if err != nil {
		return err
	}
	requestPreVoteResponseFromPB(out, resp)
	return nil
}

// TimeoutNow implements raft.Transport.
func (t *Transport) TimeoutNow(_ raft.ServerID, target raft.ServerAddress, args *raft.TimeoutNowRequest, resp *raft.TimeoutNowResponse) error {
	out, err := call(t, target, t.mux.cfg.Timeout, timeoutNowRequestToPB(t.group, args), raftpb.RaftClient.TimeoutNow)
	if err != nil {
		return err
	}
	timeoutNowResponseFromPB(out, resp)
	return nil
}

// InstallSnapshot implements raft.Transport. It streams the snapshot in
// ChunkBytes pieces after the request; the deadline grows with the size,
// Timeout per DefaultChunkBytes, as raft's NetworkTransport does.
func (t *Transport) InstallSnapshot(_ raft.ServerID, target raft.ServerAddress, args *raft.InstallSnapshotRequest, resp *raft.InstallSnapshotResponse, data io.Reader) error {
	c, err := t.mux.client(target)
	if err != nil {
		return err
	}
	timeout := t.mux.cfg.Timeout * time.Duration(1+args.Size/DefaultChunkBytes)
	ctx, cancel := context.WithTimeout(t.ctx, timeout)
	defer cancel()
	stream, err := c.InstallSnapshot(ctx)
	if err != nil {
		return t.callError(target, err)
	}
	chunk := &raftpb.InstallSnapshotChunk{Request: installSnapshotRequestToPB(t.group, args)}
	var sent int64
	for {
		// A fresh buffer each time: gRPC does not promise to be done with
		// a message when Send returns.
		buf := make([]byte, t.mux.cfg.ChunkBytes)
		n, rerr := io.ReadFull(data, buf)
		if n > 0 {
			chunk.Data = buf[:n]
			sent += int64(n)
		}
		if n > 0 || chunk.Request != nil {
			// Send fails with io.EOF when the receiver has already
			// answered; CloseAndRecv below then returns its status.
			if err := stream.Send(chunk); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				return t.callError(target, err)
			}
		}
		chunk = &raftpb.InstallSnapshotChunk{}
		if errors.Is(rerr, io.EOF) || errors.Is(rerr, io.ErrUnexpectedEOF) {
			break
		} else if rerr != nil {
			return fmt.Errorf("raftmux: group %d: reading snapshot after %d bytes: %w", t.group, sent, rerr)
		}
	}
	out, err := stream.CloseAndRecv()
	if err != nil {
		return t.callError(target, err)
	}
	installSnapshotResponseFromPB(out, resp)
	return nil
}

// AppendEntriesPipeline implements raft.Transport with one gRPC
// bidirectional stream per (group, follower). Up to MaxInFlight requests
// are outstanding; AppendEntries blocks beyond that, which is raft's
// back-pressure.
func (t *Transport) AppendEntriesPipeline(_ raft.ServerID, target raft.ServerAddress) (raft.AppendPipeline, error) {
	stream, cancel, err := openStream(t, target, raftpb.RaftClient.AppendEntriesPipeline)
	if err != nil {
		return nil, err
	}
	p := &pipeline{
		t:        t,
		target:   target,
		stream:   stream,
		cancel:   cancel,
		inflight: make(chan *appendFuture, t.mux.cfg.MaxInFlight),
		doneCh:   make(chan raft.AppendFuture, t.mux.cfg.MaxInFlight),
		closed:   make(chan struct{}),
	}
	go p.receive()
	return p, nil
}

type pipeline struct {
	t        *Transport
	target   raft.ServerAddress
	stream   grpc.BidiStreamingClient[raftpb.AppendEntriesRequest, raftpb.AppendEntriesResponse]
	cancel   context.CancelFunc
	inflight chan *appendFuture
	doneCh   chan raft.AppendFuture

	closeOnce sync.Once
	closed    chan struct{}
}

// AppendEntries implements raft.AppendPipeline. Raft calls it from one
// goroutine, so requests enter the stream in the order of inflight.
func (p *pipeline) AppendEntries(args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) (raft.AppendFuture, error) {
	f := &appendFuture{start: time.Now(), args: args, resp: resp, done: make(chan struct{})}
	select {
	case p.inflight <- f:
	case <-p.closed:
		return nil, raft.ErrPipelineShutdown
	}
	if err := p.stream.Send(appendEntriesRequestToPB(p.t.group, args)); err != nil {
		// The receiver fails f and everything after it once Recv fails.
		return nil, p.t.callError(p.target, err)
	}
	return f, nil
}

// receive completes the futures in order as the answers arrive. It waits
// in Recv, not for the next request: a request enters inflight before it
// is sent, so its answer finds it there, and sending does not wake this
// goroutine only for it to block in Recv again. That wake-up was the
// largest scheduling delay of a synchronous send (go tool trace
// -pprof=sched), and it pushed the replication goroutine of the group's
// other follower back in the run queue.
func (p *pipeline) receive() {
	var broken error
	for {
		var out *raftpb.AppendEntriesResponse
		if broken == nil {
			var err error
			if out, err = p.stream.Recv(); err != nil {
				broken = p.t.callError(p.target, err)
			}
		}
		var f *appendFuture
		select {
		case f = <-p.inflight:
		case <-p.closed:
			return
		}
		switch {
		case broken != nil:
			f.err = broken
		case out.Error != "":
			f.err = errors.New(out.Error)
		default:
			appendEntriesResponseFromPB(out, f.resp)
			p.t.lastLogs.Store(p.target, f.resp.LastLog)
			p.t.acknowledge(p.target, f.args.Term, f.start, f.resp)
		}
		close(f.done)
		select {
		case p.doneCh <- f:
		case <-p.closed:
			return
		}
	}
}

// Consumer implements raft.AppendPipeline.
func (p *pipeline) Consumer() <-chan raft.AppendFuture { return p.doneCh }

// Close implements raft.AppendPipeline: it cancels the stream and with it
// every request in flight.
func (p *pipeline) Close() error {
	p.closeOnce.Do(func() {
		close(p.closed)
		p.cancel()
	})
	return nil
}

// appendFuture is a pipelined AppendEntries request.
type appendFuture struct {
	start time.Time
	args  *raft.AppendEntriesRequest
	resp  *raft.AppendEntriesResponse
	err   error
	done  chan struct{}
}

func (f *appendFuture) Error() error {
	<-f.done
	return f.err
}

func (f *appendFuture) Start() time.Time                    { return f.start }
func (f *appendFuture) Request() *raft.AppendEntriesRequest { return f.args }
func (f *appendFuture) Response() *raft.AppendEntriesResponse {
	return f.resp
}
