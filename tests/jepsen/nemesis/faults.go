package nemesis

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// linkToxics are the toxiproxy toxics (JSON) of a link fault, sized by
// s.X, and the note that says what they are.
func linkToxics(kind string, s Step, note string) ([]string, string) {
	var toxics []string
	var what string
	switch kind {
	case Delay:
		// 50-400 ms each way, jitter up to half of it: a raft heartbeat
		// (the product's election timeout is a second or more) arrives
		// late but arrives.
		lat := 50 + int(s.X*350)
		jit := lat / 2
		for _, dir := range []string{"upstream", "downstream"} {
			toxics = append(toxics, fmt.Sprintf(`{"name":"delay-%s","type":"latency","stream":%q,"attributes":{"latency":%d,"jitter":%d}}`, dir, dir, lat, jit))
		}
		what = fmt.Sprintf("latency %d ms ± %d ms each way", lat, jit)
	case LossLike:
		// TCP hides lost packets as retransmissions (stalls) and, when
		// they go on, broken connections: a third of the connections
		// stop carrying data towards the node and are closed 2 s later,
		// a fifth are reset after 1-3 s, and data from the node arrives
		// in small delayed slices (frames split across reads).
		reset := 1000 + int(s.X*2000)
		toxics = append(toxics,
			`{"name":"loss-timeout","type":"timeout","stream":"upstream","toxicity":0.33,"attributes":{"timeout":2000}}`,
			fmt.Sprintf(`{"name":"loss-reset","type":"reset_peer","stream":"downstream","toxicity":0.2,"attributes":{"timeout":%d}}`, reset),
			`{"name":"loss-slicer","type":"slicer","stream":"downstream","attributes":{"average_size":64,"size_variation":48,"delay":500}}`)
		what = fmt.Sprintf("33%% of links blackholed then closed after 2 s, 20%% reset after %d ms, the rest sliced", reset)
	case DeafLeader:
		// Upstream is towards the node on the connections others opened
		// to it; what it sends on its own connections is not proxied
		// here. A timeout of 0 never closes them: the heal removes the
		// toxic, and toxiproxy then closes what it held.
		toxics = append(toxics, `{"name":"deaf","type":"timeout","stream":"upstream","attributes":{"timeout":0}}`)
		what = "nothing reaches it on connections others opened"
	case SlowLink:
		// 16-256 KiB/s each way: the leader's replication and answers
		// queue behind each other.
		rate := 16 + int(s.X*240)
		for _, dir := range []string{"upstream", "downstream"} {
			toxics = append(toxics, fmt.Sprintf(`{"name":"slow-%s","type":"bandwidth","stream":%q,"attributes":{"rate":%d}}`, dir, dir, rate))
		}
		what = fmt.Sprintf("bandwidth %d KiB/s each way", rate)
	}
	return toxics, joinNote(what, note)
}

// joinNote joins the parts of a fault's note that are not empty.
func joinNote(parts ...string) string {
	return strings.Join(slices.DeleteFunc(parts, func(p string) bool { return strings.TrimSpace(p) == "" }), "; ")
}

// skewFor is a clock skew of 5 s to 100 s, ahead or behind by s.X: short
// of the two minutes the state machine remembers request ids for
// (docs/reliability.md says what a larger skew breaks).
func skewFor(s Step) time.Duration {
	mag := 5*time.Second + time.Duration(float64(95*time.Second)*s.X)
	if s.Pick%2 == 1 {
		return -mag.Round(time.Second)
	}
	return mag.Round(time.Second)
}

// skew restarts node (or, when it holds no replica of the group, a node
// that does) with a skewed clock and hands it the group's leadership; the
// heal restarts it on the true clock.
func (n *Nemesis) skew(ctx context.Context, s Step, node int, f *Fault) (func() error, error) {
	c := n.cfg.Cluster
	d := skewFor(s)
	// The skew matters where the group's leader may be: on a replica.
	if rs, err := c.Replicas(ctx, n.cfg.Group); err == nil && len(rs) > 0 && !slices.Contains(rs, node) {
		node = rs[n.shift%len(rs)]
		f.Target = c.Nodes[node].Name
	}
	p := c.Nodes[node]
	c.SetClockOffset(node, d)
	f.ClockOffset = d
	p.Kill()
	heal := func() error {
		c.SetClockOffset(node, 0)
		p.Kill()
		return p.Start()
	}
	if err := p.Start(); err != nil {
		return heal, err
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := c.WaitReady(rctx, c.Member(node), c.HTTP[node]); err != nil {
		return heal, fmt.Errorf("not ready with a skewed clock: %w", err)
	}
	note := fmt.Sprintf("clock %+v", d)
	// Leadership goes to the skewed node, where the clock matters. A
	// transfer raft refuses (the node still catching up) leaves the skew
	// on a follower, which matters once it is elected.
	// A node just restarted may still be catching up, which the leader
	// refuses to hand over to: try again for a while.
	for try := 0; ; try++ {
		l := c.Leader(ctx, n.cfg.Group)
		if l == node {
			note += "; leads the group"
			break
		}
		if l < 0 {
			note += "; no leader known to move the leadership from"
			break
		}
		err := c.TransferLeader(ctx, n.cfg.Group, l, node)
		if err == nil {
			note += "; leads the group"
			break
		}
		if try >= 10 || !strings.Contains(err.Error(), "replica behind") {
			note += "; leadership not moved to it: " + err.Error()
			break
		}
		select {
		case <-time.After(500 * time.Millisecond):
		case <-ctx.Done():
			return heal, ctx.Err()
		}
	}
	f.Note = joinNote(note, f.Note)
	return heal, nil
}

// drain moves the group's replica off node (adding a spare first when
// every joined node holds one, so that the replica has somewhere to go),
// waits up to drainWait until it holds none, and undrains it at the
// heal. A drain that does not finish in time is noted, not failed: the
// fault is then a drain under way, undone.
func (n *Nemesis) drain(ctx context.Context, node int, f *Fault) (func() error, error) {
	c := n.cfg.Cluster
	heal := func() error { return nil }
	rs, err := c.Replicas(ctx, n.cfg.Group)
	if err != nil {
		return heal, err
	}
	if len(rs) > 0 && !slices.Contains(rs, node) {
		node = rs[n.shift%len(rs)] // a node without a replica has nothing to drain
		f.Target = c.Nodes[node].Name
	}
	if len(c.Joined()) <= len(rs) {
		i, err := c.AddNode(ctx)
		if err != nil {
			return heal, fmt.Errorf("adding a node to drain to: %w", err)
		}
		if i >= 0 {
			f.Note = joinNote(f.Note, "added "+c.Nodes[i].Name)
		}
	}
	if err := c.Drain(ctx, node, true); err != nil {
		return heal, err
	}
	heal = func() error { return c.Drain(context.Background(), node, false) }
	start := time.Now()
	for {
		held, err := c.Holds(ctx, node)
		if err == nil && held == 0 {
			f.Note = joinNote(f.Note, fmt.Sprintf("drained in %v", time.Since(start).Round(100*time.Millisecond)))
			return heal, nil
		}
		if time.Since(start) > drainWait {
			f.Note = joinNote(f.Note, fmt.Sprintf("still holds %d replicas after %v (err %v)", held, drainWait, err))
			return heal, nil
		}
		if !sleep(ctx, 500*time.Millisecond) {
			return heal, errors.New("run ended while draining")
		}
	}
}
