package compat

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/quorumbus/quorumbus/cmd/quorumbus/cluster"
	"github.com/quorumbus/quorumbus/gateway"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// TestRedriveSurvivesLeaderLoss re-drives dead-lettered messages at a
// bounded rate and stops the storage node that leads the queue's group
// halfway. The re-drive goes on at the new leader (or, if it gave up, an
// operator runs it again); afterwards every message is in the queue
// exactly once and the dead-letter queue is empty: a batch moved its
// messages in one Raft entry or not at all, and a retried batch skips
// what moved.
func TestRedriveSurvivesLeaderLoss(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("stops a storage node")
	}
	const n = 120
	c := startTestDev(t, cluster.QueueSpec{Name: "fo", Props: &placementpb.QueueProperties{}})
	client := devClient(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	snd, err := client.NewSender("fo", nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i += 40 {
		batch, err := snd.NewMessageBatch(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		for j := i; j < i+40; j++ {
			if err := batch.AddMessage(&azservicebus.Message{Body: []byte(strconv.Itoa(j))}, nil); err != nil {
				t.Fatal(err)
			}
		}
		if err := snd.SendMessageBatch(ctx, batch, nil); err != nil {
			t.Fatal(err)
		}
	}
	snd.Close(ctx)
	rcv, err := client.NewReceiverForQueue("fo", nil)
	if err != nil {
		t.Fatal(err)
	}
	for dead := 0; dead < n; {
		msgs, err := rcv.ReceiveMessages(ctx, 100, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			if err := rcv.DeadLetterMessage(ctx, m, nil); err != nil {
				t.Fatal(err)
			}
			dead++
		}
	}
	rcv.Close(ctx)

	t0 := time.Now()
	t.Logf("%d messages dead-lettered", n)
	e, err := c.Router.Entity("fo")
	if err != nil {
		t.Fatal(err)
	}
	group := e.GetPartitionGroups()[0]
	// 40 a second, in batches of 40: the re-drive takes three seconds,
	// and the leader goes after half of one, between the first batch and
	// the second.
	done := make(chan error, 1)
	go func() {
		moved, err := gateway.Redrive(ctx, c.Router, e, gateway.RedriveOptions{Rate: 40})
		t.Logf("the re-drive moved %d messages", moved)
		done <- err
	}()
	time.Sleep(500 * time.Millisecond)
	stopped := false
	for _, s := range c.Storage {
		if st, err := s.Node.Group(group); err == nil && st.State.String() == "Leader" {
			t.Logf("stopping %s, the leader of group %d", s.Node.ID(), group)
			// In the background: the re-drive must go on while the
			// node is going, not after.
			go func() {
				if err := s.Close(); err != nil {
					t.Logf("stopping %s: %v", s.Node.ID(), err)
				}
			}()
			stopped = true
			break
		}
	}
	if !stopped {
		t.Fatal("no storage node leads the queue's group")
	}
	if err := <-done; err != nil {
		t.Logf("the re-drive stopped on the leader's loss (%v); running it again, as an operator would", err)
		for {
			_, err := gateway.Redrive(ctx, c.Router, e, gateway.RedriveOptions{Rate: 1000})
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("re-drive never finished: %v", err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}

	t.Logf("re-drive done after %v", time.Since(t0).Round(time.Millisecond))
	rad, err := client.NewReceiverForQueue("fo", &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
	if err != nil {
		t.Fatal(err)
	}
	defer rad.Close(ctx)
	seen := map[string]int{}
	for len(seen) < n {
		short, cancelShort := context.WithTimeout(ctx, 20*time.Second)
		msgs, err := rad.ReceiveMessages(short, 100, nil)
		cancelShort()
		if err != nil || len(msgs) == 0 {
			t.Fatalf("received %d distinct messages of %d, then: %v", len(seen), n, err)
		}
		for _, m := range msgs {
			seen[string(m.Body)]++
		}
	}
	for i := range n {
		if k := seen[strconv.Itoa(i)]; k != 1 {
			t.Errorf("message %d received %d times", i, k)
		}
	}
	t.Logf("all received after %v", time.Since(t0).Round(time.Millisecond))
	// Nothing more in the queue, nothing left dead-lettered.
	short, cancelShort := context.WithTimeout(ctx, 2*time.Second)
	extra, _ := rad.ReceiveMessages(short, 10, nil)
	cancelShort()
	if len(extra) > 0 {
		t.Errorf("%d messages beyond the %d sent (a re-drive copied one twice)", len(extra), n)
	}
	st, err := c.Router.Stats(ctx, e, 0)
	if err != nil {
		t.Fatal(err)
	}
	if st.GetDeadLetterMessages() != 0 {
		t.Errorf("%d messages left in the dead-letter queue", st.GetDeadLetterMessages())
	}
}
