package raftmux

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quorumbus/quorumbus/proto/raftpb"
)

// countFSM records every command it applies, in order.
type countFSM struct {
	mu       sync.Mutex
	data     [][]byte
	restores int
}

func (f *countFSM) Apply(l *raft.Log) any {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.data = append(f.data, bytes.Clone(l.Data))
	return len(f.data)
}

func (f *countFSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var buf bytes.Buffer
	for _, d := range f.data {
		binary.Write(&buf, binary.BigEndian, uint32(len(d)))
		buf.Write(d)
	}
	return snapshot(buf.Bytes()), nil
}

func (f *countFSM) Restore(r io.ReadCloser) error {
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	var data [][]byte
	for len(b) > 0 {
		n := binary.BigEndian.Uint32(b)
		data = append(data, b[4:4+n])
		b = b[4+n:]
	}
	f.mu.Lock()
	f.data = data
	f.restores++
	f.mu.Unlock()
	return nil
}

func (f *countFSM) state() (n int, digest string, restores int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.data), fmt.Sprintf("%x", bytes.Join(f.data, []byte{0})), f.restores
}

type snapshot []byte

func (s snapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := sink.Write(s); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

func (s snapshot) Release() {}

// host is one process of the test: a gRPC server with a Mux on it.
type host struct {
	addr raft.ServerAddress
	mux  *Mux
	srv  *grpc.Server
}

func startHost(t testing.TB) *host {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// Small chunks so that a snapshot install takes many messages.
	m, err := New(Config{ChunkBytes: 1024, MaxInFlight: 4})
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(ServerOptions(nil)...)
	m.Register(srv)
	go srv.Serve(lis)
	h := &host{addr: raft.ServerAddress(lis.Addr().String()), mux: m, srv: srv}
	t.Cleanup(func() {
		srv.Stop()
		m.Close()
	})
	return h
}

// member is one replica of one group.
type member struct {
	id    raft.ServerID
	r     *raft.Raft
	fsm   *countFSM
	trans *Transport
}

func testRaftConfig(id raft.ServerID) *raft.Config {
	c := raft.DefaultConfig()
	c.LocalID = id
	// The node's own timeouts: shorter ones made leaders of these nine
	// replicas step down mid-test when make test's other packages loaded
	// the machine, and an apply then failed with leadership lost.
	c.HeartbeatTimeout = time.Second
	c.ElectionTimeout = time.Second
	c.LeaderLeaseTimeout = 500 * time.Millisecond
	c.CommitTimeout = 5 * time.Millisecond
	// Keep few logs so that a late joiner must be sent a snapshot.
	c.TrailingLogs = 10
	c.SnapshotThreshold = 1 << 30
	c.SnapshotInterval = time.Hour
	level := hclog.Error
	if os.Getenv("RAFTMUX_TEST_LOG") != "" {
		level = hclog.Debug
	}
	c.Logger = hclog.New(&hclog.LoggerOptions{Name: string(id), Level: level, Output: os.Stderr})
	return c
}

func startMember(t *testing.T, h *host, group uint64, id raft.ServerID, bootstrap []raft.Server) *member {
	t.Helper()
	fsm := &countFSM{}
	store := raft.NewInmemStore()
	snaps := raft.NewInmemSnapshotStore()
	trans := h.mux.Transport(group, h.addr)
	r, err := raft.NewRaft(testRaftConfig(id), fsm, store, store, snaps, trans)
	if err != nil {
		t.Fatal(err)
	}
	if bootstrap != nil {
		if err := r.BootstrapCluster(raft.Configuration{Servers: bootstrap}).Error(); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { r.Shutdown().Error() })
	return &member{id: id, r: r, fsm: fsm, trans: trans}
}

func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func leaderOf(t *testing.T, members []*member) *member {
	t.Helper()
	var leader *member
	waitFor(t, "a leader", 15*time.Second, func() bool {
		for _, m := range members {
			if m.r.State() == raft.Leader {
				leader = m
				return true
			}
		}
		return false
	})
	return leader
}

// TestGroupsShareMuxes runs three Raft groups of three replicas each over
// the same three Muxes and checks that every group elects a leader and that
// all replicas of a group apply the same commands in the same order.
func TestGroupsShareMuxes(t *testing.T) {
	hosts := []*host{startHost(t), startHost(t), startHost(t)}
	groups := []uint64{0, 7, 1 << 40}
	members := map[uint64][]*member{}
	for _, g := range groups {
		var servers []raft.Server
		for i, h := range hosts {
			servers = append(servers, raft.Server{ID: raft.ServerID(fmt.Sprintf("n%d", i)), Address: h.addr})
		}
		for i, h := range hosts {
			var boot []raft.Server
			if i == 0 {
				boot = servers
			}
			members[g] = append(members[g], startMember(t, h, g, servers[i].ID, boot))
		}
	}

	const perGroup = 300
	var wg sync.WaitGroup
	for _, g := range groups {
		leader := leaderOf(t, members[g])
		// Several applies in flight so that raft pipelines.
		for c := 0; c < 4; c++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := c; i < perGroup; i += 4 {
					cmd := []byte(fmt.Sprintf("group %d command %d", g, i))
					if err := leader.r.Apply(cmd, 5*time.Second).Error(); err != nil {
						t.Errorf("group %d: apply: %v", g, err)
						return
					}
				}
			}()
		}
	}
	wg.Wait()

	for _, g := range groups {
		ms := members[g]
		waitFor(t, fmt.Sprintf("group %d replicas to agree", g), 15*time.Second, func() bool {
			n0, d0, _ := ms[0].fsm.state()
			for _, m := range ms[1:] {
				if n, d, _ := m.fsm.state(); n != n0 || d != d0 {
					return false
				}
			}
			return n0 == perGroup
		})
		// Commands of other groups never leak in.
		ms[0].fsm.mu.Lock()
		for _, d := range ms[0].fsm.data {
			if !bytes.HasPrefix(d, []byte(fmt.Sprintf("group %d ", g))) {
				t.Errorf("group %d applied %q", g, d)
			}
		}
		ms[0].fsm.mu.Unlock()
	}
	var pipelined int64
	for _, h := range hosts {
		pipelined += h.mux.pipelined.Load()
	}
	if pipelined == 0 {
		t.Errorf("no AppendEntries went through a pipeline stream")
	}
	t.Logf("%d AppendEntries requests arrived over pipeline streams", pipelined)
}

