package placement

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/quorumbus/quorumbus/placement/catalog"
	"github.com/quorumbus/quorumbus/placement/planner"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
	pb "github.com/quorumbus/quorumbus/proto/placementpb"
)

// Replica moves.
//
// Each control round the meta leader plans moves (planner.PlanMoves) from
// the catalog's nodes and groups, and records each chosen move in the
// catalog (StartMove): the target is listed as a joined replica, which its
// node opens empty, without bootstrapping. A runner per moving group then
// walks the move through the group's leader (GroupMembership):
//
//  1. add the target as a non-voter; Raft sends it a snapshot and the log;
//  2. wait until the target has applied what the leader had committed once
//     it was added, so that it votes only once it holds the group;
//  3. promote it to a voter (four voters for a moment; a quorum is three);
//  4. remove the replica that leaves; a leader that is leaving hands its
//     leadership over first, and the new leader removes it;
//  5. record the move done (FinishMove): the old replica is no longer
//     listed, and its node deletes the group's data.
//
// Every step is idempotent, and the move is in the catalog from the start,
// so a new meta leader resumes it from step 1. A move whose target dies is
// aborted: the target is removed from the group and from the list.
// Balancing waits while some node that holds replicas is dead but not yet
// gone, so a restart does not set replicas moving (a drained node that
// was stopped holds none), and while any move is under way; drains
// and replacements of gone nodes do not wait.

// moveRunner runs at most one move per group.
type moveRunner struct {
	s       *Service
	mu      sync.Mutex
	running map[uint64]bool
	wg      sync.WaitGroup
}

func newMoveRunner(s *Service) *moveRunner {
	return &moveRunner{s: s, running: map[uint64]bool{}}
}

// planMoves records the moves the planner chooses, within MaxMoves moves
// under way at once.
func (s *Service) planMoves(ctx context.Context) {
	var nodes []*pb.Node
	var groups []*pb.Group
	s.fsm.Read(func(st *catalog.State) { nodes, groups = st.Nodes(), st.Groups() })
	now := time.Now()
	held := map[string]int{}
	for _, g := range groups {
		for _, r := range g.Replicas {
			held[r.NodeId]++
		}
	}
	var members []planner.Member
	transient := false // a node with replicas is dead, not yet gone
	for _, n := range nodes {
		gone := !n.Alive && n.DeadSinceMs != 0 && now.Sub(time.UnixMilli(n.DeadSinceMs)) >= s.cfg.GoneAfter
		if !n.Alive && !gone && held[n.Id] > 0 {
			transient = true
		}
		members = append(members, planner.Member{ID: n.Id, Zone: n.Zone, Alive: n.Alive, Draining: n.Draining, Gone: gone})
	}
	moving := 0
	placed := make([]planner.Placed, 0, len(groups))
	for _, g := range groups {
		p := planner.Placed{ID: g.Id, Moving: g.MovingFrom != ""}
		for _, r := range g.Replicas {
			p.Replicas = append(p.Replicas, r.NodeId)
		}
		if p.Moving {
			moving++
		}
		placed = append(placed, p)
	}
	budget := s.cfg.MaxMoves - moving
	if budget <= 0 {
		return
	}
	// Balance one wave at a time: moves still under way count their
	// source and target both, and planning over them overshoots.
	plan, err := planner.PlanMoves(members, placed, budget, !transient && moving == 0)
	if err != nil {
		s.log.Warn("planning replica moves", "err", err)
		return
	}
	for _, m := range plan {
		cmd := &pb.CatalogCommand{Op: &pb.CatalogCommand_StartMove{StartMove: &pb.StartMove{GroupId: m.Group, From: m.From, To: m.To}}}
		if _, err := s.propose(ctx, cmd); err != nil {
			s.log.Warn("starting a replica move", "move", m.String(), "err", err)
			return
		}
		s.log.Info("replica move started", "group", m.Group, "from", m.From, "to", m.To, "why", m.Why)
	}
}

