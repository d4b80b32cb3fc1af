package frontend_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	goamqp "github.com/Azure/go-amqp"

	"github.com/quorumbus/quorumbus/frontend"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// electingBackend is partBackend whose partitions may be electing a
// leader until a time: sends to one wait until then (or until their
// context ends), and it reads not serving meanwhile, as the router reads
// a group whose calls found no leader.
type electingBackend struct {
	*partBackend
	mu       sync.Mutex
	leaderAt map[uint32]time.Time
}

func (b *electingBackend) elect(p uint32, until time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.leaderAt[p] = until
}

// leader waits until partition p has a leader, or ctx ends.
func (b *electingBackend) leader(ctx context.Context, p uint32) error {
	b.mu.Lock()
	at := b.leaderAt[p]
	b.mu.Unlock()
	if d := time.Until(at); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return fmt.Errorf("%w: partition %d has no leader: %v", frontend.ErrUnavailable, p, ctx.Err())
		}
	}
	return nil
}

func (b *electingBackend) Send(ctx context.Context, e *placementpb.Entity, p uint32, msgs []*partitionpb.NewMessage) (*partitionpb.Result, error) {
	if err := b.leader(ctx, p); err != nil {
		return nil, err
	}
	return b.partBackend.Send(ctx, e, p, msgs)
}

func (b *electingBackend) Settle(ctx context.Context, e *placementpb.Entity, s *partitionpb.Settle) (*partitionpb.Result, error) {
	if err := b.leader(ctx, s.Partition); err != nil {
		return nil, err
	}
	return b.partBackend.Settle(ctx, e, s)
}

func (b *electingBackend) CancelScheduled(ctx context.Context, e *placementpb.Entity, c *partitionpb.CancelScheduled) (*partitionpb.Result, error) {
	if err := b.leader(ctx, c.Partition); err != nil {
		return nil, err
	}
	return b.partBackend.CancelScheduled(ctx, e, c)
}

func (b *electingBackend) ReceiveDeferred(ctx context.Context, e *placementpb.Entity, r *partitionpb.ReceiveDeferredRequest) (*partitionpb.Result, error) {
	if err := b.leader(ctx, r.Partition); err != nil {
		return nil, err
	}
	return b.partBackend.ReceiveDeferred(ctx, e, r)
}

func (b *electingBackend) RenewLocks(ctx context.Context, e *placementpb.Entity, r *partitionpb.RenewLocks) (*partitionpb.Result, error) {
	if err := b.leader(ctx, r.Partition); err != nil {
		return nil, err
	}
	return b.partBackend.RenewLocks(ctx, e, r)
}

func (b *electingBackend) SendOnce(ctx context.Context, e *placementpb.Entity, p uint32, msgs []*partitionpb.NewMessage) (*partitionpb.Result, error) {
	return b.Send(ctx, e, p, msgs)
}

func (b *electingBackend) Serving(e *placementpb.Entity, p uint32) bool {
	b.mu.Lock()
	at := b.leaderAt[p]
	b.mu.Unlock()
	return !time.Now().Before(at) && b.partBackend.Serving(e, p)
}

