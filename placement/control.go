package placement

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quorumbus/quorumbus/placement/catalog"
	"github.com/quorumbus/quorumbus/placement/membership"
	"github.com/quorumbus/quorumbus/proto/groupcall"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
	pb "github.com/quorumbus/quorumbus/proto/placementpb"
)

const (
	rpcTimeout     = 5 * time.Second
	maxTaskBackoff = 2 * time.Second
	maxTaskRPCs    = 32 // partition RPCs in flight at once
)

// lead is the meta leader's control loop. It runs until ctx ends (the
// member lost leadership or is closing). Each round it brings the catalog's
// nodes in line with the live storage members, creates the partition groups
// still missing, and starts work on every pending partition task. A round
// runs when the catalog or the member list changes, when a task finishes,
// and every ControlInterval.
//
// Everything it does is recorded in the catalog before or after it is
// done, so a new leader picks up where this one stopped: tasks are removed
// only once their RPC succeeded, and a repeated RPC is harmless.
func (s *Service) lead(ctx context.Context) {
	r := s.raft.Load()
	s.log.Info("leading the meta group")
	defer s.log.Info("no longer leading the meta group")
	// Apply everything earlier leaders committed before acting on the catalog.
	if err := s.await(ctx, r.Barrier(0)); err != nil {
		s.log.Warn("barrier failed", "err", err)
		return
	}
	s.health.reset(time.Now())
	tasks := &taskRunner{s: s, running: map[taskKey]bool{}, done: make(chan taskDone, maxTaskRPCs), sem: make(chan struct{}, maxTaskRPCs)}
	defer tasks.wg.Wait()
	moves := newMoveRunner(s)
	defer moves.wg.Wait()
	leaders := &leaderBalance{since: time.Now()}
	defer leaders.running.Wait()
	tick := time.NewTicker(s.cfg.ControlInterval)
	defer tick.Stop()
	for {
		catalogChanged := s.fsm.Changed()
		var membersChanged <-chan struct{}
		if n, ok := s.cfg.Members.(changeNotifier); ok {
			membersChanged = n.Changed()
		}
		s.syncNodes(ctx)
		s.tendMetaVoters(ctx)
		s.addGroups(ctx)
		s.markSilentGroups(ctx)
		s.planMoves(ctx)
		moves.startRunning(ctx)
		if s.cfg.LeaderBalanceDelay >= 0 {
			s.balanceLeaders(ctx, leaders)
		}
		tasks.startPending(ctx)
		select {
		case <-ctx.Done():
			return
		case <-catalogChanged:
		case <-membersChanged:
		case <-tick.C:
		case d := <-tasks.done:
			tasks.finish(ctx, d)
		}
	}
}

// syncNodes registers the live storage members as alive nodes and marks
// the catalog's other nodes not alive.
func (s *Service) syncNodes(ctx context.Context) {
	want := map[string]*pb.Node{}
	for _, m := range s.cfg.Members.Members() {
		if m.Role == membership.RoleStorage {
			want[m.NodeID] = &pb.Node{Id: m.NodeID, GrpcAddr: m.GRPCAddr, Zone: m.Zone, Alive: true}
		}
	}
	var current []*pb.Node
	s.fsm.Read(func(st *catalog.State) { current = st.Nodes() })
	var changes []*pb.Node
	for _, n := range current {
		w, live := want[n.Id]
		delete(want, n.Id)
		switch {
		case live && (n.GrpcAddr != w.GrpcAddr || n.Zone != w.Zone || !n.Alive):
			changes = append(changes, w)
		case !live && n.Alive:
			n.Alive = false
			changes = append(changes, n)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(want)) {
		changes = append(changes, want[id])
	}
	if len(changes) == 0 {
		return
	}
	cmd := &pb.CatalogCommand{Op: &pb.CatalogCommand_RegisterNodes{RegisterNodes: &pb.RegisterNodes{Nodes: changes}}}
	if _, err := s.propose(ctx, cmd); err != nil {
		s.log.Warn("registering nodes", "err", err)
		return
	}
	for _, n := range changes {
		s.log.Info("storage node", "id", n.Id, "addr", n.GrpcAddr, "zone", n.Zone, "alive", n.Alive)
	}
}

// addGroups creates the partition groups the cluster lacks (groups.go):
// those of Config.Groups once enough nodes are alive, and as nodes join,
// those the widest entity wants.
func (s *Service) addGroups(ctx context.Context) {
	if _, err := s.growGroups(ctx, 0); err != nil {
		s.log.Warn("creating partition groups", "err", err)
	}
}

// ---------------------------------------------------------------------------
// Partition tasks

type taskKey struct {
	entity    uint64
	partition uint32
}

type taskDone struct {
	key  taskKey
	task *pb.PartitionTask // carried out; nil if there was nothing left to do
}

// taskRunner carries out partition tasks, one goroutine per entity
// partition with work, each retrying until it succeeds or leadership ends.
// running and finish belong to the control loop's goroutine.
type taskRunner struct {
	s       *Service
	running map[taskKey]bool
	done    chan taskDone
	sem     chan struct{}
	wg      sync.WaitGroup
}

func (t *taskRunner) startPending(ctx context.Context) {
	var pending []*pb.PartitionTask
	t.s.fsm.Read(func(st *catalog.State) { pending = st.Tasks() })
	for _, task := range pending {
		k := taskKey{task.EntityId, task.Partition}
		if t.running[k] {
			continue
		}
		t.running[k] = true
		t.wg.Add(1)
		go func() {
			defer t.wg.Done()
			d := t.run(ctx, k)
			select {
			case t.done <- d:
			case <-ctx.Done():
			}
		}()
	}
}

// finish records finished tasks in the catalog, d and whatever else
// finished meanwhile in one command.
func (t *taskRunner) finish(ctx context.Context, d taskDone) {
	var carried []*pb.PartitionTask
	for more := true; more; {
		delete(t.running, d.key)
		if d.task != nil {
			carried = append(carried, d.task)
		}
		select {
		case d = <-t.done:
		default:
			more = false
		}
	}
	if len(carried) == 0 {
		return
	}
	cmd := &pb.CatalogCommand{Op: &pb.CatalogCommand_CompleteTasks{CompleteTasks: &pb.CompleteTasks{Tasks: carried}}}
	if _, err := t.s.propose(ctx, cmd); err != nil {
		// The tasks stay in the catalog and run again; repeating them is harmless.
		t.s.log.Warn("recording finished partition tasks", "err", err)
	}
}

// run carries out the current task of one entity partition, reading it
// afresh before every attempt, so an update or delete that replaced it is
// what gets done.
func (t *taskRunner) run(ctx context.Context, k taskKey) taskDone {
	backoff := 50 * time.Millisecond
	for attempt := 1; ; attempt++ {
		var task *pb.PartitionTask
		var entity *pb.Entity
		var group *pb.Group
		t.s.fsm.Read(func(st *catalog.State) {
			if task = st.Task(k.entity, k.partition); task != nil {
				entity, group = st.EntityByID(task.EntityId), st.Group(task.GroupId)
			}
		})
		if task == nil {
			return taskDone{key: k}
		}
		select {
		case t.sem <- struct{}{}:
		case <-ctx.Done():
			return taskDone{key: k}
		}
		err := t.s.execute(ctx, task, entity, group)
		<-t.sem
		if err == nil {
			return taskDone{key: k, task: task}
		}
		if ctx.Err() != nil {
			return taskDone{key: k}
		}
		level := t.s.log.Debug
		if attempt%20 == 0 {
			level = t.s.log.Warn
		}
		level("partition task failed; retrying", "entity", task.EntityId, "partition", task.Partition,
			"group", task.GroupId, "kind", task.Kind, "attempt", attempt, "err", err)
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return taskDone{key: k}
		}
		backoff = min(2*backoff, maxTaskBackoff)
	}
}

