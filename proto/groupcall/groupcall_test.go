package groupcall_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quorumbus/quorumbus/proto/groupcall"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
	"github.com/quorumbus/quorumbus/proto/placementpb"
	"github.com/quorumbus/quorumbus/proto/rpcnet"
)

// node is a replica in memory: each attempt at it gets the next of its
// answers (the last one repeats).
type node struct {
	id      string
	answers []func(ctx context.Context) error
	calls   int
}

func (n *node) call(ctx context.Context) error {
	a := n.answers[min(n.calls, len(n.answers)-1)]
	n.calls++
	return a(ctx)
}

func ok(context.Context) error { return nil }

func unavailable(context.Context) error { return status.Error(codes.Unavailable, "shutting down") }

// hang answers only when the attempt's context ends, as a paused node.
func hang(ctx context.Context) error {
	<-ctx.Done()
	return status.FromContextError(ctx.Err()).Err()
}

// hintTo refuses as a follower naming leader (its address if addr is set).
func hintTo(leader, addr string) func(context.Context) error {
	return func(context.Context) error {
		st, err := status.New(codes.FailedPrecondition, "not the leader").WithDetails(&partitionpb.LeaderHint{GroupId: 7, LeaderId: leader, LeaderAddr: addr})
		if err != nil {
			panic(err)
		}
		return st.Err()
	}
}

func answers(as ...func(context.Context) error) []func(context.Context) error { return as }

// cluster is group 7 replicated on nodes, which the caller reaches at
// "addr-<id>" (Config.Addr knows only the group's replicas).
type cluster struct {
	nodes   map[string]*node
	group   *placementpb.Group
	dialled []string // Dial's addresses, in order
	retries int
}

func newCluster(leader string, nodes ...*node) *cluster {
	c := &cluster{nodes: map[string]*node{}, group: &placementpb.Group{Id: 7, LeaderId: leader}}
	for _, n := range nodes {
		c.nodes[n.id] = n
		c.group.Replicas = append(c.group.Replicas, &placementpb.Replica{NodeId: n.id})
	}
	return c
}

// config is a Caller's config over the cluster; adjust changes it.
func (c *cluster) config() groupcall.Config[*node] {
	return groupcall.Config[*node]{
		Group: func(id uint64) *placementpb.Group {
			if id == c.group.Id {
				return c.group
			}
			return nil
		},
		Addr: func(id string) string {
			for _, r := range c.group.Replicas {
				if r.NodeId == id {
					return "addr-" + id
				}
			}
			return ""
		},
		Dial: func(id, addr string) (*node, error) {
			c.dialled = append(c.dialled, addr)
			n := c.nodes[id]
			if n == nil {
				return nil, errors.New("no such node")
			}
			return n, nil
		},
		OnRetry: func(uint64, error) { c.retries++ },
	}
}

func call(ctx context.Context, cl *groupcall.Caller[*node], o groupcall.CallOptions) error {
	return cl.Call(ctx, 7, o, func(ctx context.Context, n *node) error { return n.call(ctx) })
}

// TestHintFollowedAndRemembered: a follower's hint sends the next attempt
// straight to the leader it names, and the leader that answered is where
// the next call goes first.
func TestHintFollowedAndRemembered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := &node{id: "a", answers: answers(unavailable)}
		b := &node{id: "b", answers: answers(hintTo("c", ""))}
		c := &node{id: "c", answers: answers(ok)}
		cl := newCluster("a", a, b, c)
		caller := groupcall.New(cl.config())
		if err := call(t.Context(), caller, groupcall.CallOptions{}); err != nil {
			t.Fatal(err)
		}
		if a.calls != 1 || b.calls != 1 || c.calls != 1 || cl.retries != 2 {
			t.Fatalf("attempts a %d, b %d, c %d, retries %d; want a, b (hint: c), c", a.calls, b.calls, c.calls, cl.retries)
		}
		if err := call(t.Context(), caller, groupcall.CallOptions{}); err != nil {
			t.Fatal(err)
		}
		if a.calls != 1 || c.calls != 2 {
			t.Fatalf("second call: a %d, c %d attempts; want it straight to c", a.calls, c.calls)
		}
		if r, _ := caller.Leaders().Get(7); r.ID != "c" {
			t.Fatalf("remembered leader %+v, want c", r)
		}
	})
}

