// Package nemesis injects faults into a running cluster on a schedule
// drawn from a seed, and logs each one with its time, kind and target.
package nemesis

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/quorumbus/quorumbus/tests/jepsen/cluster"
)

// Fault is one injected fault on the run's clock (nanoseconds since the
// run started, as in the history).
type Fault struct {
	Kind   string `json:"kind"`
	Target string `json:"target"`
	Start  int64  `json:"start"`
	End    int64  `json:"end"` // when it was healed; 0 while active
	Note   string `json:"note,omitempty"`
	// ClockOffset is a clock-skew fault's offset of the target's wall
	// clock (checkers widen their time tolerances by it).
	ClockOffset time.Duration `json:"clock_offset,omitempty"`
}

// Kinds of fault. A kind that names the leader aims at the leader of the
// queue's partition group as the cluster reports it just before; with
// no leader known it takes a random node and says so in the note.
const (
	KillLeader      = "kill-leader"      // kill -9, restart after the hold
	KillNode        = "kill-node"        // kill -9 of a random node
	KillFrontend    = "kill-frontend"    // kill -9 of the front-end
	PauseLeader     = "pause-leader"     // SIGSTOP, SIGCONT after the hold
	PauseNode       = "pause-node"       // SIGSTOP of a random node
	IsolateLeader   = "isolate-leader"   // cut from the other nodes; the front-end still reaches it
	IsolateNode     = "isolate-node"     // cut from the other nodes and the front-end
	PartitionBridge = "partition-bridge" // cut one node pair: the third node still reaches both
	// KillMajority kills the leader and one other node: the group has no
	// quorum until both restart, so sends stall, and what was
	// acknowledged before must come back from the disks.
	KillMajority = "kill-majority"
	// TransferLeader has the leader hand its leadership to another node
	// at once (as placement does to spread leaders); nothing to heal.
	TransferLeader = "transfer-leader"

	// One-way cuts (iptables in the members' namespaces): the leader's
	// packets to every other node dropped while theirs reach it (out), or
	// the reverse (in: a deaf leader whose heartbeats still go out).
	OneWayLeaderOut = "one-way-leader-out"
	OneWayLeaderIn  = "one-way-leader-in"
	// OneWayPair drops one random node's packets to one other node only.
	OneWayPair = "one-way-pair"
	// LossyPair drops 10-40 % of the packets between the leader and one
	// other replica, both ways (iptables' statistic match): one flaky
	// link while every other is clean, so the leader keeps its quorum
	// through the third node while replication to one follower and
	// whatever that follower forwards stall and retransmit.
	LossyPair = "lossy-pair"

	// Link faults through the nodes' link proxies (toxiproxy): every link
	// into and out of one node. Delay adds latency with jitter; LossLike
	// stands in for packet loss, which TCP turns into stalls and broken
	// connections (a share of connections stop carrying data and are
	// closed, others are reset, the rest carry data in small slices);
	// SlowLink limits the leader's bandwidth.
	Delay    = "delay"
	LossLike = "loss-like"
	SlowLink = "slow-link"
	// DeafLeader: every connection others opened to the leader carries
	// nothing towards it, while its own calls out (raft replication to
	// its followers, answered on those connections) still work: the
	// front-end and the followers' elections cannot reach a leader that
	// still leads. A one-way cut per message, not per packet.
	DeafLeader = "deaf-leader"

	// ClockSkew restarts a random node with its wall clock offset by
	// seconds to minutes either way and makes it the group's leader, so
	// that it stamps commands and expires locks on its clock; the heal
	// restarts it on the true clock.
	ClockSkew = "clock-skew"

	// Machine crashes: the node loses what its log wrote ahead of fsync
	// and did not sync yet (only a leader writes ahead), then restarts
	// as a new boot of its machine after the hold.
	CrashLeaderMachine    = "crash-leader-machine"
	CrashMajorityMachines = "crash-majority-machines" // the leader's and one other replica's
	AddNode               = "add-node"                // start a spare node; it joins by gossip
	DrainNode             = "drain-node"              // drain a replica of the group (adding a node first if none is free), undrain after
)

// drainWait bounds how long a drain-node fault waits for the node to hold
// no replica: moves take longer than a fault's hold.
const drainWait = 45 * time.Second

