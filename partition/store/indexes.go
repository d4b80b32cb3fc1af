package store

import (
	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// The index entries of a message: which ones a message has is the rules'
// business (partition's applier.index decides from its slot); the store
// writes and deletes them. Each entry is written once between deletes, so
// it is deleted with a single delete (see partition's singleDelete).

func (b *Batch) setEntry(key []byte, set bool) error {
	if set {
		return SetSealed(b.Batch, key, nil)
	}
	return b.SingleDelete(key, nil)
}

// SetAvailable sets (or deletes) the available entry of message seq of
// sub-queue sub: active, unlocked, and not fresh (partition's
// entity.fresh).
func (b *Batch) SetAvailable(k EntityKey, sub partitionpb.SubQueue, seq uint64, set bool) error {
	return b.setEntry(AvailableKey(k, sub, seq), set)
}

// SetSessionEntry sets (or deletes) the entry of message seq in one of
// session sid's sets: its stream (KindSessionMsg: available), its held
// messages (KindSessionHeld: locked under the session lock) or its parked
// ones (KindSessionParked: deferred or scheduled).
func (b *Batch) SetSessionEntry(k EntityKey, kind byte, sub partitionpb.SubQueue, sid string, seq uint64, set bool) error {
	return b.setEntry(SessionStreamKey(k, kind, sub, sid, seq), set)
}
