package node

import (
	"context"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// A leader that nobody can reach hands its leadership over.
//
// Raft keeps a leader as long as its followers hear from it, and they hear
// from it over connections the leader opens. A fault that drops what
// others send to the leader's node but not what it sends out (a firewall
// rule, a broken return route for its port: the chaos suite's
// deaf-leader) leaves a leader that replicates and heartbeats happily but
// that no front-end can reach: every client call to its groups fails
// until the fault ends, and no election ever happens.
//
// So every ReachCheck a node that leads groups of three or more voters
// asks each other voter of those groups, over its own connection to it,
// whether that voter reaches this node (CheckReach: the voter calls this
// node over the connection its Raft traffic to this node would use). A
// group whose other voters, a majority of them, said no in deafRounds
// checks in a row gets its leadership handed to its most up-to-date
// follower, at most once per reachCooldown. The followers stand in for
// the clients: what stops them reaching the node stops the clients too,
// and a majority keeps one broken follower from moving leaderships. A
// voter that cannot be asked (the call fails) counts for neither side.

const (
	// DefaultReachCheck is how often a leading node asks (Config.ReachCheck).
	DefaultReachCheck = time.Second
	// deafRounds checks in a row without being reached move a group's
	// leadership: with the default, about three seconds of deafness.
	deafRounds = 3
	// reachCooldown spaces two hand-overs of one group.
	reachCooldown = 10 * time.Second
)

// watchReach runs the checks until the node closes.
func (n *Node) watchReach() {
	every := n.cfg.ReachCheck
	if every < 0 {
		return
	}
	deaf := map[uint64]int{}        // group -> checks in a row a majority did not reach it
	moved := map[uint64]time.Time{} // group -> when its leadership was last handed over
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-n.stopSupervisor:
			return
		case <-tick.C:
		}
		n.checkReach(every, deaf, moved)
	}
}

// ledGroup is a group this node leads, with the other voters' addresses.
type ledGroup struct {
	g      *group
	others []raft.ServerAddress
	me     raft.ServerAddress
}

func (n *Node) checkReach(every time.Duration, deaf map[uint64]int, moved map[uint64]time.Time) {
	var led []ledGroup
	peers := map[raft.ServerAddress]raft.ServerAddress{} // voter -> this node's address in its group
	for _, id := range n.Groups() {
		g, err := n.group(id)
		if err != nil || g.raft.State() != raft.Leader {
			delete(deaf, id)
			continue
		}
		f := g.raft.GetConfiguration()
		if f.Error() != nil {
			continue
		}
		lg := ledGroup{g: g}
		voters := 0
		for _, srv := range f.Configuration().Servers {
			if srv.Suffrage != raft.Voter {
				continue
			}
			voters++
			if string(srv.ID) == n.cfg.ID {
				lg.me = srv.Address
			} else {
				lg.others = append(lg.others, srv.Address)
			}
		}
		if voters < 3 || lg.me == "" {
			delete(deaf, id)
			continue
		}
		for _, o := range lg.others {
			peers[o] = lg.me
		}
		led = append(led, lg)
	}
	if len(led) == 0 {
		return
	}
	// Ask every voter once, in parallel; each call is bounded by the
	// check's period.
	type answer struct{ asked, reached bool }
	answers := map[raft.ServerAddress]answer{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for peer, me := range peers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a := answer{}
			if reached, err := n.askReach(peer, me, every); err == nil {
				a = answer{asked: true, reached: reached}
			}
			mu.Lock()
			answers[peer] = a
			mu.Unlock()
		}()
	}
	wg.Wait()
	for _, lg := range led {
		id := lg.g.id
		unreached := 0
		for _, o := range lg.others {
			if a := answers[o]; a.asked && !a.reached {
				unreached++
			}
		}
		if 2*unreached <= len(lg.others) {
			delete(deaf, id)
			continue
		}
		deaf[id]++
		if deaf[id] < deafRounds || time.Since(moved[id]) < reachCooldown {
			continue
		}
		n.log.Warn("the group's other voters cannot reach this leader; handing its leadership over",
			"group", id, "unreached", unreached, "voters", len(lg.others)+1, "checks", deaf[id])
		moved[id] = time.Now()
		delete(deaf, id)
		go func() {
			if err := lg.g.raft.LeadershipTransfer().Error(); err != nil {
				n.log.Warn("handing over the leadership of a group its voters cannot reach", "group", id, "err", err)
			}
		}()
	}
}

// askReach asks the voter at peer whether it reaches this node at me.
func (n *Node) askReach(peer, me raft.ServerAddress, timeout time.Duration) (bool, error) {
	cc, err := n.mux.Conn(peer)
	if err != nil {
		return false, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	resp, err := partitionpb.NewGroupMembershipClient(cc).CheckReach(ctx, &partitionpb.CheckReachRequest{Addr: string(me)})
	if err != nil {
		return false, err
	}
	return resp.Reached, nil
}

// reachProbeTimeout bounds CheckReach's own call to the asking node: under
// the asker's timeout, so that the answer gets back in time.
func reachProbeTimeout(every time.Duration) time.Duration { return every * 3 / 4 }

// CheckReach answers whether this node reaches the node at req.Addr over
// the connection its Raft traffic to that node uses: any answer from it
// counts, an error of its own included; only a call that cannot get
// through (unavailable, out of time) does not.
func (m *membership) CheckReach(ctx context.Context, req *partitionpb.CheckReachRequest) (*partitionpb.CheckReachResponse, error) {
	if req.Addr == "" {
		return nil, status.Error(codes.InvalidArgument, "CheckReach without addr")
	}
	cc, err := m.n.mux.Conn(raft.ServerAddress(req.Addr))
	if err != nil {
		return &partitionpb.CheckReachResponse{Detail: err.Error()}, nil
	}
	timeout := reachProbeTimeout(max(m.n.cfg.ReachCheck, 100*time.Millisecond))
	if d, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(d)*3/4)
	}
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// Group 0 (MetaGroup) is never one the node runs itself: the answer
	// is NotFound, or the meta member's status (metaguard.go); either
	// proves the node answered.
	_, err = partitionpb.NewGroupMembershipClient(cc).GroupStatus(pctx, &partitionpb.GroupStatusRequest{GroupId: 0})
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
		return &partitionpb.CheckReachResponse{Detail: err.Error()}, nil
	}
	return &partitionpb.CheckReachResponse{Reached: true}, nil
}