// startRunning starts a runner for every moving group that has none.
func (r *moveRunner) startRunning(ctx context.Context) {
	var moving []uint64
	r.s.fsm.Read(func(st *catalog.State) {
		for _, g := range st.Groups() {
			if g.MovingFrom != "" {
				moving = append(moving, g.Id)
			}
		}
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, id := range moving {
		if r.running[id] {
			continue
		}
		r.running[id] = true
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			r.s.runMove(ctx, id)
			r.mu.Lock()
			delete(r.running, id)
			r.mu.Unlock()
		}()
	}
}

// runMove carries the group's recorded move through, retrying each step
// with backoff, until it is recorded done or ctx ends.
func (s *Service) runMove(ctx context.Context, groupID uint64) {
	backoff := 100 * time.Millisecond
	for attempt := 1; ctx.Err() == nil; attempt++ {
		done, err := s.moveOnce(ctx, groupID)
		if done {
			return
		}
		level := s.log.Debug
		if attempt%10 == 0 {
			level = s.log.Warn
		}
		level("replica move: retrying", "group", groupID, "attempt", attempt, "err", err)
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
		}
		backoff = min(2*backoff, maxTaskBackoff)
	}
}

// moveOnce tries the whole move once. done: the catalog no longer records
// it (finished, aborted, or never there).
func (s *Service) moveOnce(ctx context.Context, groupID uint64) (done bool, err error) {
	var g *pb.Group
	var target *pb.Node
	s.fsm.Read(func(st *catalog.State) {
		if g = st.Group(groupID); g != nil {
			target = st.Node(g.MovingTo)
		}
	})
	if g == nil || g.MovingFrom == "" {
		return true, nil
	}
	from, to := g.MovingFrom, g.MovingTo
	if target == nil || !target.Alive {
		return s.abortMove(ctx, g)
	}
	change := func(kind partitionpb.ReplicaChange, node, addr string) error {
		req := &partitionpb.ChangeReplicaRequest{GroupId: g.Id, Change: kind, NodeId: node, Addr: addr}
		return callLeader(ctx, s.membershipCalls, g, func(ctx context.Context, c partitionpb.GroupMembershipClient) error {
			_, err := c.ChangeReplica(ctx, req)
			return err
		})
	}
	toAddr := s.grpcAddr(to)
	if err := change(partitionpb.ReplicaChange_REPLICA_CHANGE_ADD_LEARNER, to, toAddr); err != nil {
		return false, fmt.Errorf("adding %s as a learner: %w", to, err)
	}
	commit, applied, err := s.leaderProgress(ctx, g)
	if err != nil {
		return false, fmt.Errorf("reading the leader's commit index: %w", err)
	}
	if err := s.awaitCatchUp(ctx, g.Id, toAddr, commit, applied); err != nil {
		return false, err
	}
	if err := change(partitionpb.ReplicaChange_REPLICA_CHANGE_PROMOTE, to, toAddr); err != nil {
		return false, fmt.Errorf("promoting %s: %w", to, err)
	}
	if err := change(partitionpb.ReplicaChange_REPLICA_CHANGE_REMOVE, from, ""); err != nil {
		return false, fmt.Errorf("removing %s: %w", from, err)
	}
	cmd := &pb.CatalogCommand{Op: &pb.CatalogCommand_FinishMove{FinishMove: &pb.FinishMove{GroupId: g.Id, From: from, To: to}}}
	if _, err := s.propose(ctx, cmd); err != nil {
		return false, fmt.Errorf("recording the move done: %w", err)
	}
	s.log.Info("replica move done", "group", g.Id, "from", from, "to", to)
	return true, nil
}

