package routing

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quorumbus/quorumbus/frontend"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// fakeNode is a PartitionService that answers sends as a leader, as a
// follower (with a hint) or as a node that is going away.
type fakeNode struct {
	partitionpb.UnimplementedPartitionServiceServer
	hint        string // not the leader: point here
	noLeader    bool   // not the leader, and knows none
	unavailable bool
	full        bool   // the node's disk is full (node.ErrNoSpace)
	notFound    int    // answer this many sends with not-found first
	onSend      func() // called after each send is recorded and answered

	mu    sync.Mutex
	sends []*partitionpb.SendRequest
}

func (f *fakeNode) Send(_ context.Context, req *partitionpb.SendRequest) (*partitionpb.SendResponse, error) {
	f.mu.Lock()
	f.sends = append(f.sends, req)
	f.mu.Unlock()
	notFound := f.notFound > 0
	f.notFound--
	if f.onSend != nil {
		defer f.onSend()
	}
	switch {
	case notFound:
		return nil, status.Error(codes.NotFound, "entity not found")
	case f.unavailable:
		return nil, status.Error(codes.Unavailable, "shutting down")
	case f.full:
		return nil, status.Error(codes.ResourceExhausted, "node: no space left on the data directory's disk: 0 bytes free")
	case f.hint != "" || f.noLeader:
		st, err := status.New(codes.FailedPrecondition, "not the leader").WithDetails(&partitionpb.LeaderHint{LeaderId: f.hint})
		if err != nil {
			panic(err)
		}
		return nil, st.Err()
	}
	return &partitionpb.SendResponse{Result: &partitionpb.Result{SequenceNumbers: []uint64{uint64(len(req.Messages))}}}, nil
}

// localRouter returns a router whose nodes, named in replica order, all
// run in this process, and the entity "q" (partition group 7, whose
// leader the routing table says is leader).
func localRouter(t *testing.T, leader string, names []string, nodes ...partitionpb.PartitionServiceServer) (*Router, *placementpb.Entity) {
	t.Helper()
	local := map[string]partitionpb.PartitionServiceServer{}
	table := &placementpb.RoutingTable{
		Version:  1,
		Entities: []*placementpb.Entity{{Id: 9, Name: "q", PartitionGroups: []uint64{7}}},
		Groups:   []*placementpb.Group{{Id: 7, LeaderId: leader}},
	}
	for i, name := range names {
		local[name] = nodes[i]
		table.Groups[0].Replicas = append(table.Groups[0].Replicas, &placementpb.Replica{NodeId: name})
		// Over gRPC every attempt would fail: the address leads nowhere.
		table.Nodes = append(table.Nodes, &placementpb.Node{Id: name, GrpcAddr: "127.0.0.1:1"})
	}
	r, err := New(Config{Placement: []string{"127.0.0.1:1"}, Local: local})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	r.install(table)
	e, err := r.Entity("q")
	if err != nil {
		t.Fatal(err)
	}
	return r, e
}

// TestLocalNodes: nodes in the process are called directly (their gRPC
// addresses lead nowhere), leader hints and failures move the call on as
// over gRPC, and every attempt carries the same request id.
func TestLocalNodes(t *testing.T) {
	a := &fakeNode{unavailable: true}
	b := &fakeNode{hint: "c"}
	c := &fakeNode{}
	r, e := localRouter(t, "a", []string{"a", "b", "c"}, a, b, c)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	msgs := []*partitionpb.NewMessage{{MessageId: "1"}, {MessageId: "2"}}
	res, err := r.Send(ctx, e, 0, msgs)
	if err != nil {
		t.Fatal(err)
	}
	if got := res.GetSequenceNumbers(); len(got) != 1 || got[0] != 2 {
		t.Fatalf("result %v, want the leader's answer", got)
	}
	var all []*partitionpb.SendRequest
	for _, n := range []*fakeNode{a, b, c} {
		if len(n.sends) == 0 {
			t.Fatalf("a node was skipped: sends %d, %d, %d", len(a.sends), len(b.sends), len(c.sends))
		}
		all = append(all, n.sends...)
	}
	for _, req := range all {
		if req.GroupId != 7 || req.EntityId != 9 || len(req.RequestId) != 16 || !bytes.Equal(req.RequestId, all[0].RequestId) {
			t.Fatalf("attempt group %d entity %d request id %x, want group 7, entity 9 and one 16-byte id for all", req.GroupId, req.EntityId, req.RequestId)
		}
	}
	// The leader that answered is remembered: the next send goes there first.
	if _, err := r.Send(ctx, e, 0, msgs); err != nil {
		t.Fatal(err)
	}
	if len(c.sends) != 2 || len(a.sends) != 1 {
		t.Fatalf("second send: a %d, c %d attempts; want it straight to c", len(a.sends), len(c.sends))
	}
}