// TestSilentNodePassedOver: after a node gave no answer, the next attempt
// goes elsewhere even where the group's reported leader and the turn of
// the replicas would pick it again.
func TestSilentNodePassedOver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := &node{id: "a", answers: answers(hintTo("c", ""))}
		b := &node{id: "b", answers: answers(unavailable)}
		c := &node{id: "c", answers: answers(ok)}
		caller := groupcall.New(newCluster("b", a, b, c).config())
		if err := call(t.Context(), caller, groupcall.CallOptions{}); err != nil {
			t.Fatal(err)
		}
		if b.calls != 1 || c.calls != 1 || a.calls != 0 {
			t.Fatalf("attempts a %d, b %d, c %d; want b once, then c", a.calls, b.calls, c.calls)
		}
	})
}

// TestHintOverridesSilence: a node that gave no answer is tried again when
// another replica names it the leader.
func TestHintOverridesSilence(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := &node{id: "a", answers: answers(unavailable, ok)}
		b := &node{id: "b", answers: answers(hintTo("a", ""))}
		caller := groupcall.New(newCluster("a", a, b).config())
		if err := call(t.Context(), caller, groupcall.CallOptions{}); err != nil {
			t.Fatal(err)
		}
		if a.calls != 2 || b.calls != 1 {
			t.Fatalf("attempts a %d, b %d; want a, b (hint: a), a", a.calls, b.calls)
		}
	})
}

// TestHintAddressStandsIn: a leader the caller cannot place (a node that
// joined after its member list was read) is reached at the address its
// hint gives.
func TestHintAddressStandsIn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := &node{id: "a", answers: answers(hintTo("d", "10.0.0.4:7000"))}
		d := &node{id: "d", answers: answers(ok)}
		cl := newCluster("a", a)
		cl.nodes["d"] = d
		caller := groupcall.New(cl.config())
		if err := call(t.Context(), caller, groupcall.CallOptions{}); err != nil {
			t.Fatal(err)
		}
		if d.calls != 1 || len(cl.dialled) != 2 || cl.dialled[1] != "10.0.0.4:7000" {
			t.Fatalf("d called %d times, dials %v; want d at the hint's address", d.calls, cl.dialled)
		}
	})
}

// TestNoLeaderWaits: a replica that knows no leader, or names itself while
// it refuses, is asked again only after a backoff that grows: an election
// takes a moment, and asking at once would spin.
func TestNoLeaderWaits(t *testing.T) {
	for name, refuse := range map[string]func(context.Context) error{
		"no leader known": hintTo("", ""),
		"names itself":    hintTo("a", ""),
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				a := &node{id: "a"}
				a.answers = answers(func(ctx context.Context) error {
					if a.calls > 50 {
						return errors.New("spinning") // ends the call; fails below
					}
					return refuse(ctx)
				})
				caller := groupcall.New(newCluster("a", a).config())
				ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
				defer cancel()
				err := call(ctx, caller, groupcall.CallOptions{})
				var gaveUp *groupcall.GaveUp
				if !errors.As(err, &gaveUp) || status.Code(err) != codes.FailedPrecondition {
					t.Fatalf("%v after %d attempts; want to give up at the deadline, with the refusal", err, a.calls)
				}
				// Virtual time: waits of 10-20, 20-40, 40-80 ... 500-1000 ms
				// fit 10 to 15 attempts into 5 s; asking at once, 51.
				if a.calls > 15 || a.calls < 10 {
					t.Fatalf("%d attempts in 5 s", a.calls)
				}
			})
		})
	}
}