// TestKeyedSendToAPartitionNotServing, in virtual time, through go-amqp
// (which does not retry): a keyed send to a partition that reads not
// serving gives up after unservedWait (5 s) with
// com.microsoft:timeout, which the SDKs retry, where it waited out
// sendTimeout (30 s) before: whether the partition read so from the start
// (the catalog records its group without quorum), or only once the send
// was under way (the router's calls found no leader). A PartitionKey and a
// SessionId alike; a request of 2 MiB after 7 s. Unkeyed sends meanwhile
// succeed elsewhere. A partition
// electing a leader for 4 s, not serving meanwhile, takes its keyed send
// without an error, once.
func TestKeyedSendToAPartitionNotServing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const parts, lost, late, electing = 4, 1, 2, 3
		b := &electingBackend{partBackend: newPartBackend(parts), leaderAt: map[uint32]time.Time{}}
		b.elect(lost, time.Now().Add(time.Hour))
		b.partBackend.e.Properties.MaxMessageSizeInKilobytes = 4 << 10 // for the large send below
		f := serveInMemory(t, frontend.Config{Backend: b, Rules: devRules(t), ReceiveWait: 500 * time.Millisecond})
		ctx := t.Context()
		sess, err := plainConn(t, f).NewSession(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		snd, err := sess.NewSender(ctx, "pq", nil)
		if err != nil {
			t.Fatal(err)
		}
		// send sends a message keyed to partition p (by its PartitionKey,
		// or with session by its SessionId) and returns what it took.
		send := func(p uint32, session bool, body string) (time.Duration, error) {
			m := goamqp.NewMessage([]byte(body))
			if body == "large" {
				m = goamqp.NewMessage(make([]byte, 2<<20+1000))
			}
			key := keyFor(p, parts)
			if session {
				m.Properties = &goamqp.MessageProperties{GroupID: &key}
			} else {
				m.Annotations = goamqp.Annotations{"x-opt-partition-key": key}
			}
			start := time.Now()
			err := snd.Send(ctx, m, nil)
			return time.Since(start), err
		}
		wantTimeout := func(what string, took time.Duration, err error, bound time.Duration) {
			t.Helper()
			var ae *goamqp.Error
			if !errors.As(err, &ae) || ae.Condition != "com.microsoft:timeout" {
				t.Fatalf("%s: %v, want com.microsoft:timeout", what, err)
			}
			if took > bound {
				t.Fatalf("%s failed after %v, want within %v", what, took, bound)
			}
			t.Logf("%s failed after %v: %s", what, took, ae.Condition)
		}

		for _, session := range []bool{false, true} {
			took, err := send(lost, session, "keyed")
			wantTimeout(fmt.Sprintf("keyed send (session %v) to partition %d, not serving", session, lost), took, err, 5*time.Second+keyedServingPollForTest)
		}
		// A request of 2 MiB gets two seconds more: after a leader change
		// it is carried to the new leader again.
		took, err := send(lost, false, "large")
		wantTimeout(fmt.Sprintf("keyed send of 2 MiB to partition %d, not serving", lost), took, err, 7*time.Second+keyedServingPollForTest)
		if took < 7*time.Second {
			t.Fatalf("keyed send of 2 MiB gave up after %v, before 7 s", took)
		}
		for i := range 8 {
			if err := snd.Send(ctx, goamqp.NewMessage([]byte(fmt.Sprint("unkeyed-", i))), nil); err != nil {
				t.Fatalf("unkeyed send %d with partition %d not serving: %v", i, lost, err)
			}
		}

		// Serving well, and hanging: it reads not serving 2 s into the
		// send, and the send gives up 5 s later.
		b.partBackend.mu.Lock()
		b.partBackend.hung[late], b.partBackend.stale = true, true
		b.partBackend.mu.Unlock()
		go func() {
			time.Sleep(2 * time.Second)
			b.partBackend.mu.Lock()
			b.partBackend.down[late], b.partBackend.stale = true, false
			b.partBackend.mu.Unlock()
		}()
		took, err = send(late, false, "keyed-late")
		wantTimeout(fmt.Sprintf("keyed send to partition %d, not serving from 2 s into it", late), took, err, 7*time.Second+keyedServingPollForTest)
		if took < 7*time.Second {
			t.Fatalf("keyed send to partition %d gave up after %v, before it read not serving for 5 s", late, took)
		}

		b.elect(electing, time.Now().Add(4*time.Second))
		if took, err := send(electing, false, "keyed-electing"); err != nil {
			t.Fatalf("keyed send to partition %d electing for 4 s: %v", electing, err)
		} else {
			t.Logf("keyed send to partition %d electing for 4 s accepted after %v", electing, took)
		}
		n := b.stored()
		if total := n[0] + n[1] + n[2] + n[3]; n[lost] != 0 || total != 9 {
			t.Fatalf("stored per partition %v: want the 8 unkeyed messages and the electing partition's keyed one, each once, none in partition %d", n, lost)
		}
	})
}

// keyedServingPollForTest is frontend's servingPoll: a partition
// that turns not serving is seen so within a poll.
const keyedServingPollForTest = 200 * time.Millisecond

// TestSendToAQueueNotServing, in virtual time, through go-amqp: a send to
// an entity of one partition (a plain queue) whose group reads not
// serving gives up after 5 s with com.microsoft:timeout, as a keyed one
// does, where it waited out sendTimeout (30 s) before; a group electing a
// leader for 4 s takes it without an error, and so does the group once
// it serves again.
func TestSendToAQueueNotServing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &electingBackend{partBackend: newPartBackend(1), leaderAt: map[uint32]time.Time{}}
		b.elect(0, time.Now().Add(time.Hour))
		f := serveInMemory(t, frontend.Config{Backend: b, Rules: devRules(t), ReceiveWait: 500 * time.Millisecond})
		ctx := t.Context()
		sess, err := plainConn(t, f).NewSession(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		snd, err := sess.NewSender(ctx, "pq", nil)
		if err != nil {
			t.Fatal(err)
		}
		send := func(body string) (time.Duration, error) {
			start := time.Now()
			err := snd.Send(ctx, goamqp.NewMessage([]byte(body)), nil)
			return time.Since(start), err
		}
		took, err := send("lost")
		var ae *goamqp.Error
		if !errors.As(err, &ae) || ae.Condition != "com.microsoft:timeout" {
			t.Fatalf("send to a queue whose group does not serve: %v, want com.microsoft:timeout", err)
		}
		if took < 5*time.Second || took > 5*time.Second+keyedServingPollForTest {
			t.Fatalf("send to a queue whose group does not serve failed after %v, want 5 s", took)
		}
		t.Logf("send to a queue whose group does not serve: %s after %v", ae.Condition, took)

		b.elect(0, time.Now().Add(4*time.Second))
		if took, err := send("electing"); err != nil {
			t.Fatalf("send to a queue whose group elects a leader for 4 s: %v after %v", err, took)
		}
		if _, err := send("back"); err != nil {
			t.Fatalf("send to a queue whose group serves again: %v", err)
		}
		if n := b.stored(); n[0] != 2 {
			t.Fatalf("the queue holds %d messages, want the 2 acknowledged", n[0])
		}
	})
}