var errNoGroup = errors.New("placement: task names a group the catalog does not have")

// execute carries out one task with one call on the group's leader.
func (s *Service) execute(ctx context.Context, task *pb.PartitionTask, entity *pb.Entity, group *pb.Group) error {
	if group == nil {
		return errNoGroup
	}
	switch task.Kind {
	case pb.TaskKind_TASK_KIND_UPSERT:
		if entity == nil {
			return catalog.ErrNotFound // cannot happen: a delete replaces the task
		}
		cfg := catalog.PartitionConfig(entity, task.Partition)
		cfg.Version = task.Version // the group ignores an older upsert arriving late
		s.fsm.Read(func(st *catalog.State) { cfg.TopicId = st.TopicID(entity) })
		req := &partitionpb.UpsertEntityRequest{GroupId: group.Id, Config: cfg}
		return s.callGroup(ctx, group, func(ctx context.Context, c partitionpb.PartitionServiceClient) error {
			_, err := c.UpsertEntity(ctx, req)
			return err
		})
	case pb.TaskKind_TASK_KIND_DELETE:
		// Versioned: the group keeps a tombstone, so that an upsert of this
		// entity still on its way from a former catalog leader cannot
		// re-create it.
		req := &partitionpb.DeleteEntityRequest{GroupId: group.Id, EntityId: task.EntityId, Partition: task.Partition, Version: task.Version}
		err := s.callGroup(ctx, group, func(ctx context.Context, c partitionpb.PartitionServiceClient) error {
			_, err := c.DeleteEntity(ctx, req)
			return err
		})
		if status.Code(err) == codes.NotFound {
			return nil // the group's leader has no such partition: nothing to delete
		}
		return err
	default:
		return errors.New("placement: unknown task kind " + task.Kind.String())
	}
}

// callGroup makes one call on a partition group's leader
// (Service.partitionCalls): it starts with the node that answered as
// leader last time (or the leader the group reported), follows LeaderHints
// in FAILED_PRECONDITION answers, and falls back to the replicas in turn,
// each tried once. Other errors end the attempt.
func (s *Service) callGroup(ctx context.Context, g *pb.Group, call func(context.Context, partitionpb.PartitionServiceClient) error) error {
	return callLeader(ctx, s.partitionCalls, g, call)
}

// callLeader is callGroup for any service a storage node serves per
// group, through its caller. It returns ctx's error when the context
// ended, and the last attempt's error when every replica was tried: the
// control loop retries the task, reading it afresh.
func callLeader[C any](ctx context.Context, calls *groupcall.Caller[C], g *pb.Group, call func(context.Context, C) error) error {
	err := calls.Call(ctx, g.Id, groupcall.CallOptions{}, call)
	var gaveUp *groupcall.GaveUp
	if errors.As(err, &gaveUp) {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return gaveUp.Last
	}
	return err
}

// groupCallConfig is the groupcall configuration of the callers that
// reach partition groups' leaders (Service.partitionCalls and
// membershipCalls): the catalog's view of each group, one round over its
// replicas per call, and one record of leaders for both.
func groupCallConfig[C any](s *Service, dial func(addr string) (C, error)) groupcall.Config[C] {
	return groupcall.Config[C]{
		Group: func(id uint64) *pb.Group {
			var g *pb.Group
			s.fsm.Read(func(st *catalog.State) { g = st.Group(id) })
			return g
		},
		Addr:           s.grpcAddr,
		Dial:           func(_, addr string) (C, error) { return dial(addr) },
		AttemptTimeout: func(string) time.Duration { return rpcTimeout },
		OneRound:       true,
		Leaders:        s.leaders,
	}
}
