package frontend_test

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/quorumbus/quorumbus/frontend"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// lateSessions is a session backend whose accept-next answers lateBy after
// the wait it was given, as a partition leader does under load (its timer,
// then the way back over gRPC): with a session when session is set, else
// with none. It records the waits asked for and the locks given back.
type lateSessions struct {
	*memBackend
	lateBy  time.Duration
	session string

	mu       sync.Mutex
	waits    []time.Duration
	token    []byte
	released chan *partitionpb.ReleaseSession
}

func newLateSessions(lateBy time.Duration, session string) *lateSessions {
	b := newMemBackend("sq")
	b.entities["sq"].Properties = &placementpb.QueueProperties{RequiresSession: true}
	return &lateSessions{memBackend: b, lateBy: lateBy, session: session, released: make(chan *partitionpb.ReleaseSession, 4)}
}

var _ frontend.SessionBackend = (*lateSessions)(nil)

func (b *lateSessions) AcceptSession(ctx context.Context, _ *placementpb.Entity, req *partitionpb.AcceptSessionRequest) (*partitionpb.Result, []byte, error) {
	wait := time.Duration(req.WaitMs) * time.Millisecond
	b.mu.Lock()
	b.waits = append(b.waits, wait)
	b.mu.Unlock()
	select {
	case <-time.After(wait + b.lateBy):
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
	if b.session == "" {
		return &partitionpb.Result{}, nil, nil
	}
	token := bytes.Repeat([]byte{7}, partitionpb.LockTokenBytes)
	b.mu.Lock()
	b.token = token
	b.mu.Unlock()
	return &partitionpb.Result{SessionId: b.session, LockedUntilMs: []int64{time.Now().Add(time.Minute).UnixMilli()}}, token, nil
}

func (b *lateSessions) SessionReady(context.Context, *placementpb.Entity, uint32, time.Duration) (bool, error) {
	return false, nil
}

func (b *lateSessions) ReleaseSession(_ context.Context, _ *placementpb.Entity, r *partitionpb.ReleaseSession) (*partitionpb.Result, error) {
	b.released <- r
	return &partitionpb.Result{}, nil
}

func (b *lateSessions) RenewSessionLock(context.Context, *placementpb.Entity, *partitionpb.RenewSessionLock) (*partitionpb.Result, error) {
	return nil, errors.New("not used")
}

func (b *lateSessions) SetSessionState(context.Context, *placementpb.Entity, *partitionpb.SetSessionState) (*partitionpb.Result, error) {
	return nil, errors.New("not used")
}

func (b *lateSessions) GetSessionState(context.Context, *placementpb.Entity, *partitionpb.GetSessionStateRequest) (*partitionpb.Result, []byte, error) {
	return nil, nil, errors.New("not used")
}

func (b *lateSessions) ListSessions(context.Context, *placementpb.Entity, *partitionpb.ListSessionsRequest) ([]string, error) {
	return nil, errors.New("not used")
}

// acceptNextWithin runs the Go SDK's accept-next with a budget of 3 s and
// checks that it fails with the timeout an application looks for (not its
// context's deadline), within the budget.
func acceptNextWithin(t *testing.T, client *azservicebus.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	start := time.Now()
	_, err := client.AcceptNextSessionForQueue(ctx, "sq", nil)
	took := time.Since(start)
	var sbErr *azservicebus.Error
	if !errors.As(err, &sbErr) || sbErr.Code != azservicebus.CodeTimeout {
		t.Fatalf("accept next with none available, after %v: %v; want the service's timeout", took, err)
	}
	if took > 3*time.Second {
		t.Fatalf("accept next answered after %v, past the client's 3 s", took)
	}
}

// TestAcceptNextAnswersByItsDeadline: the front-end answers an accept-next
// that found nothing by its own deadline, not when the partition's leader
// answers after its wait. That answer comes later under load (0.1-0.2 s
// at a load of 10-30 on two cores), and with only the margin before the
// client's timeout left, the Go SDK failed with its context's deadline
// instead of the timeout (TestDevSessions at load 23-30).
func TestAcceptNextAnswersByItsDeadline(t *testing.T) {
	b := newLateSessions(time.Second, "")
	client := sdkClient(t, startFrontend(t, b))
	acceptNextWithin(t, client)
	b.mu.Lock()
	waits := b.waits
	b.mu.Unlock()
	// The SDK sends its time left less a little jitter (at most 30 ms at
	// 3 s), after its claims and session took theirs.
	if len(waits) != 1 || waits[0] > 2*time.Second || waits[0] < 1500*time.Millisecond {
		t.Fatalf("the partition was asked to wait %v; want one wait of 1.5-2 s, a second before the client's 3 s", waits)
	}
}

// TestAcceptNextGivesBackALateSession: a session that the partition locked
// for an accept-next the front-end had already answered (none in time) is
// released at once, not left locked for nobody until its lock runs out.
func TestAcceptNextGivesBackALateSession(t *testing.T) {
	b := newLateSessions(time.Second, "late")
	client := sdkClient(t, startFrontend(t, b))
	acceptNextWithin(t, client)
	select {
	case r := <-b.released:
		b.mu.Lock()
		token := b.token
		b.mu.Unlock()
		if r.SessionId != "late" || !bytes.Equal(r.Token, token) {
			t.Fatalf("released session %q token %x; want late under %x", r.SessionId, r.Token, token)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the session locked after the answer was never released")
	}
}