// TestSnapshotInstall adds a replica after the leader has compacted its log:
// the new replica can only catch up through InstallSnapshot over the Mux,
// streamed in many chunks.
func TestSnapshotInstall(t *testing.T) {
	hosts := []*host{startHost(t), startHost(t), startHost(t), startHost(t)}
	const group = 3
	var servers []raft.Server
	for i, h := range hosts[:3] {
		servers = append(servers, raft.Server{ID: raft.ServerID(fmt.Sprintf("n%d", i)), Address: h.addr})
	}
	var ms []*member
	for i, h := range hosts[:3] {
		var boot []raft.Server
		if i == 0 {
			boot = servers
		}
		ms = append(ms, startMember(t, h, group, servers[i].ID, boot))
	}
	leader := leaderOf(t, ms)
	payload := bytes.Repeat([]byte("x"), 200)
	for i := 0; i < 200; i++ {
		if err := leader.r.Apply(append([]byte(fmt.Sprintf("%d:", i)), payload...), 5*time.Second).Error(); err != nil {
			t.Fatal(err)
		}
	}
	if err := leader.r.Snapshot().Error(); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	if idx, err := snapshotIndex(leader); err != nil || idx == 0 {
		t.Fatalf("leader has no snapshot: index %d, %v", idx, err)
	}

	late := startMember(t, hosts[3], group, "n3", nil)
	if err := leader.r.AddVoter("n3", hosts[3].addr, 0, 5*time.Second).Error(); err != nil {
		t.Fatalf("add voter: %v", err)
	}
	for i := 200; i < 210; i++ {
		if err := leader.r.Apply([]byte(fmt.Sprintf("%d:", i)), 5*time.Second).Error(); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the late replica to catch up", 20*time.Second, func() bool {
		n, d, _ := late.fsm.state()
		n0, d0, _ := leader.fsm.state()
		return n == 210 && n == n0 && d == d0
	})
	if _, _, restores := late.fsm.state(); restores == 0 {
		t.Errorf("late replica caught up without a snapshot restore")
	}
	if n := hosts[3].mux.snapshotChunks.Load(); n < 10 {
		t.Errorf("snapshot arrived in %d chunks, want many", n)
	}
}

