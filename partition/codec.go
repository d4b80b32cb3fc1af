package partition

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// FormatV1 is the first byte of every Raft entry this package writes: a
// partitionpb.Batch in protobuf follows. A replica that meets another format
// byte fails (ErrUnknownFormat) and its group stops: a newer leader wrote
// an entry this version cannot apply, and guessing would diverge.
//
// Inside a known format, unknown protobuf fields are ignored: a field may be
// added to a command only if replicas that ignore it stay identical. A
// command whose oneof this version does not know stops the group
// (ErrUnknownCommand) when it is applied.
const FormatV1 byte = 1

// FormatV2 is FormatV1 with request ids (Command.request_id) and delete
// versions (DeleteEntity.version) honoured. EncodeBatch writes it only for
// a batch that carries one, so that a replica of a version that would
// ignore them (apply a repeated request again, let a late upsert re-create
// a deleted entity) stops instead of diverging.
const FormatV2 byte = 2

// FormatV3 is FormatV2 with request ids on peek-lock Locks and
// LockBySequences honoured (requests.go): a replica of a version that
// refuses them would answer with an error and lock nothing while the
// others lock.
const FormatV3 byte = 3

// FormatV4 is FormatV3 with staged bodies (StageBody, and
// NewMessage.staged_body, blobs.go) honoured: a replica of a version that
// would ignore staged_body would store a message without its bare message.
const FormatV4 byte = 4

// FormatV5 is FormatV4 with sessions (sessions.go): the session commands,
// and the session of a Lock or LockBySequence honoured. A replica of a
// version that would ignore a Lock's session would take messages of any
// session, or none, while the others take the session's.
const FormatV5 byte = 5

// FormatV6 is FormatV5 with auto-forwarding (forward.go):
// NewMessage.forwarded honoured. A replica of a version that would ignore
// it would take a forwarded message twice where the others drop it.
const FormatV6 byte = 6

// FormatV7 is FormatV6 with more of a topic's sends honoured (a message
// that carries a filter view is sent to a topic): a forwarded one, one
// staged in chunks, and a scheduled one, whose copies a later
// CancelScheduled on the topic finds (fanout.go, topicsched.go). A
// replica of a version that refused the first two would refuse a send
// the others take, and one that does not index the third would keep
// copies the others cancel.
const FormatV7 byte = 7

// FormatV8 is FormatV7 with request ids on RenewSessionLock,
// SetSessionState and ReleaseSession (requests.go). A replica of a
// version that refused them would answer invalid and change nothing
// where the others apply the command.
const FormatV8 byte = 8

// LastFormat is the newest format this package reads; a newer one is
// ErrUnknownFormat.
const LastFormat = FormatV8

var marshal = proto.MarshalOptions{Deterministic: true}

// EncodeBatch encodes b as a Raft entry: the format byte, then the
// protobuf.
func EncodeBatch(b *partitionpb.Batch) ([]byte, error) {
	buf := make([]byte, 1, 1+marshal.Size(b))
	// The oldest format that holds every command as it is meant.
	buf[0] = FormatV1
	for _, c := range b.Commands {
		switch {
		case len(c.RequestId) > 0 && sessionRequest(c):
			buf[0] = max(buf[0], FormatV8)
		case sessional(c):
			buf[0] = max(buf[0], FormatV5)
		case stages(c):
			buf[0] = max(buf[0], FormatV4)
		case len(c.RequestId) > 0 && (c.GetLock() != nil || c.GetLockBySequence() != nil):
			buf[0] = max(buf[0], FormatV3)
		case len(c.RequestId) > 0 || c.GetDeleteEntity().GetVersion() > 0:
			buf[0] = max(buf[0], FormatV2)
		}
	}
	if buf[0] < FormatV7 && topicV7(b) {
		buf[0] = FormatV7
	} else if buf[0] < FormatV6 && forwards(b) {
		buf[0] = FormatV6
	}
	// The sizes Size just cached (b is not changed in between): without
	// them the marshaller walks every message again to size it.
	buf, err := proto.MarshalOptions{Deterministic: true, UseCachedSize: true}.MarshalAppend(buf, b)
	if err != nil {
		return nil, fmt.Errorf("partition: encode batch: %w", err)
	}
	return buf, nil
}