// Needs says what a kind needs of the cluster: "netns" (network
// namespaces), "iptables", "proxies" (Options.Proxies), "machines"
// (Options.SimulateMachines), "spares" (Options.Spares), or nothing.
func Needs(kind string) []string {
	switch kind {
	case IsolateLeader, IsolateNode, PartitionBridge:
		return []string{"netns"}
	case OneWayLeaderOut, OneWayLeaderIn, OneWayPair, LossyPair:
		return []string{"netns", "iptables"}
	case Delay, LossLike, SlowLink, DeafLeader:
		return []string{"proxies"}
	case CrashLeaderMachine, CrashMajorityMachines:
		return []string{"machines"}
	case AddNode, DrainNode:
		return []string{"spares"}
	}
	return nil
}

// Config is a schedule's shape.
type Config struct {
	Cluster *cluster.Cluster
	Group   uint64 // the partition group whose leader is aimed at
	Seed    uint64
	// Kinds to draw from, with equal weight.
	Kinds []string
	// Hold is how long a fault lasts, Quiet the healthy gap after it:
	// each drawn uniformly between its bounds.
	HoldMin, HoldMax, QuietMin, QuietMax time.Duration
	Clock                                func() int64
	Log                                  func(format string, args ...any)
}

// Nemesis runs a schedule and keeps its log.
type Nemesis struct {
	cfg Config

	shift int // the step being injected's Shift (Run injects one at a time)

	mu     sync.Mutex
	faults []Fault
	errs   []error
}

func New(cfg Config) *Nemesis {
	return &Nemesis{cfg: cfg}
}

// Faults returns the log so far.
func (n *Nemesis) Faults() []Fault {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.faults)
}

// Err joins what went wrong injecting or healing faults: a node that
// did not restart is a finding, not noise.
func (n *Nemesis) Err() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	return errors.Join(n.errs...)
}

func (n *Nemesis) fail(err error) {
	n.mu.Lock()
	n.errs = append(n.errs, err)
	n.mu.Unlock()
	n.cfg.Log("nemesis: %v", err)
}

// Step is one planned fault: the healthy gap before it, its kind, how
// long it is held, and the nodes a kind that wants random ones takes
// (Pick; Other is a bridge partition's second node, never Pick).
type Step struct {
	Quiet, Hold time.Duration
	Kind        string
	Pick, Other int
	// X in [0, 1) sizes a fault of the kinds that take a size: a skew, a
	// latency, a bandwidth.
	X float64
	// Shift spreads Pick and Other over more nodes once spares joined:
	// the node taken is (Pick+Shift) mod the nodes running (joined).
	Shift int
}

// Plan draws count steps from the seed alone, so a seed replays the same
// schedule of kinds, durations and random nodes (not the same
// interleaving: targets that name the leader depend on the elections of
// the run).
func Plan(cfg Config, count int) []Step {
	rng := rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15))
	between := func(lo, hi time.Duration) time.Duration {
		if hi <= lo {
			return lo
		}
		return lo + time.Duration(rng.Int64N(int64(hi-lo)))
	}
	var out []Step
	for range count {
		s := Step{Quiet: between(cfg.QuietMin, cfg.QuietMax), Kind: cfg.Kinds[rng.IntN(len(cfg.Kinds))],
			Hold: between(cfg.HoldMin, cfg.HoldMax), Pick: rng.IntN(cluster.Nodes)}
		s.Other = (s.Pick + 1 + rng.IntN(cluster.Nodes-1)) % cluster.Nodes
		s.X = rng.Float64()
		s.Shift = rng.IntN(60) // 60: every count of nodes up to 6 divides it, so none is favoured
		out = append(out, s)
	}
	return out
}