func snapshotIndex(m *member) (uint64, error) {
	var idx uint64
	_, err := fmt.Sscan(m.r.Stats()["last_snapshot_index"], &idx)
	return idx, err
}

// TestUnknownGroup checks that an RPC for a group the peer does not run
// fails instead of hanging.
func TestUnknownGroup(t *testing.T) {
	a, b := startHost(t), startHost(t)
	tr := a.mux.Transport(1, a.addr)
	defer tr.Close()
	var resp raft.RequestVoteResponse
	err := tr.RequestVote("x", b.addr, &raft.RequestVoteRequest{Term: 1}, &resp)
	if err == nil {
		t.Fatal("RequestVote to a host without the group succeeded")
	}
	t.Logf("error as expected: %v", err)
}

// heartbeatArgs is what hashicorp/raft sends as a heartbeat.
func heartbeatArgs(term uint64) *raft.AppendEntriesRequest {
	return &raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{ID: []byte("leader"), Addr: []byte("leader-addr")}, Term: term}
}

// answerHeartbeats serves tr's heartbeats with term as the answer and
// counts them.
func answerHeartbeats(tr *Transport, term uint64, n *int) {
	var mu sync.Mutex
	tr.SetHeartbeatHandler(func(rpc raft.RPC) {
		mu.Lock()
		*n++
		mu.Unlock()
		rpc.Respond(&raft.AppendEntriesResponse{Term: term, Success: true}, nil)
	})
}

// TestHeartbeatStream: a leader's heartbeats to one follower share one
// stream; a failure ends it and the next heartbeat opens another.
func TestHeartbeatStream(t *testing.T) {
	a, b := startHost(t), startHost(t)
	leader := a.mux.Transport(1, a.addr)
	defer leader.Close()
	var answered int
	answerHeartbeats(b.mux.Transport(1, b.addr), 7, &answered)

	beat := func() error {
		var resp raft.AppendEntriesResponse
		if err := leader.AppendEntries("f", b.addr, heartbeatArgs(7), &resp); err != nil {
			return err
		}
		if resp.Term != 7 || !resp.Success {
			t.Fatalf("heartbeat answered %+v", resp)
		}
		return nil
	}
	if err := beat(); err != nil {
		t.Fatal(err)
	}
	first := leader.heartbeatStream(b.addr).stream
	for range 20 {
		if err := beat(); err != nil {
			t.Fatal(err)
		}
	}
	if h := leader.heartbeatStream(b.addr); h.stream != first || h.unary {
		t.Fatal("heartbeats did not share one stream")
	}
	if answered != 21 {
		t.Fatalf("%d heartbeats answered, want 21", answered)
	}

	b.mux.Transport(1, b.addr).Close() // the group leaves b: the stream fails
	if err := beat(); err == nil {
		t.Fatal("heartbeat to a host without the group succeeded")
	}
	if h := leader.heartbeatStream(b.addr); h.stream != nil {
		t.Fatal("a failed stream was kept")
	}
	answered = 0
	answerHeartbeats(b.mux.Transport(1, b.addr), 7, &answered)
	if err := beat(); err != nil {
		t.Fatalf("heartbeat after the group came back: %v", err)
	}
	if answered != 1 {
		t.Fatalf("%d heartbeats answered after the group came back, want 1", answered)
	}
}

