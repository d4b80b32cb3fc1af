package store

import (
	"encoding/binary"
)

// LockedStates keeps the state records of locked messages in memory, as
// they were written, for the settlements and renewals that look them up
// by lock token.
//
// A settle finds its messages by sequence number with forward seeks of a
// store iterator, and each seek positions every level of the store, for
// every message settled, on every replica.
// The messages a client settles were locked moments before, and their
// state records were written then, so the applier keeps what it wrote.
//
// It is a cache of the store, never a source: every write of a state
// record goes through Batch.PutState (which keeps the new record when the
// message is locked and forgets it otherwise) and every delete through
// Batch.DeleteState, and what rewrites records wholesale (an entity deleted, bodies
// moved out of the log before a snapshot, a load) clears it. A record it
// does not hold is read from the store, so replicas with and without it
// answer the same. It is bounded: past maxLockedStates, locks are read
// from the store.
//
// Records are found by sequence number, the last eight bytes of their key,
// offset by a hash of the rest (entity, partition, sub-queue), in a table
// indexed by the sum's low bits: the messages locked at one time are mostly
// runs of consecutive numbers, so a run falls into distinct slots, and a
// slot's buffer is reused by the next record that lands there, so keeping
// a record allocates nothing once the table is warm. (A map keyed by the
// number, before, cost hashing and probing, and an allocation per lock.)
// The offset keeps apart the runs of entities that number alike: a
// topic's subscriptions give the copies of one message the same numbers,
// and without it their locked copies took each other's slots, so that a
// drain of ten subscriptions read nearly every settled record back from
// the store's tables. The table starts small and doubles when a record
// would displace a live one, up to maxLockedStates slots; past that the
// later record takes the slot and the other is read from the store when
// asked for.
type LockedStates struct {
	slots []lockedState // len is a power of two; slot of seq: seq & (len-1)
}

type lockedState struct {
	live bool
	key  stateKey
	p    []byte // unsealed state record; its array is reused
}

// stateKey is a state record's key (store/doc.go).
type stateKey [stateKeyLen]byte

const stateKeyLen = KindPrefixLen + 1 + 8

// toStateKey returns key as a stateKey.
func toStateKey(key []byte) (k stateKey, ok bool) {
	if len(key) != stateKeyLen {
		return k, false
	}
	return stateKey(key), true
}

// place is where k's record goes in a table of any size: its sequence
// number, offset by a hash of its entity, partition and sub-queue (the
// key's bytes before the kind hold the entity and partition, the byte
// after it the sub-queue).
func (k stateKey) place() uint64 {
	eid := binary.BigEndian.Uint64(k[1:9])
	part := uint64(binary.BigEndian.Uint32(k[9:13]))
	h := eid*0x9e3779b97f4a7c15 ^ part*0xc2b2ae3d27d4eb4f ^ uint64(k[KindPrefixLen])*0x165667b19e3779f9
	return binary.BigEndian.Uint64(k[stateKeyLen-8:]) + h>>32
}

// maxLockedStates bounds the records kept: about 200 bytes each with the
// key and the slot, so some 13 MiB per partition group at most.
// minLockedStates is the table's first size.
const (
	maxLockedStates = 1 << 16
	minLockedStates = 1 << 8
)

func NewLockedStates() *LockedStates { return &LockedStates{} }

// slot returns the slot of k, which holds k's record if any.
func (c *LockedStates) slot(k stateKey) *lockedState {
	if len(c.slots) == 0 {
		return nil
	}
	return &c.slots[k.place()&uint64(len(c.slots)-1)]
}

// wrote notes that key now holds the state record p of a message, locked
// or not. p is copied.
func (c *LockedStates) wrote(key, p []byte, locked bool) {
	k, ok := toStateKey(key)
	if c == nil || !ok {
		return
	}
	if !locked {
		c.forget(k)
		return
	}
	if len(c.slots) == 0 {
		c.slots = make([]lockedState, minLockedStates)
	}
	s := c.slot(k)
	for s.live && s.key != k && len(c.slots) < maxLockedStates {
		c.grow()
		s = c.slot(k)
	}
	s.live, s.key, s.p = true, k, append(s.p[:0], p...)
}

// grow doubles the table, moving every live record to its new slot.
func (c *LockedStates) grow() {
	old := c.slots
	c.slots = make([]lockedState, 2*len(old))
	for i := range old {
		if o := &old[i]; o.live {
			*c.slot(o.key) = *o
		}
	}
}

// deleted notes that key's state record is gone.
func (c *LockedStates) deleted(key []byte) {
	k, ok := toStateKey(key)
	if c != nil && ok {
		c.forget(k)
	}
}

// forget drops the record of k, if kept; its slot keeps the buffer for
// the next record.
func (c *LockedStates) forget(k stateKey) {
	if s := c.slot(k); s != nil && s.live && s.key == k {
		s.live = false
	}
}

// get returns the state record under key, if kept. It is valid until the
// next write to the cache.
func (c *LockedStates) get(key []byte) ([]byte, bool) {
	k, ok := toStateKey(key)
	if c == nil || !ok {
		return nil, false
	}
	if s := c.slot(k); s != nil && s.live && s.key == k {
		return s.p, true
	}
	return nil, false
}

// Reset forgets every record, keeping the table.
func (c *LockedStates) Reset() {
	if c != nil {
		for i := range c.slots {
			c.slots[i].live = false
		}
	}
}