// TestNotFoundWhileNamed: a partition that does not know an entity the
// routing table names (its configuration is still on the way) is asked
// again; once the table drops the entity, not-found is the answer.
func TestNotFoundWhileNamed(t *testing.T) {
	n := &fakeNode{notFound: 3}
	r, err := New(Config{
		Placement: []string{"127.0.0.1:1"},
		Local:     map[string]partitionpb.PartitionServiceServer{"a": n},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	table := &placementpb.RoutingTable{
		Version:  1,
		Entities: []*placementpb.Entity{{Id: 9, Name: "q", PartitionGroups: []uint64{7}}},
		Groups:   []*placementpb.Group{{Id: 7, LeaderId: "a", Replicas: []*placementpb.Replica{{NodeId: "a"}}}},
		Nodes:    []*placementpb.Node{{Id: "a", GrpcAddr: "127.0.0.1:1"}},
	}
	r.install(table)
	e, err := r.Entity("q")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := r.Send(ctx, e, 0, []*partitionpb.NewMessage{{MessageId: "1"}}); err != nil {
		t.Fatalf("send while the partition catches up: %v", err)
	}
	if len(n.sends) != 4 {
		t.Fatalf("%d attempts, want 4", len(n.sends))
	}
	// Deleted: the next table does not name it.
	r.install(&placementpb.RoutingTable{Version: 2, Groups: table.Groups, Nodes: table.Nodes})
	n.notFound = 1
	_, err = r.Send(ctx, e, 0, []*partitionpb.NewMessage{{MessageId: "2"}})
	if !errors.Is(err, frontend.ErrEntityNotFound) {
		t.Fatalf("send to a deleted entity: %v, want not found", err)
	}
}

// TestSilentNodePassedOver: after a node gave no answer, the next attempt
// goes elsewhere even where the routing table (still naming it the
// leader) and the turn of the replicas would pick it again. A leader that
// is paused or cut off otherwise costs one attempt timeout per pick.
func TestSilentNodePassedOver(t *testing.T) {
	a, b, c := &fakeNode{hint: "c"}, &fakeNode{unavailable: true}, &fakeNode{}
	r, e := localRouter(t, "b", []string{"a", "b", "c"}, a, b, c)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := r.Send(ctx, e, 0, []*partitionpb.NewMessage{{MessageId: "1"}}); err != nil {
		t.Fatal(err)
	}
	if len(b.sends) != 1 || len(c.sends) != 1 {
		t.Fatalf("attempts: a %d, b %d, c %d; want b once, then c", len(a.sends), len(b.sends), len(c.sends))
	}
}

// TestHintOverridesSilence: a node that gave no answer is tried again when
// another replica names it the leader. A leader that lost its term while a
// large entry was slow to commit often wins the next election; passing it
// over regardless sent every attempt to followers that pointed back at it.
func TestHintOverridesSilence(t *testing.T) {
	a := &fakeNode{unavailable: true}
	b := &fakeNode{hint: "a"}
	r, e := localRouter(t, "a", []string{"a", "b"}, a, b)
	// a fails its first attempt, then leads again.
	a.onSend = func() { a.unavailable = false }
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := r.Send(ctx, e, 0, []*partitionpb.NewMessage{{MessageId: "1"}}); err != nil {
		t.Fatal(err)
	}
	if len(a.sends) != 2 || len(b.sends) != 1 {
		t.Fatalf("attempts: a %d, b %d; want a, b (hint: a), a", len(a.sends), len(b.sends))
	}
}

// TestStorageFull: a node out of disk refuses a send at once, and the
// router says so (ErrStorageFull) rather than trying other replicas until
// the deadline.
func TestStorageFull(t *testing.T) {
	a := &fakeNode{full: true}
	r, e := localRouter(t, "a", []string{"a"}, a)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := r.Send(ctx, e, 0, []*partitionpb.NewMessage{{MessageId: "1"}})
	if !errors.Is(err, frontend.ErrStorageFull) {
		t.Fatalf("send to a full node: %v, want ErrStorageFull", err)
	}
	if len(a.sends) != 1 {
		t.Errorf("%d attempts, want 1", len(a.sends))
	}
}
