package frontend

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"time"

	"github.com/quorumbus/quorumbus/frontend/amqp"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// Service Bus error conditions the SDKs know.
const (
	condLockLost       amqp.Symbol = "com.microsoft:message-lock-lost"
	condTimeout        amqp.Symbol = "com.microsoft:timeout"
	condEntityDisabled amqp.Symbol = "com.microsoft:entity-disabled"

	condSessionCannotBeLocked amqp.Symbol = "com.microsoft:session-cannot-be-locked"
	condSessionLockLost       amqp.Symbol = "com.microsoft:session-lock-lost"
)

// failure is an error a client sees: an AMQP condition, the status code
// of a $management response, and whether retrying can succeed.
type failure struct {
	cond      amqp.Symbol
	status    int32
	retriable bool
	msg       string
}

// The one table that maps what can go wrong to what clients see.
var (
	failNotFound = failure{amqp.ErrCondNotFound, 404, false, "the messaging entity could not be found"}
	failLockLost = failure{condLockLost, 410, false, "the lock supplied is invalid: it expired, or the message was already settled or removed"}
	failQuota    = failure{amqp.ErrCondResourceLimitExceeded, 403, false, "the entity is full (MaxSizeInMegabytes reached)"}
	failDiskFull = failure{amqp.ErrCondResourceLimitExceeded, 507, true, "the broker's storage is full; new messages are refused until space is freed"}
	failInvalid  = failure{amqp.ErrCondNotAllowed, 400, false, "the operation is not valid"}
	failDisabled = failure{condEntityDisabled, 400, false, "the messaging entity is disabled"}
	failTimeout  = failure{condTimeout, 503, true, "the operation did not complete in time; the partition may be electing a leader"}
	failInternal = failure{amqp.ErrCondInternalError, 500, true, "internal error"}
	// The SDKs retry com.microsoft:timeout in place (Go: RecoveryKindNone);
	// server-busy would do as well in Go, but .NET waits 10 s on it.
	failCatalog    = failure{condTimeout, 503, true, "the entity catalog is not available yet; the cluster may be starting or electing its catalog leader"}
	failNotImpl    = failure{amqp.ErrCondNotImplemented, 501, false, "not implemented yet"}
	failBadRequest = failure{amqp.ErrCondDecodeError, 400, false, "the request could not be decoded"}
	failBadField   = failure{amqp.ErrCondInvalidField, 400, false, "a request field is missing or malformed"}

	// Sessions. A lost session lock is 410 on $management, like a lost
	// message lock (the SDKs report both as lock lost).
	failSessionLocked   = failure{condSessionCannotBeLocked, 409, false, "the session is locked by another receiver"}
	failSessionLockLost = failure{condSessionLockLost, 410, false, "the session lock was lost: it expired or was released; accept the session again"}
	failNoSession       = failure{condTimeout, 408, false, "no session became available within the timeout"}
	failNeedsSession    = failure{amqp.ErrCondNotAllowed, 400, false, "the entity requires sessions: accept a session to receive from it"}
	failNoSessions      = failure{amqp.ErrCondNotAllowed, 400, false, "the entity does not require sessions: a session receiver cannot be created for it"}
)

func resultFailure(code partitionpb.ResultCode) (failure, bool) {
	switch code {
	case partitionpb.ResultCode_RESULT_OK:
		return failure{}, false
	case partitionpb.ResultCode_RESULT_ENTITY_NOT_FOUND:
		return failNotFound, true
	case partitionpb.ResultCode_RESULT_LOCK_LOST:
		return failLockLost, true
	case partitionpb.ResultCode_RESULT_QUOTA_EXCEEDED:
		return failQuota, true
	case partitionpb.ResultCode_RESULT_ENTITY_DISABLED:
		return failDisabled, true
	case partitionpb.ResultCode_RESULT_SESSION_LOCK_LOST:
		return failSessionLockLost, true
	case partitionpb.ResultCode_RESULT_SESSION_CANNOT_BE_LOCKED:
		return failSessionLocked, true
	}
	return failInvalid, true
}

func errFailure(err error) failure {
	switch {
	case errors.Is(err, ErrEntityNotFound):
		return failNotFound
	case errors.Is(err, ErrCatalogUnavailable):
		return failCatalog
	case errors.Is(err, ErrUnavailable), errors.Is(err, context.DeadlineExceeded):
		return failTimeout
	case errors.Is(err, ErrInvalid):
		return failInvalid
	case errors.Is(err, ErrStorageFull):
		return failDiskFull
	case errors.Is(err, ErrServerBusy):
		return failBusy
	}
	return failInternal
}

// amqpError renders a failure with a description that carries a tracking
// id, as Service Bus does, so that a client's report can be found in logs.
func (f failure) amqpError(detail string) *amqp.Error {
	return &amqp.Error{Condition: f.cond, Description: f.describe(detail)}
}

func (f failure) describe(detail string) string {
	msg := f.msg
	if detail != "" {
		msg += ": " + detail
	}
	retry := ""
	if f.retriable {
		retry = " The operation can be retried."
	}
	return fmt.Sprintf("%s.%s TrackingId:%s, Timestamp:%s", msg, retry, trackingID(), time.Now().UTC().Format(time.RFC3339))
}

func trackingID() string {
	var b [16]byte
	rand.Read(b[:])
	return amqp.UUID(b).String()
}
