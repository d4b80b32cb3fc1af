package placement

import (
	"time"

	"context"
	"errors"
	"fmt"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/quorumbus/quorumbus/placement/catalog"
	"github.com/quorumbus/quorumbus/placement/planner"
	pb "github.com/quorumbus/quorumbus/proto/placementpb"
)

// forwardedKey marks a request one member forwarded to the leader, so a
// member that is not the leader after all answers instead of forwarding
// again.
const forwardedKey = "x-quorumbus-placement-forwarded"

// forward lets a member that does not lead the meta group pass a request on
// to the leader: one hop, with the caller's deadline. handled is false on
// the leader, which serves the request itself. When the leader or its
// address is unknown, or the request was forwarded already, the answer is
// FAILED_PRECONDITION with a MetaLeaderHint (UNAVAILABLE while no leader is
// known).
func forward[Req, Resp any](ctx context.Context, s *Service, req Req,
	call func(pb.PlacementServiceClient, context.Context, Req, ...grpc.CallOption) (Resp, error),
) (resp Resp, handled bool, err error) {
	r := s.raft.Load()
	if r == nil || s.ctx.Err() != nil {
		return resp, true, toStatus(ErrNotRunning)
	}
	if r.State() == raft.Leader {
		return resp, false, nil
	}
	hint := s.leaderHint()
	if hint.LeaderAddr == "" || forwarded(ctx) {
		return resp, true, notLeaderStatus(hint)
	}
	client, err := s.dial.placement(hint.LeaderAddr)
	if err != nil {
		return resp, true, status.Errorf(codes.Unavailable, "placement: reaching the meta leader %s at %s: %v", hint.LeaderId, hint.LeaderAddr, err)
	}
	ctx = metadata.AppendToOutgoingContext(ctx, forwardedKey, s.cfg.NodeID)
	resp, err = call(client, ctx, req)
	return resp, true, err
}

func forwarded(ctx context.Context) bool {
	md, _ := metadata.FromIncomingContext(ctx)
	return len(md.Get(forwardedKey)) > 0
}

// leaderHint names the meta leader as this member knows it.
func (s *Service) leaderHint() *pb.MetaLeaderHint {
	r := s.raft.Load()
	if r == nil {
		return &pb.MetaLeaderHint{}
	}
	_, id := r.LeaderWithID()
	hint := &pb.MetaLeaderHint{LeaderId: string(id)}
	if id != "" {
		hint.LeaderAddr = s.grpcAddr(string(id))
	}
	return hint
}

// grpcAddr finds a member's gRPC address: in the live member list, else
// among the catalog's storage nodes.
func (s *Service) grpcAddr(nodeID string) string {
	for _, m := range s.cfg.Members.Members() {
		if m.NodeID == nodeID && m.GRPCAddr != "" {
			return m.GRPCAddr
		}
	}
	var addr string
	s.fsm.Read(func(st *catalog.State) {
		if n := st.Node(nodeID); n != nil {
			addr = n.GrpcAddr
		}
	})
	return addr
}

// status maps an error for a client; "not the leader" gets a hint.
func (s *Service) status(err error) error {
	if errors.Is(err, ErrNotLeader) {
		return notLeaderStatus(s.leaderHint())
	}
	return toStatus(err)
}

// CreateEntity creates an entity, placing its partitions on groups. It
// answers once the creation is committed, after waiting up to
// Config.CreateWait for the partitions to be configured on their groups.
func (s *Service) CreateEntity(ctx context.Context, req *pb.CreateEntityRequest) (*pb.Entity, error) {
	if resp, handled, err := forward(ctx, s, req, pb.PlacementServiceClient.CreateEntity); handled {
		return resp, err
	}
	e, err := s.createEntity(ctx, req)
	if err != nil {
		return nil, s.status(err)
	}
	s.waitConfigured(ctx, e.Id)
	return e, nil
}

