package partition

import (
	"errors"

	"github.com/quorumbus/quorumbus/partition/store"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// Rejections: a command that breaks a rule is answered with a Result whose
// code names the rule; nothing of it is applied. Code maps these errors to
// result codes and Err maps back, both from the one table below.
var (
	ErrEntityNotFound = errors.New("partition: entity not found")
	ErrLockLost       = errors.New("partition: lock lost")
	ErrQuotaExceeded  = errors.New("partition: quota exceeded")
	ErrEntityDisabled = errors.New("partition: entity disabled")
	ErrInvalid        = errors.New("partition: invalid command")
	// ErrSessionLockLost: the session lock a command names has ended or
	// was never granted.
	ErrSessionLockLost = errors.New("partition: session lock lost")
	// ErrSessionLocked: another receiver holds the session's lock.
	ErrSessionLocked = errors.New("partition: session cannot be locked")
)

// Failures: Apply, Restore and the reads return these (wrapped) when the
// store cannot be trusted or the machine cannot go on. After a failed Apply
// the machine refuses further work; the caller stops the group (fail-stop)
// and reopens it, which replays the Raft log tail.
var (
	ErrCorrupt        = store.ErrCorrupt // a checksum mismatch, or records that disagree
	ErrUnknownFormat  = errors.New("partition: unknown batch format")
	ErrMalformed      = errors.New("partition: malformed batch")
	ErrUnknownCommand = errors.New("partition: unknown command")
	ErrBadSnapshot    = store.ErrBadSnapshot
	ErrClosed         = errors.New("partition: closed")
)

// codes is the mapping between rejections and result codes.
var codes = []struct {
	err  error
	code partitionpb.ResultCode
}{
	{ErrEntityNotFound, partitionpb.ResultCode_RESULT_ENTITY_NOT_FOUND},
	{ErrLockLost, partitionpb.ResultCode_RESULT_LOCK_LOST},
	{ErrQuotaExceeded, partitionpb.ResultCode_RESULT_QUOTA_EXCEEDED},
	{ErrInvalid, partitionpb.ResultCode_RESULT_INVALID},
	{ErrEntityDisabled, partitionpb.ResultCode_RESULT_ENTITY_DISABLED},
	{ErrSessionLockLost, partitionpb.ResultCode_RESULT_SESSION_LOCK_LOST},
	{ErrSessionLocked, partitionpb.ResultCode_RESULT_SESSION_CANNOT_BE_LOCKED},
}

// Code returns the result code for err: RESULT_OK for nil, the rule's code
// for a rejection (matched with errors.Is). ok is false when err is not a
// rejection, that is a storage failure that must stop the group.
func Code(err error) (code partitionpb.ResultCode, ok bool) {
	if err == nil {
		return partitionpb.ResultCode_RESULT_OK, true
	}
	for _, c := range codes {
		if errors.Is(err, c.err) {
			return c.code, true
		}
	}
	return 0, false
}

// Err returns the sentinel error for a result code: nil for RESULT_OK, and
// ErrInvalid for a code this version does not know.
func Err(code partitionpb.ResultCode) error {
	if code == partitionpb.ResultCode_RESULT_OK {
		return nil
	}
	for _, c := range codes {
		if c.code == code {
			return c.err
		}
	}
	return ErrInvalid
}

// ResultErr returns the error a Result stands for: nil when it is OK,
// otherwise the code's sentinel wrapped with the result's description.
func ResultErr(r *partitionpb.Result) error {
	err := Err(r.GetCode())
	if err == nil || r.GetDescription() == "" || r.GetDescription() == err.Error() {
		return err
	}
	return &describedError{sentinel: err, desc: r.GetDescription()}
}

type describedError struct {
	sentinel error
	desc     string
}

func (e *describedError) Error() string { return e.desc }
func (e *describedError) Unwrap() error { return e.sentinel }
