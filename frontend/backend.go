package frontend

import (
	"context"
	"errors"
	"time"

	"github.com/quorumbus/quorumbus/proto/partitionpb"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// Backend is what the front-end needs from the cluster: where an entity
// lives and the partition operations on it. frontend/routing implements it
// over gRPC with the routing table that placement publishes; every call
// reaches the leader of the partition's group, following leader changes
// without surfacing them.
type Backend interface {
	// Entity looks an entity up by name (case-insensitively).
	Entity(name string) (*placementpb.Entity, error)
	Send(ctx context.Context, e *placementpb.Entity, partition uint32, msgs []*partitionpb.NewMessage) (*partitionpb.Result, error)
	Receive(ctx context.Context, e *placementpb.Entity, req *partitionpb.ReceiveRequest) (*partitionpb.Result, error)
	Settle(ctx context.Context, e *placementpb.Entity, s *partitionpb.Settle) (*partitionpb.Result, error)
	RenewLocks(ctx context.Context, e *placementpb.Entity, r *partitionpb.RenewLocks) (*partitionpb.Result, error)
	// Peek reads messages from a sequence number on, without locking them.
	Peek(ctx context.Context, e *placementpb.Entity, req *partitionpb.PeekRequest) ([]*partitionpb.Message, error)
	CancelScheduled(ctx context.Context, e *placementpb.Entity, c *partitionpb.CancelScheduled) (*partitionpb.Result, error)
	// ReceiveDeferred locks (or takes) deferred messages by sequence number.
	ReceiveDeferred(ctx context.Context, e *placementpb.Entity, req *partitionpb.ReceiveDeferredRequest) (*partitionpb.Result, error)
	// Serving reports whether the group of the entity's partition can be
	// expected to take a send: it is recorded with a quorum (placement
	// marks a group silent for a few seconds without one), and the
	// backend's own latest calls to it found a leader that answered. A
	// hint, never a promise: a group may lose its quorum after either
	// said otherwise.
	Serving(e *placementpb.Entity, partition uint32) bool
}

// OnceSender is a Backend that can send to a partition without waiting
// for its group to have a leader: the front-end sends unkeyed messages so,
// and takes them to another partition when this one cannot take them now
// (sender.sendUnkeyed).
type OnceSender interface {
	// SendOnce is Send that tries the partition group's leader and each
	// of its other replicas once, without waits, and fails with
	// ErrUnavailable when none took the request. A send that failed so
	// may still have been stored, when an attempt ended without an
	// answer (a node that did not answer in time, a leader that lost its
	// term after proposing it).
	SendOnce(ctx context.Context, e *placementpb.Entity, partition uint32, msgs []*partitionpb.NewMessage) (*partitionpb.Result, error)
}

// Errors a Backend returns; errorCondition maps them to what clients see.
var (
	ErrEntityNotFound = errors.New("frontend: entity not found")
	ErrUnavailable    = errors.New("frontend: partition unavailable")
	// ErrCatalogUnavailable: whether the entity exists cannot be told
	// now (no catalog member reachable or caught up); never not-found,
	// which clients take as final.
	ErrCatalogUnavailable = errors.New("frontend: entity catalog unavailable")
	// ErrInvalid: the partition refused the request itself (too large, or
	// malformed); retrying cannot help.
	ErrInvalid = errors.New("frontend: invalid request")
	// ErrStorageFull: the partition's storage node is out of disk (or
	// down to the reserve it keeps for settles) and refuses new messages
	// until space is freed; settles and receives go on.
	ErrStorageFull = errors.New("frontend: partition storage full")
	// ErrServerBusy: the partition's leader refused a send, unproposed,
	// because its proposal queue was full; the client may retry.
	ErrServerBusy = errors.New("frontend: partition leader busy")
)

// SessionBackend is what a Backend offers for message sessions; the
// front-end refuses session receivers (not implemented) on a Backend
// without it. Each call goes to the partition that holds the session.
type SessionBackend interface {
	// AcceptSession locks a session (req.SessionId, or with req.Next the
	// next available, waiting up to req.WaitMs). The result carries the
	// session id and locked-until; token names the lock.
	AcceptSession(ctx context.Context, e *placementpb.Entity, req *partitionpb.AcceptSessionRequest) (res *partitionpb.Result, token []byte, err error)
	// SessionReady waits up to wait for the entity partition to have a
	// session that an accept-next would take, locking none: true when
	// one is there (another receiver may still take it first).
	SessionReady(ctx context.Context, e *placementpb.Entity, partition uint32, wait time.Duration) (bool, error)
	RenewSessionLock(ctx context.Context, e *placementpb.Entity, r *partitionpb.RenewSessionLock) (*partitionpb.Result, error)
	SetSessionState(ctx context.Context, e *placementpb.Entity, s *partitionpb.SetSessionState) (*partitionpb.Result, error)
	// GetSessionState returns a locked session's state (nil: none).
	GetSessionState(ctx context.Context, e *placementpb.Entity, req *partitionpb.GetSessionStateRequest) (*partitionpb.Result, []byte, error)
	ReleaseSession(ctx context.Context, e *placementpb.Entity, r *partitionpb.ReleaseSession) (*partitionpb.Result, error)
	ListSessions(ctx context.Context, e *placementpb.Entity, req *partitionpb.ListSessionsRequest) ([]string, error)
}