func (s *Service) createEntity(ctx context.Context, req *pb.CreateEntityRequest) (*pb.Entity, error) {
	if err := catalog.CheckName(req.Name); err != nil {
		return nil, err
	}
	if err := catalog.CheckKindProperties(req.Kind, req.Properties); err != nil {
		return nil, err
	}
	if req.Kind == pb.EntityKind_ENTITY_KIND_SUBSCRIPTION {
		return s.createSubscription(ctx, req)
	}
	props, err := catalog.Normalize(req.Properties)
	if err != nil {
		return nil, err
	}
	s.createMu.Lock()
	defer s.createMu.Unlock()
	// A partitioned entity wants a group per partition: create those the
	// nodes have room for first, so that it spreads over them.
	if _, err := s.growGroups(ctx, int(props.PartitionCount)); err != nil {
		s.log.Warn("creating partition groups for a new entity; it goes on the groups there are", "entity", req.Name, "err", err)
	}
	var groups []planner.Group
	s.fsm.Read(func(st *catalog.State) {
		for id, n := range st.GroupLoads() {
			groups = append(groups, planner.Group{ID: id, Partitions: n})
		}
	})
	if len(groups) == 0 {
		return nil, ErrNoGroups
	}
	assigned, err := planner.AssignPartitions(groups, int(props.PartitionCount))
	if err != nil {
		return nil, fmt.Errorf("placement: %w", err)
	}
	res, err := s.propose(ctx, &pb.CatalogCommand{Op: &pb.CatalogCommand_CreateEntity{CreateEntity: &pb.CreateEntityCommand{
		Name: req.Name, Kind: req.Kind, Properties: props, Status: req.Status, PartitionGroups: assigned,
		Rules: req.Rules, // the catalog refuses them on anything but a subscription
	}}})
	if err != nil {
		return nil, err
	}
	return res.Entity, nil
}

// waitConfigured waits until no partition of the entity has work pending,
// at most Config.CreateWait.
func (s *Service) waitConfigured(ctx context.Context, id uint64) {
	if s.cfg.CreateWait < 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.CreateWait)
	defer cancel()
	for {
		changed := s.fsm.Changed()
		pending := false
		s.fsm.Read(func(st *catalog.State) { pending = st.HasTasks(id) })
		if !pending {
			return
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return
		case <-s.ctx.Done():
			return
		}
	}
}

// UpdateEntity replaces an entity's properties (when given) and status.
// The properties fixed at creation (sessions, duplicate detection,
// partitioning) may be left unset; setting them differently is an error.
func (s *Service) UpdateEntity(ctx context.Context, req *pb.UpdateEntityRequest) (*pb.Entity, error) {
	if resp, handled, err := forward(ctx, s, req, pb.PlacementServiceClient.UpdateEntity); handled {
		return resp, err
	}
	res, err := s.propose(ctx, &pb.CatalogCommand{Op: &pb.CatalogCommand_UpdateEntity{UpdateEntity: &pb.UpdateEntityCommand{
		Name: req.Name, Properties: req.Properties, Status: req.Status,
	}}})
	if err != nil {
		return nil, s.status(err)
	}
	return res.Entity, nil
}

// DeleteEntity removes an entity from the catalog at once; its partitions
// are deleted from their groups afterwards.
func (s *Service) DeleteEntity(ctx context.Context, req *pb.DeleteEntityRequest) (*pb.DeleteEntityResponse, error) {
	if resp, handled, err := forward(ctx, s, req, pb.PlacementServiceClient.DeleteEntity); handled {
		return resp, err
	}
	_, err := s.propose(ctx, &pb.CatalogCommand{Op: &pb.CatalogCommand_DeleteEntity{DeleteEntity: &pb.DeleteEntityCommand{Name: req.Name}}})
	if err != nil {
		return nil, s.status(err)
	}
	return &pb.DeleteEntityResponse{}, nil
}