// awaitCatchUp waits until the replica at addr holds the group's log up
// to commit and its state machine has applied what the leader's had,
// applied. Not until its state machine has applied commit: a state
// machine sees only command entries, and the last entries of a group's
// log may be none (a group no entity uses yet holds only configurations
// and its leaders' no-ops, so its machine's applied index stays 0 on
// every replica, and a move waiting for commit never ended: make scale
// stalled so on two groups created as nodes joined).
func (s *Service) awaitCatchUp(ctx context.Context, group uint64, addr string, commit, applied uint64) error {
	c, err := s.dial.membership(addr)
	if err != nil {
		return err
	}
	for {
		cctx, cancel := context.WithTimeout(ctx, rpcTimeout)
		st, err := c.GroupStatus(cctx, &partitionpb.GroupStatusRequest{GroupId: group})
		cancel()
		if err == nil && st.LastIndex >= commit && st.AppliedIndex >= applied {
			return nil
		}
		select {
		case <-time.After(200 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
		var alive bool
		s.fsm.Read(func(st *catalog.State) {
			g := st.Group(group)
			n := st.Node(g.GetMovingTo())
			alive = n != nil && n.Alive
		})
		if !alive {
			return fmt.Errorf("the target of group %d's move is not alive", group)
		}
	}
}

// abortMove takes the target out of the group and the list.
func (s *Service) abortMove(ctx context.Context, g *pb.Group) (bool, error) {
	req := &partitionpb.ChangeReplicaRequest{GroupId: g.Id, Change: partitionpb.ReplicaChange_REPLICA_CHANGE_REMOVE, NodeId: g.MovingTo}
	err := callLeader(ctx, s.membershipCalls, g, func(ctx context.Context, c partitionpb.GroupMembershipClient) error {
		_, err := c.ChangeReplica(ctx, req)
		return err
	})
	if err != nil {
		return false, fmt.Errorf("aborting the move to %s: %w", g.MovingTo, err)
	}
	cmd := &pb.CatalogCommand{Op: &pb.CatalogCommand_FinishMove{FinishMove: &pb.FinishMove{GroupId: g.Id, From: g.MovingFrom, To: g.MovingTo, Abort: true}}}
	if _, err := s.propose(ctx, cmd); err != nil {
		return false, err
	}
	s.log.Warn("replica move aborted: its target is not alive", "group", g.Id, "from", g.MovingFrom, "to", g.MovingTo)
	return true, nil
}

// leaderBalance hands group leaderships over, one at a time in the whole
// cluster, so that every usable node leads as many groups as the others,
// give or take one (planner.PlanLeaders). It waits while replicas move,
// for LeaderBalanceDelay after this member became meta leader (the groups
// elect their leaders at start-up), and after a transfer until the
// catalog shows its result or transferSettle passes: the catalog's
// leaders come from the groups' reports, a second behind, and planning
// over a stale one would hand over a leadership twice.
type leaderBalance struct {
	since time.Time // this leadership's start
	mu    sync.Mutex
	// leaders is each group's leader as last seen, and changed when one
	// last changed: balancing waits until they have been stable for
	// LeaderBalanceDelay, so that it never acts on an election in
	// progress (a paused or cut-off leader).
	leaders map[uint64]string
	changed time.Time
	busy    bool
	last    planner.Transfer
	lastAt  time.Time
	running sync.WaitGroup
}

const transferSettle = 5 * time.Second

func (s *Service) balanceLeaders(ctx context.Context, lb *leaderBalance) {
	now := time.Now()
	if now.Sub(lb.since) < s.cfg.LeaderBalanceDelay {
		return
	}
	var nodes []*pb.Node
	var groups []*pb.Group
	s.fsm.Read(func(st *catalog.State) { nodes, groups = st.Nodes(), st.Groups() })
	lb.mu.Lock()
	defer lb.mu.Unlock()
	if lb.leaders == nil {
		lb.leaders = map[uint64]string{}
	}
	for _, g := range groups {
		leader := g.LeaderId
		if !g.HasQuorum {
			leader = ""
		}
		if lb.leaders[g.Id] != leader {
			lb.leaders[g.Id], lb.changed = leader, now
		}
	}
	if lb.busy || now.Sub(lb.changed) < s.cfg.LeaderBalanceDelay {
		return
	}
	led := make([]planner.Led, 0, len(groups))
	for _, g := range groups {
		if g.MovingFrom != "" {
			return
		}
		if g.Id == lb.last.Group && g.LeaderId != lb.last.To && now.Sub(lb.lastAt) < transferSettle {
			return
		}
		l := planner.Led{ID: g.Id}
		if g.HasQuorum {
			l.Leader = g.LeaderId
		}
		for _, r := range g.Replicas {
			l.Voters = append(l.Voters, r.NodeId)
		}
		led = append(led, l)
	}
	var members []planner.Member
	for _, n := range nodes {
		members = append(members, planner.Member{ID: n.Id, Zone: n.Zone, Alive: n.Alive, Draining: n.Draining})
	}
	plan := planner.PlanLeaders(members, led, 1)
	if len(plan) == 0 {
		return
	}
	tr := plan[0]
	var g *pb.Group
	for _, x := range groups {
		if x.Id == tr.Group {
			g = x
		}
	}
	lb.busy, lb.last, lb.lastAt = true, tr, now
	lb.running.Add(1)
	go func() {
		defer lb.running.Done()
		// A leader handing over takes no writes until the target has
		// taken over or the transfer timed out: hand over only to a
		// replica that answers at once and has applied the group's log.
		if err := s.readyToLead(ctx, g, tr.To); err != nil {
			s.log.Debug("leadership transfer skipped", "transfer", tr.String(), "err", err)
			lb.mu.Lock()
			lb.busy, lb.lastAt = false, time.Now()
			lb.mu.Unlock()
			return
		}
		req := &partitionpb.ChangeReplicaRequest{GroupId: tr.Group, Change: partitionpb.ReplicaChange_REPLICA_CHANGE_LEAD, NodeId: tr.To, Addr: s.grpcAddr(tr.To)}
		err := callLeader(ctx, s.membershipCalls, g, func(ctx context.Context, c partitionpb.GroupMembershipClient) error {
			_, err := c.ChangeReplica(ctx, req)
			return err
		})
		if err != nil {
			s.log.Debug("leadership transfer", "transfer", tr.String(), "err", err)
		} else {
			s.log.Info("group leadership balanced", "group", tr.Group, "from", tr.From, "to", tr.To)
		}
		lb.mu.Lock()
		lb.busy, lb.lastAt = false, time.Now()
		lb.mu.Unlock()
	}()
}

// readyToLead checks that node's replica of g answers within a second and
// has applied what the group's leader has applied, give or take a
// moment's entries.
func (s *Service) readyToLead(ctx context.Context, g *pb.Group, node string) error {
	_, applied, err := s.leaderProgress(ctx, g)
	if err != nil {
		return err
	}
	c, err := s.dial.membership(s.grpcAddr(node))
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	st, err := c.GroupStatus(cctx, &partitionpb.GroupStatusRequest{GroupId: g.Id})
	if err != nil {
		return fmt.Errorf("%s does not answer: %w", node, err)
	}
	if st.AppliedIndex+maxLeadLag < applied {
		return fmt.Errorf("%s has applied %d of %d", node, st.AppliedIndex, applied)
	}
	return nil
}

// maxLeadLag is how many entries behind the leader's applied index a
// replica may be and still be handed the leadership.
const maxLeadLag = 64

// leaderProgress is the commit index of g's leader and its state
// machine's applied index, as the leader reports them.
func (s *Service) leaderProgress(ctx context.Context, g *pb.Group) (commit, applied uint64, err error) {
	err = callLeader(ctx, s.membershipCalls, g, func(ctx context.Context, c partitionpb.GroupMembershipClient) error {
		st, err := c.GroupStatus(ctx, &partitionpb.GroupStatusRequest{GroupId: g.Id})
		if err == nil && st.State != "Leader" {
			err = fmt.Errorf("%s answered as %s", st.LeaderId, st.State)
		}
		commit, applied = st.GetCommitIndex(), st.GetAppliedIndex()
		return err
	})
	return commit, applied, err
}
