package store

import (
	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// The index entries of a message: which ones a message has is the rules'
// business (partition's applier.index decides from its slot); the store
// writes and deletes them.
//
// Single deletes. Records written once since they were last deleted are
// deleted with SingleDelete: a body record (written when its message is
// added or moves, deleted when it goes or moves), an index entry (set
// when a message enters a slot, deleted when it leaves it; the applier
// takes the old entries out before it puts the new ones in), a request
// result. Pebble drops such a delete together with the write it meets, at
// the first flush or compaction that holds both, instead of carrying a
// tombstone down the levels: a lock's index entry and its delete mostly
// share a memtable and never reach a table, so compactions move fewer
// bytes per message received (partition's BenchmarkBacklogCycle). A
// record written twice without a delete between would come back after the
// delete, so state records, which locks and settlements rewrite, and other
// rewritten records (grants, sessions, counts) are deleted with Delete; pebble
// reports a single delete that meets no write or two (partition's
// Machine.misuse, Options.Misuse), and partition's TestDeterminism checks
// that it never does.

func (b *Batch) setEntry(key []byte, set bool) error {
	if set {
		return SetSealed(b.pb, key, nil)
	}
	return b.pb.SingleDelete(key, nil)
}

// SetAvailable sets (or deletes) the available entry of message seq of
// sub-queue sub: active, unlocked, and not fresh (partition's
// entity.fresh).
func (b *Batch) SetAvailable(k EntityKey, sub partitionpb.SubQueue, seq uint64, set bool) error {
	return b.setEntry(AvailableKey(k, sub, seq), set)
}

// SessionList names one of a session's lists of messages.
type SessionList byte

const (
	// SessionStream is a session's available messages, in order.
	SessionStream = SessionList(KindSessionMsg)
	// SessionHeld is a session's messages locked under its session lock.
	SessionHeld = SessionList(KindSessionHeld)
	// SessionParked is a session's deferred or scheduled messages.
	SessionParked = SessionList(KindSessionParked)
)

// SetSessionEntry sets (or deletes) the entry of message seq in list l of
// session sid.
func (b *Batch) SetSessionEntry(k EntityKey, l SessionList, sub partitionpb.SubQueue, sid string, seq uint64, set bool) error {
	return b.setEntry(SessionStreamKey(k, byte(l), sub, sid, seq), set)
}
