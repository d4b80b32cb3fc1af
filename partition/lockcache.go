package partition

import "encoding/binary"

// lockedStates keeps the state records of locked messages in memory, as
// they were written, for the settlements and renewals that look them up
// by lock token.
//
// A settle finds its messages by sequence number with forward seeks of a
// store iterator, and each seek positions every level of the store: 7% of
// the dev cluster's CPU while receiving and completing, on every replica.
// The messages a client settles were locked moments before, and their
// state records were written then, so the applier keeps what it wrote.
//
// It is a cache of the store, never a source: every write of a state
// record goes through putState (which keeps the new record when the
// message is locked and forgets it otherwise) and every delete through
// unslot, and what rewrites records wholesale (an entity deleted, bodies
// moved out of the log before a snapshot, a load) clears it. A record it
// does not hold is read from the store, so replicas with and without it
// answer the same. It is bounded: past maxLockedStates, locks are read
// from the store.
//
// Records are found by sequence number, the last eight bytes of their key:
// a map keyed by a machine word is several times cheaper to probe than one
// keyed by the whole 23-byte key, and most groups hold one entity. Two
// records of one number (in two entities, or a sub-queue and its
// dead-letter queue) share the entry: the later write takes it, and a
// lookup of the other misses and reads the store.
type lockedStates struct {
	records map[uint64]lockedState
}

type lockedState struct {
	key stateKey
	p   []byte // unsealed state record
}

// stateKey is a state record's key (keys.go).
type stateKey [stateKeyLen]byte

const stateKeyLen = kindPrefixLen + 1 + 8

// toStateKey returns key as a stateKey and the sequence number it names.
func toStateKey(key []byte) (k stateKey, seq uint64, ok bool) {
	if len(key) != stateKeyLen {
		return k, 0, false
	}
	return stateKey(key), binary.BigEndian.Uint64(key[stateKeyLen-8:]), true
}

// maxLockedStates bounds the records kept: about 200 bytes each with the
// key and the map's overhead, so some 13 MiB per partition group at most.
const maxLockedStates = 1 << 16

func newLockedStates() *lockedStates {
	return &lockedStates{records: make(map[uint64]lockedState)}
}

// wrote notes that key now holds the state record p of a message, locked
// or not. p is copied.
func (c *lockedStates) wrote(key, p []byte, locked bool) {
	k, seq, ok := toStateKey(key)
	if c == nil || !ok {
		return
	}
	v, had := c.records[seq]
	switch {
	case !locked:
		if had && v.key == k {
			delete(c.records, seq)
		}
	case had:
		c.records[seq] = lockedState{k, append(v.p[:0], p...)}
	case len(c.records) < maxLockedStates:
		c.records[seq] = lockedState{k, append([]byte(nil), p...)}
	}
}

// deleted notes that key's state record is gone.
func (c *lockedStates) deleted(key []byte) {
	k, seq, ok := toStateKey(key)
	if c == nil || !ok {
		return
	}
	if v, had := c.records[seq]; had && v.key == k {
		delete(c.records, seq)
	}
}

// get returns the state record under key, if kept.
func (c *lockedStates) get(key []byte) ([]byte, bool) {
	k, seq, ok := toStateKey(key)
	if c == nil || !ok {
		return nil, false
	}
	if v, had := c.records[seq]; had && v.key == k {
		return v.p, true
	}
	return nil, false
}

// reset forgets every record.
func (c *lockedStates) reset() {
	if c != nil {
		clear(c.records)
	}
}
