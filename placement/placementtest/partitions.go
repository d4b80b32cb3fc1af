package placementtest

import (
	"context"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// Call is one PartitionService call a storage node accepted.
type Call struct {
	Node      string // the node that served it
	Op        string // "upsert" or "delete"
	Group     uint64
	EntityID  uint64
	Partition uint32
	Config    *partitionpb.EntityConfig // upsert only
	Version   uint64                    // delete only: the delete's catalog version
}

// Partitions fakes the PartitionService of every storage node of a
// cluster: it records the entity partitions placement configures, per
// group. By default any node answers for any group; SetLeader makes the
// others answer FAILED_PRECONDITION with a LeaderHint, as real nodes do,
// and SetAvailable(false) makes every node answer UNAVAILABLE.
type Partitions struct {
	mu          sync.Mutex
	calls       []Call
	refused     map[Call]int // calls answered "not the leader", Config left out
	configs     map[partKey]*partitionpb.EntityConfig
	leaders     map[uint64]string // group -> node id
	addrs       map[string]string // node id -> gRPC address, for hints
	unavailable bool
}

type partKey struct {
	group, entity uint64
	partition     uint32
}

// NewPartitions returns a fake with no entity partitions.
func NewPartitions() *Partitions {
	return &Partitions{
		refused: map[Call]int{},
		configs: map[partKey]*partitionpb.EntityConfig{},
		leaders: map[uint64]string{},
		addrs:   map[string]string{},
	}
}

// Server returns the PartitionService of one node, to register on its gRPC
// server.
func (p *Partitions) Server(nodeID, addr string) partitionpb.PartitionServiceServer {
	p.mu.Lock()
	p.addrs[nodeID] = addr
	p.mu.Unlock()
	return &fakeNode{p: p, id: nodeID}
}

// SetLeader makes only nodeID answer for group.
func (p *Partitions) SetLeader(group uint64, nodeID string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.leaders[group] = nodeID
}

// SetAvailable switches every node between answering and UNAVAILABLE.
func (p *Partitions) SetAvailable(ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.unavailable = !ok
}

// Calls returns the accepted calls in order.
func (p *Partitions) Calls() []Call {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]Call, len(p.calls))
	copy(out, p.calls)
	return out
}

// Refused counts, per call (Node and Config left out), the answers "not
// the group's leader" it got.
func (p *Partitions) Refused() map[Call]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[Call]int, len(p.refused))
	for k, v := range p.refused {
		out[k] = v
	}
	return out
}

// Config returns the config a group holds for an entity partition.
func (p *Partitions) Config(group, entityID uint64, partition uint32) (*partitionpb.EntityConfig, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c, ok := p.configs[partKey{group, entityID, partition}]
	if !ok {
		return nil, false
	}
	return proto.Clone(c).(*partitionpb.EntityConfig), true
}

// Len is the number of entity partitions held over all groups.
func (p *Partitions) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.configs)
}

// check decides whether node may serve a call: nil, or the status to answer.
func (p *Partitions) check(node string, call Call) error {
	if p.unavailable {
		return status.Error(codes.Unavailable, "fake: partition groups unavailable")
	}
	group := call.Group
	leader, pinned := p.leaders[group]
	if !pinned || leader == node {
		return nil
	}
	p.refused[call]++
	st, err := status.New(codes.FailedPrecondition, "fake: not the group's leader").
		WithDetails(&partitionpb.LeaderHint{GroupId: group, LeaderId: leader, LeaderAddr: p.addrs[leader]})
	if err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	return st.Err()
}

type fakeNode struct {
	partitionpb.UnimplementedPartitionServiceServer
	p  *Partitions
	id string
}

func (n *fakeNode) UpsertEntity(_ context.Context, req *partitionpb.UpsertEntityRequest) (*partitionpb.UpsertEntityResponse, error) {
	p := n.p
	p.mu.Lock()
	defer p.mu.Unlock()
	c := req.GetConfig()
	if c == nil {
		return nil, status.Error(codes.InvalidArgument, "fake: no config")
	}
	if err := p.check(n.id, Call{Op: "upsert", Group: req.GroupId, EntityID: c.EntityId, Partition: c.Partition}); err != nil {
		return nil, err
	}
	p.configs[partKey{req.GroupId, c.EntityId, c.Partition}] = proto.Clone(c).(*partitionpb.EntityConfig)
	p.calls = append(p.calls, Call{Node: n.id, Op: "upsert", Group: req.GroupId, EntityID: c.EntityId,
		Partition: c.Partition, Config: proto.Clone(c).(*partitionpb.EntityConfig)})
	return &partitionpb.UpsertEntityResponse{}, nil
}

func (n *fakeNode) DeleteEntity(_ context.Context, req *partitionpb.DeleteEntityRequest) (*partitionpb.DeleteEntityResponse, error) {
	p := n.p
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.check(n.id, Call{Op: "delete", Group: req.GroupId, EntityID: req.EntityId, Partition: req.Partition}); err != nil {
		return nil, err
	}
	k := partKey{req.GroupId, req.EntityId, req.Partition}
	if _, ok := p.configs[k]; !ok {
		return nil, status.Error(codes.NotFound, "fake: no such entity partition")
	}
	delete(p.configs, k)
	p.calls = append(p.calls, Call{Node: n.id, Op: "delete", Group: req.GroupId, EntityID: req.EntityId, Partition: req.Partition, Version: req.Version})
	return &partitionpb.DeleteEntityResponse{}, nil
}

// Membership returns a GroupMembership service of one node that lets
// every replica move at once: each node answers as every group's leader,
// with nothing to catch up on, and accepts every change. Cluster registers
// it with Options.Moves. Its groups report what a real group's replicas
// do while no entity uses it: a log of configurations and no-ops, of
// which the state machine, which sees only commands, has applied none.
func (p *Partitions) Membership(nodeID string) partitionpb.GroupMembershipServer {
	return &fakeMembership{id: nodeID}
}

type fakeMembership struct {
	partitionpb.UnimplementedGroupMembershipServer
	id string
}

func (m *fakeMembership) GroupStatus(context.Context, *partitionpb.GroupStatusRequest) (*partitionpb.GroupStatusResponse, error) {
	return &partitionpb.GroupStatusResponse{State: "Leader", LeaderId: m.id, CommitIndex: 3, LastIndex: 3, AppliedIndex: 0}, nil
}

func (m *fakeMembership) ChangeReplica(context.Context, *partitionpb.ChangeReplicaRequest) (*partitionpb.ChangeReplicaResponse, error) {
	return &partitionpb.ChangeReplicaResponse{}, nil
}