// onceFailing is electingBackend whose SendOnce fails at once while its
// partition has no leader, as the router's does when no replica leads.
type onceFailing struct{ *electingBackend }

func (b onceFailing) SendOnce(ctx context.Context, e *placementpb.Entity, p uint32, msgs []*partitionpb.NewMessage) (*partitionpb.Result, error) {
	b.mu.Lock()
	at := b.leaderAt[p]
	b.mu.Unlock()
	if time.Now().Before(at) {
		return nil, fmt.Errorf("%w: partition %d has no leader", frontend.ErrUnavailable, p)
	}
	return b.electingBackend.SendOnce(ctx, e, p, msgs)
}

// TestUnkeyedSendNoGroupServes, in virtual time: an unkeyed send to a
// partitioned entity of which no group takes it waits at one partition as
// a keyed send does: it gives up after 5 s of not serving with
// com.microsoft:timeout, where it waited out sendTimeout (30 s) before,
// and succeeds when the groups elect leaders within 3 s.
func TestUnkeyedSendNoGroupServes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const parts = 4
		b := onceFailing{&electingBackend{partBackend: newPartBackend(parts), leaderAt: map[uint32]time.Time{}}}
		electAll := func(d time.Duration) {
			for p := range uint32(parts) {
				b.elect(p, time.Now().Add(d))
			}
		}
		electAll(time.Hour)
		f := serveInMemory(t, frontend.Config{Backend: b, Rules: devRules(t), ReceiveWait: 500 * time.Millisecond})
		ctx := t.Context()
		sess, err := plainConn(t, f).NewSession(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		snd, err := sess.NewSender(ctx, "pq", nil)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		err = snd.Send(ctx, goamqp.NewMessage([]byte("nowhere")), nil)
		took := time.Since(start)
		var ae *goamqp.Error
		if !errors.As(err, &ae) || ae.Condition != "com.microsoft:timeout" {
			t.Fatalf("unkeyed send with no group serving: %v, want com.microsoft:timeout", err)
		}
		if took < 5*time.Second || took > 5*time.Second+keyedServingPollForTest {
			t.Fatalf("unkeyed send with no group serving failed after %v, want 5 s", took)
		}
		t.Logf("unkeyed send with no group serving: %s after %v", ae.Condition, took)

		electAll(3 * time.Second)
		start = time.Now()
		if err := snd.Send(ctx, goamqp.NewMessage([]byte("electing")), nil); err != nil {
			t.Fatalf("unkeyed send with every group electing for 3 s: %v after %v", err, time.Since(start))
		}
		n := b.stored()
		if total := n[0] + n[1] + n[2] + n[3]; total != 1 {
			t.Fatalf("stored per partition %v, want the one acknowledged", n)
		}
	})
}