// GetEntity reads an entity on the leader, after confirming with a quorum
// that it still leads and once it applied the entries of earlier terms
// (leaderReady), so the answer is never older than an acknowledged change.
func (s *Service) GetEntity(ctx context.Context, req *pb.GetEntityRequest) (*pb.Entity, error) {
	if resp, handled, err := forward(ctx, s, req, pb.PlacementServiceClient.GetEntity); handled {
		return resp, err
	}
	if err := s.verifyLeader(ctx); err != nil {
		return nil, s.status(err)
	}
	if err := s.leaderReady(ctx); err != nil {
		return nil, s.status(err)
	}
	var e *pb.Entity
	s.fsm.Read(func(st *catalog.State) { e = st.Entity(req.Name) })
	if e == nil {
		return nil, toStatus(fmt.Errorf("%w: %q", catalog.ErrNotFound, req.Name))
	}
	return e, nil
}

// ListEntities lists the entities of one kind by name, like GetEntity on
// the leader, or one topic's subscriptions. top 0 means all.
func (s *Service) ListEntities(ctx context.Context, req *pb.ListEntitiesRequest) (*pb.ListEntitiesResponse, error) {
	if (req.Topic != "" || len(req.Topics) > 0) && req.Kind != pb.EntityKind_ENTITY_KIND_SUBSCRIPTION {
		return nil, toStatus(fmt.Errorf("%w: a topic names subscriptions to list, not %v", ErrInvalidRequest, req.Kind))
	}
	if len(req.Topics) > 0 && (req.Topic != "" || req.Skip != 0 || req.Top != 0) {
		return nil, toStatus(fmt.Errorf("%w: topics list whole topics' subscriptions, without topic, skip or top", ErrInvalidRequest))
	}
	if resp, handled, err := forward(ctx, s, req, pb.PlacementServiceClient.ListEntities); handled {
		return resp, err
	}
	if err := s.verifyLeader(ctx); err != nil {
		return nil, s.status(err)
	}
	if err := s.leaderReady(ctx); err != nil {
		return nil, s.status(err)
	}
	resp := &pb.ListEntitiesResponse{}
	found := true
	s.fsm.Read(func(st *catalog.State) {
		if len(req.Topics) > 0 {
			for _, t := range req.Topics {
				subs, _ := st.Subscriptions(t, 0, 0)
				resp.Entities = append(resp.Entities, subs...)
			}
			return
		}
		if req.Topic == "" {
			resp.Entities = st.Entities(req.Kind, int(req.Skip), int(req.Top))
			return
		}
		resp.Entities, found = st.Subscriptions(req.Topic, int(req.Skip), int(req.Top))
	})
	if !found {
		return nil, toStatus(fmt.Errorf("%w: topic %q", catalog.ErrNotFound, req.Topic))
	}
	return resp, nil
}

func (s *Service) verifyLeader(ctx context.Context) error {
	r := s.raft.Load()
	if r == nil {
		return ErrNotRunning
	}
	if err := s.await(ctx, r.VerifyLeader()); err != nil {
		if errors.Is(err, ErrOutcomeUnknown) { // nothing was changed, so nothing is unknown
			return fmt.Errorf("%w: %w", ErrNotLeader, err)
		}
		return err
	}
	return nil
}

// ReportGroups records which node leads which partition groups, and
// whether they have a quorum; a replica's report that it has known no
// leader for long records its group without quorum, unless the group was
// heard serving since (health.go). Reports that match the catalog cost
// nothing.
func (s *Service) ReportGroups(ctx context.Context, req *pb.ReportGroupsRequest) (*pb.ReportGroupsResponse, error) {
	if resp, handled, err := forward(ctx, s, req, pb.PlacementServiceClient.ReportGroups); handled {
		return resp, err
	}
	now := time.Now()
	for _, r := range req.Groups {
		if r.HasQuorum {
			s.health.serving(r.GroupId, now)
		}
	}
	changed := &pb.ReportGroupsRequest{NodeId: req.NodeId}
	s.fsm.Read(func(st *catalog.State) {
		for _, r := range req.Groups {
			g := st.Group(r.GroupId)
			switch {
			case g == nil:
			case r.LeaderId == "" && !r.HasQuorum:
				lost := now.Add(-time.Duration(r.LeaderlessMs) * time.Millisecond)
				if g.HasQuorum && !s.health.servedAfter(g.Id, lost) {
					changed.Groups = append(changed.Groups, &pb.GroupReport{GroupId: g.Id})
				}
			case g.LeaderId != r.LeaderId || g.HasQuorum != r.HasQuorum:
				changed.Groups = append(changed.Groups, r)
			}
		}
	})
	if len(changed.Groups) > 0 {
		if _, err := s.propose(ctx, &pb.CatalogCommand{Op: &pb.CatalogCommand_ReportGroups{ReportGroups: changed}}); err != nil {
			return nil, s.status(err)
		}
	}
	return &pb.ReportGroupsResponse{}, nil
}