// Run injects the planned faults one after another, healing each before
// the next, until count were injected or ctx ends.
func (n *Nemesis) Run(ctx context.Context, count int) {
	for _, s := range Plan(n.cfg, count) {
		if !sleep(ctx, s.Quiet) {
			return
		}
		n.inject(ctx, s)
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// target resolves the node a kind aims at. For the others it notes who
// led the group as the fault began: a stall reads differently when the
// random node was the leader.
func (n *Nemesis) target(ctx context.Context, kind string, pick int) (int, string) {
	switch kind {
	case KillLeader, PauseLeader, IsolateLeader, KillMajority, TransferLeader,
		OneWayLeaderOut, OneWayLeaderIn, SlowLink, DeafLeader, CrashLeaderMachine, CrashMajorityMachines, LossyPair:
		if l := n.cfg.Cluster.Leader(ctx, n.cfg.Group); l >= 0 {
			return l, ""
		}
		return pick, "no leader known: a random node"
	}
	leader := "no leader known"
	if l := n.cfg.Cluster.Leader(ctx, n.cfg.Group); l >= 0 {
		leader = "leader " + n.cfg.Cluster.Nodes[l].Name
	}
	return pick, leader
}

// joined maps a planned node (Pick or Other, 0..cluster.Nodes-1) onto
// the nodes running now, shifted by the step's Shift: with spares added,
// the plan's picks spread over them too. Distinct planned nodes stay
// distinct.
func (n *Nemesis) joined(planned int) int {
	j := n.cfg.Cluster.Joined()
	return j[(planned+n.shift)%len(j)]
}

// replicaOther is a replica of the group other than node, preferring the
// planned one; with the routing table unknown, the planned one.
func (n *Nemesis) replicaOther(ctx context.Context, node, planned int) int {
	other := n.joined(planned)
	if other == node {
		other = n.joined(planned + 1)
	}
	rs, err := n.cfg.Cluster.Replicas(ctx, n.cfg.Group)
	if err != nil || slices.Contains(rs, other) {
		return other
	}
	for _, r := range rs {
		if r != node {
			return r
		}
	}
	return other
}

func (n *Nemesis) inject(ctx context.Context, s Step) {
	c := n.cfg.Cluster
	kind, hold := s.Kind, s.Hold
	n.shift = s.Shift
	node, note := n.target(ctx, kind, n.joined(s.Pick))
	f := Fault{Kind: kind, Target: c.Nodes[node].Name, Note: note}
	var heal func() error
	var err error
	// The fault begins as it is injected: some kinds take a while (a
	// restart, a drain's moves), and that is part of the fault.
	f.Start = n.cfg.Clock()
	switch kind {
	case KillLeader, KillNode:
		p := c.Nodes[node]
		p.Kill()
		heal = p.Start
	case KillMajority:
		a, b := c.Nodes[node], c.Nodes[n.replicaOther(ctx, node, s.Other)]
		f.Target = a.Name + "+" + b.Name
		a.Kill()
		b.Kill()
		heal = func() error { return errors.Join(a.Start(), b.Start()) }
	case KillFrontend:
		f.Target = c.Frontend.Name
		c.Frontend.Kill()
		heal = c.Frontend.Start
	case PauseLeader, PauseNode:
		p := c.Nodes[node]
		err, heal = p.Pause(), p.Resume
	case IsolateLeader, IsolateNode:
		for _, other := range c.Joined() {
			if other != node && err == nil {
				err = c.Net.Cut(c.Member(node), c.Member(other))
			}
		}
		if kind == IsolateNode && err == nil {
			err = c.Net.Cut(c.Member(node), cluster.FE)
		}
		heal = c.Net.Heal
	case PartitionBridge:
		other := n.joined(s.Other) // node is s.Pick: a bridge never aims at the leader
		f.Target = fmt.Sprintf("%s|%s", c.Nodes[node].Name, c.Nodes[other].Name)
		err, heal = c.Net.Cut(c.Member(node), c.Member(other)), c.Net.Heal
	case OneWayLeaderOut, OneWayLeaderIn:
		for _, other := range c.Joined() {
			if other == node || err != nil {
				continue
			}
			if kind == OneWayLeaderOut {
				err = c.Net.CutOneWay(c.Member(node), c.Member(other))
			} else {
				err = c.Net.CutOneWay(c.Member(other), c.Member(node))
			}
		}
		f.Target = c.Nodes[node].Name + map[string]string{OneWayLeaderOut: "->others", OneWayLeaderIn: "<-others"}[kind]
		heal = c.Net.Heal
	case OneWayPair:
		to := n.joined(s.Other)
		f.Target = c.Nodes[node].Name + "->" + c.Nodes[to].Name
		err, heal = c.Net.CutOneWay(c.Member(node), c.Member(to)), c.Net.Heal
	case LossyPair:
		other := n.replicaOther(ctx, node, s.Other)
		percent := 10 + int(s.X*30)
		f.Target = c.Nodes[node].Name + "~" + c.Nodes[other].Name
		f.Note = joinNote(fmt.Sprintf("%d%% of packets dropped both ways", percent), f.Note)
		err, heal = c.Net.LossyPair(c.Member(node), c.Member(other), percent), c.Net.Heal
	case Delay, LossLike, SlowLink, DeafLeader:
		var toxics []string
		toxics, f.Note = linkToxics(kind, s, f.Note)
		for _, t := range toxics {
			if err == nil {
				err = c.Toxic(node, t)
			}
		}
		heal = c.ClearToxics
	case ClockSkew:
		heal, err = n.skew(ctx, s, node, &f)
	case CrashLeaderMachine, CrashMajorityMachines:
		victims := []int{node}
		if kind == CrashMajorityMachines {
			victims = append(victims, n.replicaOther(ctx, node, s.Other))
		}
		var names, said []string
		for _, v := range victims {
			names = append(names, c.Nodes[v].Name)
			line, cerr := c.CrashMachine(v)
			err = errors.Join(err, cerr)
			said = append(said, line)
		}
		f.Target = strings.Join(names, "+")
		f.Note = joinNote(append([]string{f.Note}, said...)...)
		heal = func() error {
			var errs []error
			for _, v := range victims {
				errs = append(errs, c.Nodes[v].Start())
			}
			return errors.Join(errs...)
		}
	case AddNode:
		i, aerr := c.AddNode(ctx)
		err, heal = aerr, func() error { return nil }
		if i < 0 {
			f.Target, f.Note = "-", "every spare runs already"
		} else {
			f.Target = c.Nodes[i].Name
		}
	case DrainNode:
		heal, err = n.drain(ctx, node, &f)
	case TransferLeader:
		to := n.joined(s.Other)
		if to == node {
			to = n.joined(s.Other + 1)
		}
		f.Target = c.Nodes[node].Name + "->" + c.Nodes[to].Name
		heal = func() error { return nil }
		// Raft may refuse or time out a transfer (the target lags after
		// an earlier fault, or an election is under way); the leader then
		// keeps leading. That is the fault not taking, not a finding.
		if terr := c.TransferLeader(ctx, n.cfg.Group, node, to); terr != nil {
			f.Note = "not done: " + terr.Error()
		}
	default:
		err = fmt.Errorf("unknown fault kind %q", kind)
	}
	if err != nil {
		n.fail(fmt.Errorf("%s %s: %w", kind, f.Target, err))
		if heal != nil {
			heal()
		}
		return
	}
	n.mu.Lock()
	i := len(n.faults)
	n.faults = append(n.faults, f)
	n.mu.Unlock()
	n.cfg.Log("nemesis: %s %s for %v %s", kind, f.Target, hold.Round(time.Millisecond), f.Note)
	// The fault is healed even when ctx ends mid-hold: a run never
	// leaves a node down or a link cut behind it.
	sleep(ctx, hold)
	if err := heal(); err != nil {
		n.fail(fmt.Errorf("heal %s %s: %w", kind, f.Target, err))
	}
	n.mu.Lock()
	n.faults[i].End = n.cfg.Clock()
	n.mu.Unlock()
	n.cfg.Log("nemesis: healed %s %s", kind, f.Target)
}

// HealAll undoes anything still in effect: restarts killed processes,
// resumes paused ones, heals the network. The run calls it before the
// drain.
func HealAll(c *cluster.Cluster) error {
	var errs []error
	errs = append(errs, c.Net.Heal())
	errs = append(errs, c.ClearToxics())
	for _, i := range c.Joined() {
		c.SetClockOffset(i, 0)
	}
	for _, p := range append(joinedNodes(c), c.Frontend) {
		if p.Exited() {
			p.Kill() // the test reports the crash (Process.Crashes)
		}
		if !p.Running() {
			errs = append(errs, p.Start())
		} else if p.Paused() {
			errs = append(errs, p.Resume())
		}
	}
	return errors.Join(errs...)
}

func joinedNodes(c *cluster.Cluster) []*cluster.Process {
	var out []*cluster.Process
	for _, i := range c.Joined() {
		out = append(out, c.Nodes[i])
	}
	return out
}