// TestAttemptTimeout: a node that does not answer costs one attempt
// timeout (plus the call's extra time), not the caller's whole deadline;
// a node whose attempts have no timeout is waited for.
func TestAttemptTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := &node{id: "a", answers: answers(hang)}
		b := &node{id: "b", answers: answers(ok)}
		cfg := newCluster("a", a, b).config()
		cfg.AttemptTimeout = func(id string) time.Duration {
			if id == "local" {
				return 0
			}
			return 3 * time.Second
		}
		caller := groupcall.New(cfg)
		start := time.Now()
		if err := call(t.Context(), caller, groupcall.CallOptions{Extra: 2 * time.Second}); err != nil {
			t.Fatal(err)
		}
		// Virtual time: 3 s + 2 s on a, then a backoff under 20 ms.
		if took := time.Since(start); a.calls != 1 || b.calls != 1 || took < 5*time.Second || took > 6*time.Second {
			t.Fatalf("a %d, b %d attempts in %v; want one each, a cut off after 5 s", a.calls, b.calls, took)
		}

		l := &node{id: "local", answers: answers(hang)}
		local := newCluster("local", l).config()
		local.AttemptTimeout = cfg.AttemptTimeout
		caller = groupcall.New(local)
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		err := call(ctx, caller, groupcall.CallOptions{})
		if status.Code(err) != codes.DeadlineExceeded || l.calls != 1 {
			t.Fatalf("a hung node without attempt timeout: %v after %d attempts; want the caller's deadline, one attempt", err, l.calls)
		}
	})
}

// TestOneRound: with OneRound (the caller's, or one call's) every
// replica is tried once, a hint to one already tried is not followed
// back, nothing waits between attempts, and the last answer is what the
// call gives up with.
func TestOneRound(t *testing.T) {
	for name, perCall := range map[string]bool{"config": false, "call": true} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				a := &node{id: "a", answers: answers(unavailable)}
				b := &node{id: "b", answers: answers(hintTo("a", ""))}
				c := &node{id: "c", answers: answers(func(context.Context) error { return status.Error(codes.DeadlineExceeded, "slow") })}
				cfg := newCluster("a", a, b, c).config()
				cfg.OneRound = !perCall
				caller := groupcall.New(cfg)
				start := time.Now()
				err := call(t.Context(), caller, groupcall.CallOptions{OneRound: perCall})
				var gaveUp *groupcall.GaveUp
				if !errors.As(err, &gaveUp) || gaveUp.Group != 7 || status.Code(err) != codes.DeadlineExceeded {
					t.Fatalf("%v; want to give up on group 7 with c's answer", err)
				}
				if a.calls != 1 || b.calls != 1 || c.calls != 1 {
					t.Fatalf("attempts a %d, b %d, c %d; want one each", a.calls, b.calls, c.calls)
				}
				if took := time.Since(start); took != 0 { // virtual time: exact
					t.Fatalf("one round took %v of waiting", took)
				}
			})
		})
	}
}

// TestNotFound: NOT_FOUND ends a call unless the call says it is worth
// another try (a partition that does not know an entity yet).
func TestNotFound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		notFound := func(context.Context) error { return status.Error(codes.NotFound, "entity not found") }
		a := &node{id: "a", answers: answers(notFound)}
		caller := groupcall.New(newCluster("a", a).config())
		if err := call(t.Context(), caller, groupcall.CallOptions{}); status.Code(err) != codes.NotFound || a.calls != 1 {
			t.Fatalf("%v after %d attempts; want NotFound at once", err, a.calls)
		}

		b := &node{id: "b", answers: answers(notFound, notFound, ok)}
		caller = groupcall.New(newCluster("b", b).config())
		asked := 0
		retry := func(*status.Status) bool { asked++; return true }
		if err := call(t.Context(), caller, groupcall.CallOptions{RetryNotFound: retry}); err != nil || b.calls != 3 || asked != 2 {
			t.Fatalf("%v after %d attempts, %d asked; want success on the third", err, b.calls, asked)
		}
	})
}

// TestFinalAnswer: an answer that is not about leadership or reachability
// (a rule, a bad request) ends the call as it came.
func TestFinalAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		invalid := status.Error(codes.InvalidArgument, "too large")
		a := &node{id: "a", answers: answers(func(context.Context) error { return invalid })}
		b := &node{id: "b", answers: answers(ok)}
		caller := groupcall.New(newCluster("a", a, b).config())
		if err := call(t.Context(), caller, groupcall.CallOptions{}); err != invalid || a.calls != 1 || b.calls != 0 {
			t.Fatalf("%v; a %d, b %d attempts; want a's answer as is, once", err, a.calls, b.calls)
		}
	})
}