// TestManagementSettleNotServing, in virtual time, through $management
// requests of go-amqp: an update-disposition (a complete by lock token),
// a renew-lock, a cancel-scheduled-message and a
// receive-by-sequence-number of a partition whose group reads not
// serving are answered 503 com.microsoft:timeout, which the SDKs retry,
// after 5 s, where they were answered after the whole 30 s before; once
// the group serves again, the complete succeeds.
func TestManagementSettleNotServing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &electingBackend{partBackend: newPartBackend(1), leaderAt: map[uint32]time.Time{}}
		b.put(0, "locked")
		f := serveInMemory(t, frontend.Config{Backend: b, Rules: devRules(t), ReceiveWait: 500 * time.Millisecond})
		ctx := t.Context()
		sess, err := plainConn(t, f).NewSession(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		rcv, err := sess.NewReceiver(ctx, "pq", &goamqp.ReceiverOptions{Credit: 1})
		if err != nil {
			t.Fatal(err)
		}
		m, err := rcv.Receive(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		// The delivery tag is the lock token in .NET's byte order (the
		// first three groups little-endian); $management takes a UUID.
		var token goamqp.UUID
		if copy(token[:], m.DeliveryTag) != 16 {
			t.Fatalf("delivery tag %x is no lock token", m.DeliveryTag)
		}
		slices.Reverse(token[0:4])
		slices.Reverse(token[4:6])
		slices.Reverse(token[6:8])
		req, err := sess.NewSender(ctx, "pq/$management", nil)
		if err != nil {
			t.Fatal(err)
		}
		replies, err := sess.NewReceiver(ctx, "pq/$management", &goamqp.ReceiverOptions{TargetAddress: "mgmt-reply", Credit: 10})
		if err != nil {
			t.Fatal(err)
		}
		call := func(op string, body map[string]any) (int32, any, time.Duration) {
			t.Helper()
			replyTo := "mgmt-reply"
			start := time.Now()
			err := req.Send(ctx, &goamqp.Message{
				Properties:            &goamqp.MessageProperties{MessageID: op, ReplyTo: &replyTo},
				ApplicationProperties: map[string]any{"operation": op},
				Value:                 body,
			}, nil)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := replies.Receive(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			status, _ := resp.ApplicationProperties["status-code"].(int32)
			return status, resp.ApplicationProperties["error-condition"], time.Since(start)
		}
		complete := map[string]any{"lock-tokens": []goamqp.UUID{token}, "disposition-status": "completed"}

		b.elect(0, time.Now().Add(time.Hour))
		for _, op := range []struct {
			name string
			body map[string]any
		}{
			{"com.microsoft:update-disposition", complete},
			{"com.microsoft:renew-lock", map[string]any{"lock-tokens": []goamqp.UUID{token}}},
			{"com.microsoft:cancel-scheduled-message", map[string]any{"sequence-numbers": []int64{2}}},
			{"com.microsoft:receive-by-sequence-number", map[string]any{"sequence-numbers": []int64{1}, "receiver-settle-mode": uint32(1)}},
		} {
			status, cond, took := call(op.name, op.body)
			if status != 503 || fmt.Sprint(cond) != "com.microsoft:timeout" {
				t.Fatalf("%s of a partition not serving: %d %v, want 503 com.microsoft:timeout", op.name, status, cond)
			}
			if took < 5*time.Second || took > 5*time.Second+keyedServingPollForTest {
				t.Fatalf("%s of a partition not serving answered after %v, want 5 s", op.name, took)
			}
			t.Logf("%s of a partition not serving: %d %v after %v", op.name, status, cond, took)
		}

		b.elect(0, time.Now())
		if status, cond, _ := call("com.microsoft:update-disposition", complete); status != 200 {
			t.Fatalf("complete once the group serves: %d %v", status, cond)
		}
		if n := b.stored(); n[0] != 0 {
			t.Fatalf("%d messages left after the complete", n[0])
		}
	})
}

// TestLinkSettleNotServing: a complete sent on the receive link, as the
// SDKs send it, of a message whose partition's group reads not serving
// is rejected with com.microsoft:timeout after unservedWait rather than
// sendTimeout, and the message stays locked.
func TestLinkSettleNotServing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &electingBackend{partBackend: newPartBackend(1), leaderAt: map[uint32]time.Time{}}
		b.put(0, "locked")
		f := serveInMemory(t, frontend.Config{Backend: b, Rules: devRules(t), ReceiveWait: 500 * time.Millisecond})
		ctx := t.Context()
		sess, err := plainConn(t, f).NewSession(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		rcv, err := sess.NewReceiver(ctx, "pq", &goamqp.ReceiverOptions{Credit: 1, SettlementMode: goamqp.ReceiverSettleModeSecond.Ptr()})
		if err != nil {
			t.Fatal(err)
		}
		m, err := rcv.Receive(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		b.elect(0, time.Now().Add(time.Hour))
		start := time.Now()
		err = rcv.AcceptMessage(ctx, m)
		took := time.Since(start)
		var amqpErr *goamqp.Error
		if !errors.As(err, &amqpErr) || amqpErr.Condition != "com.microsoft:timeout" {
			t.Fatalf("complete of a partition not serving: %v, want com.microsoft:timeout", err)
		}
		if took < 5*time.Second || took > 5*time.Second+keyedServingPollForTest {
			t.Fatalf("complete of a partition not serving answered after %v, want 5 s", took)
		}
		// Not completed: it stays locked, and comes back when its lock
		// ends, as after any failed complete.
		if n := b.stored(); n[0] != 1 {
			t.Fatalf("%d messages left after the failed complete, want 1", n[0])
		}
	})
}