// withoutHeartbeats is a Raft service of a version before heartbeat
// streams.
type withoutHeartbeats struct{ raftpb.RaftServer }

func (withoutHeartbeats) Heartbeats(grpc.BidiStreamingServer[raftpb.AppendEntriesRequest, raftpb.AppendEntriesResponse]) error {
	return status.Error(codes.Unimplemented, "method Heartbeats not implemented")
}

// TestHeartbeatsToOlderFollower: a follower without heartbeat streams gets
// its heartbeats as unary calls.
func TestHeartbeatsToOlderFollower(t *testing.T) {
	a := startHost(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(ServerOptions(nil)...)
	raftpb.RegisterRaftServer(srv, withoutHeartbeats{&server{m: m}})
	go srv.Serve(lis)
	t.Cleanup(func() { srv.Stop(); m.Close() })
	addr := raft.ServerAddress(lis.Addr().String())
	var answered int
	answerHeartbeats(m.Transport(1, addr), 3, &answered)

	leader := a.mux.Transport(1, a.addr)
	defer leader.Close()
	for range 3 {
		var resp raft.AppendEntriesResponse
		if err := leader.AppendEntries("f", addr, heartbeatArgs(3), &resp); err != nil || resp.Term != 3 {
			t.Fatalf("heartbeat: %+v, %v", resp, err)
		}
	}
	if !leader.heartbeatStream(addr).unary || answered != 3 {
		t.Fatalf("unary %v, %d answered", leader.heartbeatStream(addr).unary, answered)
	}
}

// TestWithholdVotes: a replica that withholds its vote asks for none,
// takes no leadership transfer, and refuses candidates whose log does not
// go past the term it names; raft sees the others.
func TestWithholdVotes(t *testing.T) {
	a, b := startHost(t), startHost(t)
	ta, tb := a.mux.Transport(1, a.addr), b.mux.Transport(1, b.addr)
	defer ta.Close()
	defer tb.Close()
	withhold := func(b Ballot) error {
		if b.Self || b.LastLogTerm <= 5 {
			return errors.New("caught up only past term 5")
		}
		return nil
	}
	tb.WithholdVotes(withhold)
	go func() {
		for rpc := range tb.Consumer() {
			rpc.Respond(&raft.RequestVoteResponse{Term: 7, Granted: true}, nil)
		}
	}()
	vote := func(lastLogTerm uint64) error {
		var resp raft.RequestVoteResponse
		req := &raft.RequestVoteRequest{RPCHeader: raft.RPCHeader{ID: []byte("a"), Addr: []byte(a.addr)}, Term: 7, LastLogTerm: lastLogTerm}
		return ta.RequestVote("b", b.addr, req, &resp)
	}
	refused := func(err error) bool { return err != nil && strings.Contains(err.Error(), "caught up only past term 5") }
	if err := vote(5); !refused(err) {
		t.Fatalf("vote for a candidate at term 5: %v, want it refused", err)
	}
	if err := vote(6); err != nil {
		t.Fatalf("vote for a candidate at term 6: %v", err)
	}
	var resp raft.RequestVoteResponse
	if err := tb.RequestVote("a", a.addr, &raft.RequestVoteRequest{Term: 7}, &resp); !refused(err) {
		t.Fatalf("the withholding replica asked for a vote: %v", err)
	}
	var tresp raft.TimeoutNowResponse
	if err := ta.TimeoutNow("b", b.addr, &raft.TimeoutNowRequest{RPCHeader: raft.RPCHeader{ID: []byte("a"), Addr: []byte(a.addr)}}, &tresp); !refused(err) {
		t.Fatalf("leadership transfer to the withholding replica: %v, want it refused", err)
	}
	tb.WithholdVotes(func(Ballot) error { return nil })
	if err := vote(5); err != nil {
		t.Fatalf("vote after withholding ended: %v", err)
	}
}
