package partition

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
type lockedStates struct {
	records map[stateKey][]byte // unsealed state records
}

// stateKey is a state record's key (keys.go) as a map key: an array, so
// that no lookup or insert converts it to a string.
type stateKey [stateKeyLen]byte

const stateKeyLen = kindPrefixLen + 1 + 8

func toStateKey(key []byte) (k stateKey, ok bool) {
	if len(key) != stateKeyLen {
		return k, false
	}
	return stateKey(key), true
}

// maxLockedStates bounds the records kept: about 200 bytes each with the
// key and the map's overhead, so some 13 MiB per partition group at most.
const maxLockedStates = 1 << 16

func newLockedStates() *lockedStates {
	return &lockedStates{records: make(map[stateKey][]byte)}
}

// wrote notes that key now holds the state record p of a message, locked
// or not. p is copied.
func (c *lockedStates) wrote(key, p []byte, locked bool) {
	k, ok := toStateKey(key)
	if c == nil || !ok {
		return
	}
	if !locked {
		delete(c.records, k)
		return
	}
	if v, ok := c.records[k]; ok {
		c.records[k] = append(v[:0], p...)
		return
	}
	if len(c.records) < maxLockedStates {
		c.records[k] = append([]byte(nil), p...)
	}
}

// deleted notes that key's state record is gone.
func (c *lockedStates) deleted(key []byte) {
	if k, ok := toStateKey(key); c != nil && ok {
		delete(c.records, k)
	}
}

// get returns the state record under key, if kept.
func (c *lockedStates) get(key []byte) ([]byte, bool) {
	k, ok := toStateKey(key)
	if c == nil || !ok {
		return nil, false
	}
	p, ok := c.records[k]
	return p, ok
}

// reset forgets every record.
func (c *lockedStates) reset() {
	if c != nil {
		clear(c.records)
	}
}
