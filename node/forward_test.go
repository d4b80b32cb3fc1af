package node_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/quorumbus/quorumbus/node/nodetest"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// lossyTarget delivers forwarded messages to a destination entity of the
// test's group and, for the first `lose` sends, reports a failure after
// the destination committed them: the answer was lost.
type lossyTarget struct {
	cl   partitionpb.PartitionServiceClient
	dest uint64

	mu    sync.Mutex
	lose  int
	sends int
}

func (l *lossyTarget) Entity(name string) (*placementpb.Entity, error) {
	return &placementpb.Entity{Id: l.dest, Name: name, PartitionGroups: []uint64{group}}, nil
}

func (l *lossyTarget) Send(ctx context.Context, e *placementpb.Entity, p uint32, msgs []*partitionpb.NewMessage) (*partitionpb.Result, error) {
	resp, err := l.cl.Send(ctx, &partitionpb.SendRequest{EntityId: e.GetId(), Partition: p, Messages: msgs})
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sends++
	if l.lose > 0 {
		l.lose--
		return nil, errors.New("the answer was lost")
	}
	return resp.Result, nil
}

// TestForwardResendAfterLostAnswer: the forwarder of a queue with
// ForwardTo sends its messages, the destination commits them, and the
// answer is lost twice over; the forwarder sends them again and the
// destination drops what it has. Every message is in the destination
// once, in order, and the source is empty.
func TestForwardResendAfterLostAnswer(t *testing.T) {
	c := nodetest.StartCluster(t, 1, group)
	cl := c.Client(group)
	ctx := ctxFor(t)
	const dest = 43
	for _, cfg := range []*partitionpb.EntityConfig{
		{EntityId: entity, Name: "src", LockDurationMs: 60_000, MaxDeliveryCount: 10, ForwardTo: "dst"},
		{EntityId: dest, Name: "dst", LockDurationMs: 60_000, MaxDeliveryCount: 10},
	} {
		if _, err := cl.UpsertEntity(ctx, &partitionpb.UpsertEntityRequest{Config: cfg}); err != nil {
			t.Fatal(err)
		}
	}
	target := &lossyTarget{cl: cl, dest: dest, lose: 2}
	c.Node(0).SetForwardTarget(target)
	for i := range 10 {
		if _, err := send(ctx, cl, fmt.Sprintf("m%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	c.WaitFor("the source to be empty", func() bool {
		st, err := cl.Stats(ctx, &partitionpb.StatsRequest{EntityId: entity})
		if err != nil {
			t.Fatal(err)
		}
		return st.ActiveMessages == 0
	})
	target.mu.Lock()
	sends := target.sends
	target.mu.Unlock()
	if sends < 3 {
		t.Fatalf("%d sends to the destination; the two lost answers should have made at least 3", sends)
	}
	resp, err := cl.Receive(ctx, &partitionpb.ReceiveRequest{EntityId: dest, MaxCount: 100, ReceiveAndDelete: true})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range resp.Result.Messages {
		got = append(got, string(m.Bare))
		if m.ForwardHops != 1 {
			t.Errorf("%s arrived with %d hops, want 1", m.Bare, m.ForwardHops)
		}
	}
	if want := "[m0 m1 m2 m3 m4 m5 m6 m7 m8 m9]"; fmt.Sprint(got) != want {
		t.Fatalf("destination received %v, want %s once each", got, want)
	}
}
