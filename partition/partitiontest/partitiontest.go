// Package partitiontest helps tests drive a partition.Machine: it opens
// machines in temporary directories, numbers Raft entries, and builds
// commands tersely.
package partitiontest

import (
	"encoding/binary"
	"hash/crc32"
	"io"
	"log/slog"
	"testing"

	"github.com/quorumbus/quorumbus/partition"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// The sub-queues, for brevity.
const (
	Main       = partitionpb.SubQueue_SUB_QUEUE_MAIN
	DeadLetter = partitionpb.SubQueue_SUB_QUEUE_DEAD_LETTER
)

// Options are the machine options tests use: a small cache and no log.
func Options() partition.Options {
	return partition.Options{
		CacheBytes: 8 << 20,
		Logger:     slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
}

// Open opens a machine in a new temporary directory; it is closed when the
// test ends.
func Open(t testing.TB) *partition.Machine {
	t.Helper()
	return OpenDir(t, t.TempDir())
}

// OpenDir opens the machine in dir; it is closed when the test ends.
func OpenDir(t testing.TB, dir string) *partition.Machine {
	t.Helper()
	m, err := partition.Open(dir, Options())
	if err != nil {
		t.Fatalf("partition.Open(%s): %v", dir, err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return m
}

// Log numbers entries: the first gets index 1.
type Log struct {
	Last uint64 // index of the last entry made
}

// Entry encodes a batch of commands stamped nowMs as the next entry.
func (l *Log) Entry(t testing.TB, nowMs int64, cmds ...*partitionpb.Command) partition.Entry {
	t.Helper()
	data, err := partition.EncodeBatch(&partitionpb.Batch{NowMs: nowMs, Commands: cmds})
	if err != nil {
		t.Fatalf("EncodeBatch: %v", err)
	}
	l.Last++
	return partition.Entry{Index: l.Last, Data: data}
}

// Driver applies commands to a machine, one entry per call, at its clock.
type Driver struct {
	T   testing.TB
	M   *partition.Machine
	Log Log
	Now int64
	// Entries keeps every entry applied, for replaying them elsewhere.
	Entries []partition.Entry
}

// NewDriver opens a machine for t and a driver for it starting at nowMs.
func NewDriver(t testing.TB, nowMs int64) *Driver {
	return &Driver{T: t, M: Open(t), Now: nowMs}
}

// NewDriverLimits is NewDriver on a machine whose per-command limits are
// lim (lowered, so that a test reaches them with few messages).
func NewDriverLimits(t testing.TB, nowMs int64, lim partition.Limits) *Driver {
	t.Helper()
	opts := Options()
	opts.Limits = lim
	m, err := partition.Open(t.TempDir(), opts)
	if err != nil {
		t.Fatalf("partition.Open: %v", err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return &Driver{T: t, M: m, Now: nowMs}
}

// Apply applies the commands as one entry and returns their results.
func (d *Driver) Apply(cmds ...*partitionpb.Command) []*partitionpb.Result {
	d.T.Helper()
	e := d.Log.Entry(d.T, d.Now, cmds...)
	res, err := d.M.Apply([]partition.Entry{e})
	if err != nil {
		d.T.Fatalf("Apply entry %d: %v", e.Index, err)
	}
	d.Entries = append(d.Entries, e)
	return res[0]
}

// Do applies one command and returns its result.
func (d *Driver) Do(cmd *partitionpb.Command) *partitionpb.Result {
	d.T.Helper()
	return d.Apply(cmd)[0]
}

// OK applies one command and fails the test unless its result is OK.
func (d *Driver) OK(cmd *partitionpb.Command) *partitionpb.Result {
	d.T.Helper()
	r := d.Do(cmd)
	if r.Code != partitionpb.ResultCode_RESULT_OK {
		d.T.Fatalf("%v: %v %s", cmd, r.Code, r.Description)
	}
	return r
}

// Stats returns an entity partition's counters, failing the test on error.
func (d *Driver) Stats(id uint64, part uint32) *partitionpb.StatsResponse {
	d.T.Helper()
	s, err := d.M.Stats(id, part)
	if err != nil {
		d.T.Fatalf("Stats(%d, %d): %v", id, part, err)
	}
	return s
}

// Queue returns a config for entity partition id/part named name, with
// the defaults the machine fills in.
func Queue(id uint64, part uint32, name string) *partitionpb.EntityConfig {
	return &partitionpb.EntityConfig{EntityId: id, Partition: part, Name: name}
}

func cmd(c any) *partitionpb.Command {
	switch c := c.(type) {
	case *partitionpb.UpsertEntity:
		return &partitionpb.Command{Op: &partitionpb.Command_UpsertEntity{UpsertEntity: c}}
	case *partitionpb.DeleteEntity:
		return &partitionpb.Command{Op: &partitionpb.Command_DeleteEntity{DeleteEntity: c}}
	case *partitionpb.Enqueue:
		return &partitionpb.Command{Op: &partitionpb.Command_Enqueue{Enqueue: c}}
	case *partitionpb.StageBody:
		return &partitionpb.Command{Op: &partitionpb.Command_StageBody{StageBody: c}}
	case *partitionpb.Lock:
		return &partitionpb.Command{Op: &partitionpb.Command_Lock{Lock: c}}
	case *partitionpb.Settle:
		return &partitionpb.Command{Op: &partitionpb.Command_Settle{Settle: c}}
	case *partitionpb.RenewLocks:
		return &partitionpb.Command{Op: &partitionpb.Command_RenewLocks{RenewLocks: c}}
	case *partitionpb.ExpireLocks:
		return &partitionpb.Command{Op: &partitionpb.Command_ExpireLocks{ExpireLocks: c}}
	case *partitionpb.ActivateScheduled:
		return &partitionpb.Command{Op: &partitionpb.Command_ActivateScheduled{ActivateScheduled: c}}
	case *partitionpb.CancelScheduled:
		return &partitionpb.Command{Op: &partitionpb.Command_CancelScheduled{CancelScheduled: c}}
	case *partitionpb.LockBySequence:
		return &partitionpb.Command{Op: &partitionpb.Command_LockBySequence{LockBySequence: c}}
	case *partitionpb.ExpireMessages:
		return &partitionpb.Command{Op: &partitionpb.Command_ExpireMessages{ExpireMessages: c}}
	case *partitionpb.AcceptSession:
		return &partitionpb.Command{Op: &partitionpb.Command_AcceptSession{AcceptSession: c}}
	case *partitionpb.RenewSessionLock:
		return &partitionpb.Command{Op: &partitionpb.Command_RenewSessionLock{RenewSessionLock: c}}
	case *partitionpb.SetSessionState:
		return &partitionpb.Command{Op: &partitionpb.Command_SetSessionState{SetSessionState: c}}
	case *partitionpb.ReleaseSession:
		return &partitionpb.Command{Op: &partitionpb.Command_ReleaseSession{ReleaseSession: c}}
	case *partitionpb.ExpireSessionLocks:
		return &partitionpb.Command{Op: &partitionpb.Command_ExpireSessionLocks{ExpireSessionLocks: c}}
	case *partitionpb.Purge:
		return &partitionpb.Command{Op: &partitionpb.Command_Purge{Purge: c}}
	case *partitionpb.Redrive:
		return &partitionpb.Command{Op: &partitionpb.Command_Redrive{Redrive: c}}
	}
	panic("partitiontest: not a command")
}

// Upsert creates or updates an entity partition.
func Upsert(cfg *partitionpb.EntityConfig) *partitionpb.Command {
	return cmd(&partitionpb.UpsertEntity{Config: cfg})
}

// Delete deletes an entity partition.
// DeleteCmd is a DeleteEntity command.
func DeleteCmd(c *partitionpb.DeleteEntity) *partitionpb.Command { return cmd(c) }

func Delete(id uint64, part uint32) *partitionpb.Command {
	return cmd(&partitionpb.DeleteEntity{EntityId: id, Partition: part})
}

// Enqueue enqueues messages.
func Enqueue(id uint64, part uint32, msgs ...*partitionpb.NewMessage) *partitionpb.Command {
	return cmd(&partitionpb.Enqueue{EntityId: id, Partition: part, Messages: msgs})
}

// Stage returns the StageBody commands that stage bare under blob in
// chunks of at most chunk bytes, and the message that names the blob.
func Stage(id uint64, part uint32, blob []byte, bare []byte, chunk int) ([]*partitionpb.Command, *partitionpb.NewMessage) {
	var cmds []*partitionpb.Command
	for off := 0; off < len(bare); off += chunk {
		end := min(off+chunk, len(bare))
		cmds = append(cmds, cmd(&partitionpb.StageBody{EntityId: id, Partition: part, Blob: blob, Offset: uint64(off), Data: bare[off:end]}))
	}
	m := &partitionpb.NewMessage{StagedBody: blob, StagedLength: uint64(len(bare)), StagedCrc: crc32.Checksum(bare, crc32.MakeTable(crc32.Castagnoli))}
	return cmds, m
}

// Msg is a message whose bare section is body.
func Msg(body string) *partitionpb.NewMessage {
	return &partitionpb.NewMessage{MessageId: body, Bare: []byte(body)}
}

// Seed is a token seed made of n.
func Seed(n uint64) []byte { return binary.BigEndian.AppendUint64(nil, n) }

// Lock peek-locks up to max messages of a sub-queue with a seed made of seed.
func Lock(id uint64, part uint32, sub partitionpb.SubQueue, max uint32, seed uint64) *partitionpb.Command {
	return cmd(&partitionpb.Lock{EntityId: id, Partition: part, SubQueue: sub, MaxCount: max, TokenSeed: Seed(seed)})
}

// ReceiveAndDelete takes up to max messages of a sub-queue.
func ReceiveAndDelete(id uint64, part uint32, sub partitionpb.SubQueue, max uint32) *partitionpb.Command {
	return cmd(&partitionpb.Lock{EntityId: id, Partition: part, SubQueue: sub, MaxCount: max, ReceiveAndDelete: true})
}

// Settle settles messages by lock token.
func Settle(id uint64, part uint32, sub partitionpb.SubQueue, d partitionpb.Disposition, tokens ...[]byte) *partitionpb.Command {
	return cmd(&partitionpb.Settle{EntityId: id, Partition: part, SubQueue: sub, Disposition: d, LockTokens: tokens})
}

// SettleCmd wraps a Settle built by the caller.
func SettleCmd(s *partitionpb.Settle) *partitionpb.Command { return cmd(s) }

// Renew renews locks.
func Renew(id uint64, part uint32, sub partitionpb.SubQueue, tokens ...[]byte) *partitionpb.Command {
	return cmd(&partitionpb.RenewLocks{EntityId: id, Partition: part, SubQueue: sub, LockTokens: tokens})
}

// ExpireLocks ends the locks that ran out.
func ExpireLocks() *partitionpb.Command { return cmd(&partitionpb.ExpireLocks{}) }

// ActivateScheduled activates the scheduled messages that are due.
func ActivateScheduled() *partitionpb.Command { return cmd(&partitionpb.ActivateScheduled{}) }

// ExpireMessages ends the messages whose time to live ran out.
func ExpireMessages() *partitionpb.Command { return cmd(&partitionpb.ExpireMessages{}) }

// CancelScheduled cancels scheduled messages by sequence number.
func CancelScheduled(id uint64, part uint32, seqs ...uint64) *partitionpb.Command {
	return cmd(&partitionpb.CancelScheduled{EntityId: id, Partition: part, SequenceNumbers: seqs})
}

// Purge deletes up to max messages of a sub-queue from sequence number
// from on (any enqueued time).
func Purge(id uint64, part uint32, sub partitionpb.SubQueue, from uint64, max uint32) *partitionpb.Command {
	return cmd(&partitionpb.Purge{EntityId: id, Partition: part, SubQueue: sub, FromSequenceNumber: from, MaxCount: max})
}

// PurgeCmd wraps a Purge built by the caller.
func PurgeCmd(p *partitionpb.Purge) *partitionpb.Command { return cmd(p) }

// Redrive moves the dead-lettered messages seqs back to the main queue,
// those that sqlFilter matches ("": all), with no view of their
// properties.
func Redrive(id uint64, part uint32, sqlFilter string, seqs ...uint64) *partitionpb.Command {
	r := &partitionpb.Redrive{EntityId: id, Partition: part, SqlFilter: sqlFilter}
	for _, s := range seqs {
		r.Candidates = append(r.Candidates, &partitionpb.RedriveCandidate{SequenceNumber: s})
	}
	return cmd(r)
}

// RedriveCmd wraps a Redrive built by the caller.
func RedriveCmd(r *partitionpb.Redrive) *partitionpb.Command { return cmd(r) }

// LockBySequence wraps a LockBySequence built by the caller.
func LockBySequence(l *partitionpb.LockBySequence) *partitionpb.Command { return cmd(l) }

// Tokens returns the lock tokens of a Lock result's messages.
func Tokens(r *partitionpb.Result) [][]byte {
	var ts [][]byte
	for _, m := range r.Messages {
		ts = append(ts, m.LockToken)
	}
	return ts
}

// Seqs returns the sequence numbers of a Lock result's messages.
func Seqs(r *partitionpb.Result) []uint64 {
	var s []uint64
	for _, m := range r.Messages {
		s = append(s, m.SequenceNumber)
	}
	return s
}

// SessionQueue is the config of an entity partition that requires
// sessions.
func SessionQueue(id uint64, part uint32, name string) *partitionpb.EntityConfig {
	return &partitionpb.EntityConfig{EntityId: id, Partition: part, Name: name, RequiresSession: true}
}

// SessionMsg is a message of a session.
func SessionMsg(sid, body string) *partitionpb.NewMessage {
	m := Msg(body)
	m.SessionId = sid
	return m
}

// SessionToken is a session lock token made of n.
func SessionToken(n uint64) []byte {
	return binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, n), n)
}

// Accept locks a session by id, or with sid "" the next available one.
func Accept(id uint64, part uint32, sid string, token []byte) *partitionpb.Command {
	return cmd(&partitionpb.AcceptSession{EntityId: id, Partition: part, SessionId: sid, Next: sid == "", Token: token})
}

// LockSession takes up to max messages of a locked session.
func LockSession(id uint64, part uint32, sid string, token []byte, max uint32, seed uint64) *partitionpb.Command {
	return cmd(&partitionpb.Lock{EntityId: id, Partition: part, MaxCount: max, TokenSeed: Seed(seed), SessionId: sid, SessionToken: token})
}

// RenewSession renews a session lock.
func RenewSession(id uint64, part uint32, sid string, token []byte) *partitionpb.Command {
	return cmd(&partitionpb.RenewSessionLock{EntityId: id, Partition: part, SessionId: sid, Token: token})
}

// SetState sets (or with nil clears) a session's state.
func SetState(id uint64, part uint32, sid string, token, state []byte) *partitionpb.Command {
	return cmd(&partitionpb.SetSessionState{EntityId: id, Partition: part, SessionId: sid, Token: token, State: state})
}

// Release gives a session lock back.
func Release(id uint64, part uint32, sid string, token []byte) *partitionpb.Command {
	return cmd(&partitionpb.ReleaseSession{EntityId: id, Partition: part, SessionId: sid, Token: token})
}

// ExpireSessionLocks ends the session locks that ran out.
func ExpireSessionLocks() *partitionpb.Command { return cmd(&partitionpb.ExpireSessionLocks{}) }