// DecodeBatch decodes a Raft entry written by EncodeBatch. The sections of
// the messages it holds (NewMessage header, annotations and bare) point
// into data, which the caller must not change while it uses them
// (decode.go).
func DecodeBatch(data []byte) (*partitionpb.Batch, error) {
	return decodeEntry(data, nil)
}

// decodeEntry is DecodeBatch; with views, it leaves the filter views of
// sends to topics undecoded (lazyViews), for the few a replica reads.
func decodeEntry(data []byte, views lazyViews) (*partitionpb.Batch, error) {
	if len(data) == 0 {
		return nil, fmt.Errorf("%w: empty entry", ErrMalformed)
	}
	if data[0] < FormatV1 || data[0] > LastFormat {
		return nil, fmt.Errorf("%w: %d", ErrUnknownFormat, data[0])
	}
	b, ok := aliasBatch(data[1:], views)
	if !ok {
		clear(views)
		b = new(partitionpb.Batch)
		if err := proto.Unmarshal(data[1:], b); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
		}
	}
	if data[0] == FormatV1 {
		for _, c := range b.Commands { // unknown to format 1: ignored, as its replicas did
			c.RequestId = nil
			if d := c.GetDeleteEntity(); d != nil {
				d.Version = 0
			}
		}
	}
	if data[0] < FormatV4 {
		for _, c := range b.Commands { // unknown before format 4: ignored
			for _, m := range c.GetEnqueue().GetMessages() {
				m.StagedBody, m.StagedLength, m.StagedCrc = nil, 0, 0
			}
		}
	}
	if data[0] < FormatV5 {
		for _, c := range b.Commands { // unknown before format 5: ignored
			if l := c.GetLock(); l != nil {
				l.SessionId, l.SessionToken = "", nil
			}
			if l := c.GetLockBySequence(); l != nil {
				l.SessionId, l.SessionToken = "", nil
			}
		}
	}
	if data[0] < FormatV6 {
		for _, c := range b.Commands { // unknown before format 6: ignored
			for _, m := range c.GetEnqueue().GetMessages() {
				m.Forwarded = nil
			}
		}
	}
	// Format 2's replicas refused a request id on a Lock, but no version
	// that wrote format 2 put one there, so no entry tells the two apart.
	return b, nil
}

// sessional reports whether c is a session command or receives from a
// session.
func sessional(c *partitionpb.Command) bool {
	switch c.GetOp().(type) {
	case *partitionpb.Command_AcceptSession, *partitionpb.Command_RenewSessionLock,
		*partitionpb.Command_SetSessionState, *partitionpb.Command_ReleaseSession,
		*partitionpb.Command_ExpireSessionLocks:
		return true
	}
	return len(c.GetLock().GetSessionToken()) > 0 || len(c.GetLockBySequence().GetSessionToken()) > 0 ||
		c.GetLock().GetSessionId() != "" || c.GetLockBySequence().GetSessionId() != ""
}

// sessionRequest reports whether c is a session command that format 8
// takes a request id on.
func sessionRequest(c *partitionpb.Command) bool {
	switch c.GetOp().(type) {
	case *partitionpb.Command_RenewSessionLock, *partitionpb.Command_SetSessionState, *partitionpb.Command_ReleaseSession:
		return true
	}
	return false
}

// stages reports whether c stages a body or names a staged one.
func stages(c *partitionpb.Command) bool {
	if c.GetStageBody() != nil {
		return true
	}
	for _, m := range c.GetEnqueue().GetMessages() {
		// Any of the three: an entry of an earlier format drops them all.
		if len(m.StagedBody) > 0 || m.StagedLength > 0 || m.StagedCrc > 0 {
			return true
		}
	}
	return false
}

// topicV7 reports whether b sends to a topic (a message with a filter
// view) a message that format 7 tells apart: forwarded, staged, or
// scheduled.
func topicV7(b *partitionpb.Batch) bool {
	for _, c := range b.Commands {
		for _, m := range c.GetEnqueue().GetMessages() {
			if m.FilterView != nil && (m.Forwarded != nil || len(m.StagedBody) > 0 || m.StagedLength > 0 || m.StagedCrc > 0 || m.ScheduledEnqueueTimeMs != 0) {
				return true
			}
		}
	}
	return false
}

// forwards reports whether b carries a forwarded message.
func forwards(b *partitionpb.Batch) bool {
	for _, c := range b.Commands {
		for _, m := range c.GetEnqueue().GetMessages() {
			if m.Forwarded != nil {
				return true
			}
		}
	}
	return false
}