// WatchRoutes streams the routing table from this member's own replica of
// the catalog: as soon as the member applied a command (or, with
// after_version, once the table is newer than that), then after every
// change. A slow reader skips intermediate
// tables, never the latest one. With changes, every message after the
// first whole table is what changed since the previous one (routes.go).
// Any member serves it, leader or not, once it caught up (catchup.go);
// until then it answers UNAVAILABLE. A member that heard from no leader
// for long answers UNAVAILABLE too, and ends the streams it serves
// (orphan.go).
func (s *Service) WatchRoutes(req *pb.WatchRoutesRequest, stream grpc.ServerStreamingServer[pb.RoutingTable]) error {
	if s.raft.Load() == nil {
		return toStatus(ErrNotRunning)
	}
	ctx := stream.Context()
	if err := s.waitCaughtUp(ctx); err != nil {
		return toStatus(err)
	}
	orphanCheck := time.NewTicker(time.Second)
	defer orphanCheck.Stop()
	sent, first := req.AfterVersion, req.AfterVersion == 0
	if born := s.fsm.Born(); req.CatalogBornMs != 0 && born != 0 && req.CatalogBornMs != born {
		// The watcher's version counts in another catalog (this one
		// started over since): nothing to wait for, nothing to change
		// from.
		sent, first = 0, true
	}
	for {
		if s.Orphaned() {
			return toStatus(ErrOrphaned)
		}
		changed := s.fsm.Changed()
		if err := s.fsm.Err(); err != nil {
			return toStatus(err)
		}
		// The first whole table too waits for a version above 0: a
		// member that applied no command yet has no table worth
		// sending (no groups), and one sent would leave the watcher at
		// a version no change starts from, so that its next message
		// would be a whole table again.
		if s.fsm.RoutesVersion() > sent {
			msg, version, err := s.nextRoutes(sent, first || !req.Changes)
			if err != nil {
				return toStatus(err)
			}
			if err := stream.SendMsg(msg); err != nil {
				return err
			}
			sent, first = version, false
		}
		select {
		case <-changed:
		case <-orphanCheck.C:
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		case <-s.ctx.Done():
			return toStatus(ErrNotRunning)
		case <-s.fsm.Stopped():
		}
	}
}

// DrainNode marks a storage node draining (its replicas move off it, and
// it takes no new ones) or, with draining false, no longer draining.
func (s *Service) DrainNode(ctx context.Context, req *pb.DrainNodeRequest) (*pb.Node, error) {
	if resp, handled, err := forward(ctx, s, req, pb.PlacementServiceClient.DrainNode); handled {
		return resp, err
	}
	if _, err := s.propose(ctx, &pb.CatalogCommand{Op: &pb.CatalogCommand_DrainNode{DrainNode: req}}); err != nil {
		return nil, s.status(err)
	}
	var n *pb.Node
	s.fsm.Read(func(st *catalog.State) { n = st.Node(req.NodeId) })
	if n == nil {
		return nil, toStatus(fmt.Errorf("%w: %q", catalog.ErrUnknownNode, req.NodeId))
	}
	s.log.Info("storage node drain", "node", req.NodeId, "draining", req.Draining)
	return n, nil
}
