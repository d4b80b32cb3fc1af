package frontend_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

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

// unservedSessions is a session backend whose only group has no leader:
// Serving reads false, and an accept waits for one until its context ends,
// as the router's calls do.
type unservedSessions struct{ *lateSessions }

func (b *unservedSessions) Serving(*placementpb.Entity, uint32) bool { return false }

func (b *unservedSessions) AcceptSession(ctx context.Context, _ *placementpb.Entity, _ *partitionpb.AcceptSessionRequest) (*partitionpb.Result, []byte, error) {
	<-ctx.Done()
	return nil, nil, fmt.Errorf("%w: no leader", frontend.ErrUnavailable)
}