// TestGaveUpAtDeadline: when no replica answers before the caller's
// deadline, the call gives up with the last failure inside.
func TestGaveUpAtDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := &node{id: "a", answers: answers(unavailable)}
		b := &node{id: "b", answers: answers(unavailable)}
		cl := newCluster("a", a, b)
		caller := groupcall.New(cl.config())
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		err := call(ctx, caller, groupcall.CallOptions{})
		var gaveUp *groupcall.GaveUp
		if !errors.As(err, &gaveUp) || status.Code(err) != codes.Unavailable {
			t.Fatalf("%v; want GaveUp with Unavailable", err)
		}
		if a.calls < 2 || b.calls < 2 || cl.retries != a.calls+b.calls-1 {
			t.Fatalf("attempts a %d, b %d, retries %d; want both replicas tried again and again", a.calls, b.calls, cl.retries)
		}
	})
}

// TestSharedLeaders: callers that share a Leaders record learn from each
// other's answers (placement's PartitionService and GroupMembership
// clients reach the same leaders).
func TestSharedLeaders(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := &node{id: "a", answers: answers(hintTo("b", ""))}
		b := &node{id: "b", answers: answers(ok)}
		leaders := &groupcall.Leaders{}
		cfg := newCluster("a", a, b).config()
		cfg.Leaders = leaders
		first, second := groupcall.New(cfg), groupcall.New(cfg)
		if err := call(t.Context(), first, groupcall.CallOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := call(t.Context(), second, groupcall.CallOptions{}); err != nil {
			t.Fatal(err)
		}
		if a.calls != 1 || b.calls != 2 {
			t.Fatalf("attempts a %d, b %d; want the second caller straight to b", a.calls, b.calls)
		}
	})
}

// partitionNode is a PartitionService whose Stats refuses as a follower
// naming the leader of hint, or, without a hint, answers as the leader.
type partitionNode struct {
	partitionpb.UnimplementedPartitionServiceServer
	hint *partitionpb.LeaderHint // nil: the leader

	mu    sync.Mutex
	calls int
}

func (p *partitionNode) Stats(context.Context, *partitionpb.StatsRequest) (*partitionpb.StatsResponse, error) {
	p.mu.Lock()
	p.calls++
	p.mu.Unlock()
	if p.hint != nil {
		st, err := status.New(codes.FailedPrecondition, "not the leader").WithDetails(p.hint)
		if err != nil {
			return nil, err
		}
		return nil, st.Err()
	}
	return &partitionpb.StatsResponse{}, nil
}

func serve(t *testing.T, p *partitionNode) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	partitionpb.RegisterPartitionServiceServer(s, p)
	go s.Serve(ln)
	t.Cleanup(s.Stop)
	return ln.Addr().String()
}

// TestOverGRPC: the hint a follower sends as a status detail over gRPC
// leads the call to the leader, which the caller knew only by id.
func TestOverGRPC(t *testing.T) {
	leader := &partitionNode{}
	leaderAddr := serve(t, leader)
	follower := &partitionNode{hint: &partitionpb.LeaderHint{GroupId: 7, LeaderId: "n2", LeaderAddr: leaderAddr}}
	addrs := map[string]string{"n1": serve(t, follower), "n2": leaderAddr}
	conns := map[string]*grpc.ClientConn{}
	defer func() {
		for _, cc := range conns {
			cc.Close()
		}
	}()
	caller := groupcall.New(groupcall.Config[partitionpb.PartitionServiceClient]{
		Group: func(uint64) *placementpb.Group {
			return &placementpb.Group{Id: 7, LeaderId: "n1", Replicas: []*placementpb.Replica{{NodeId: "n1"}, {NodeId: "n2"}}}
		},
		Addr: func(id string) string { return addrs[id] },
		Dial: func(_, addr string) (partitionpb.PartitionServiceClient, error) {
			cc, err := rpcnet.Dial(addr, nil)
			conns[addr] = cc
			return partitionpb.NewPartitionServiceClient(cc), err
		},
		AttemptTimeout: func(string) time.Duration { return 10 * time.Second },
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := caller.Call(ctx, 7, groupcall.CallOptions{}, func(ctx context.Context, c partitionpb.PartitionServiceClient) error {
		_, err := c.Stats(ctx, &partitionpb.StatsRequest{GroupId: 7})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if follower.calls != 1 || leader.calls != 1 {
		t.Fatalf("follower %d, leader %d calls; want one each", follower.calls, leader.calls)
	}
}
