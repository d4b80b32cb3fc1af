package store

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// Cursor reads the messages of one sub-queue in ascending sequence
// order, from a state iterator and (when bodies are wanted) a body
// iterator, each moved forward by seeks: a pass over an index or a list of
// tokens in sequence order costs one iterator step per message instead of
// a point read through every level of the store.
type Cursor struct {
	k      EntityKey
	state0 []byte // prefix of the sub-queue's state records
	body0  []byte // prefix of its body records
	states *pebble.Iterator
	bodies *pebble.Iterator // nil: no bodies are read
	// key is the key of the record the cursor last stood at: in buf, or
	// the state iterator's own (State), which must not be written to.
	key []byte
	buf []byte
}

// NewCursor reads the messages of sub-queue sub of entity partition k in
// r, from sequence number from on, with their body records if bodies.
func NewCursor(r pebble.Reader, k EntityKey, sub partitionpb.SubQueue, from uint64, bodies bool) (*Cursor, error) {
	c := new(Cursor)
	if err := c.open(r, k, sub, from, bodies); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *Cursor) open(r pebble.Reader, k EntityKey, sub partitionpb.SubQueue, from uint64, bodies bool) error {
	*c = Cursor{k: k, state0: SubPrefix(k, KindMessage, sub), body0: SubPrefix(k, KindBody, sub)}
	var err error
	if c.states, err = r.NewIter(&pebble.IterOptions{
		LowerBound: MessageKey(k, sub, from),
		UpperBound: PrefixEnd(c.state0),
	}); err != nil {
		return fmt.Errorf("partition: iterator: %w", err)
	}
	if bodies {
		if c.bodies, err = r.NewIter(&pebble.IterOptions{
			LowerBound: BodyKey(k, sub, from),
			UpperBound: PrefixEnd(c.body0),
		}); err != nil {
			return CloseIter(c.states, fmt.Errorf("partition: iterator: %w", err))
		}
	}
	return nil
}

// seek positions it at key and returns its unsealed value, or nil if the
// key is absent. Callers seek forward: pebble then tries the next few keys
// of each level before it searches (TrySeekUsingNext), and a seek to where
// the iterator already stands costs nothing. Stepping with Next first, as
// an earlier version did, lost that for the seek after it, and settling
// scattered messages slowed down (partition's BenchmarkSettleScattered).
func (c *Cursor) seek(it *pebble.Iterator, key []byte) ([]byte, error) {
	if !it.SeekGE(key) || !bytes.Equal(it.Key(), key) {
		if err := it.Error(); err != nil {
			return nil, fmt.Errorf("partition: read %x: %w", key, err)
		}
		return nil, nil
	}
	return IterValue(it)
}

// Lookup reads the state record of seq; nil if there is none.
func (c *Cursor) Lookup(seq uint64) (*partitionpb.StoredMessage, error) {
	p, err := c.Record(seq)
	if err != nil || p == nil {
		return nil, err
	}
	return DecodeState(c.key, p)
}

// Record returns the unsealed state record of seq, valid until the cursor
// moves, with its key in Key(); nil if there is none.
func (c *Cursor) Record(seq uint64) ([]byte, error) {
	c.key = binary.BigEndian.AppendUint64(append(c.buf[:0], c.state0...), seq)
	c.buf = c.key
	return c.seek(c.states, c.key)
}

// SeekState positions the state iterator at the first message with a
// sequence number of seq or more.
func (c *Cursor) SeekState(seq uint64) bool {
	c.key = binary.BigEndian.AppendUint64(append(c.buf[:0], c.state0...), seq)
	c.buf = c.key
	return c.states.SeekGE(c.key)
}

// ReadsBodies reports whether the cursor reads body records.
func (c *Cursor) ReadsBodies() bool { return c.bodies != nil }

// Body merges m's body record into m (m's body is in the store: not in the
// Raft log, m.BodyIndex == 0); the cursor must read bodies. A staged
// bare message (m.BodyBlob) is the caller's to read.
func (c *Cursor) Body(m *partitionpb.StoredMessage) error {
	c.key = binary.BigEndian.AppendUint64(append(c.buf[:0], c.body0...), m.SequenceNumber)
	c.buf = c.key
	p, err := c.seek(c.bodies, c.key)
	if err == nil && p == nil {
		err = fmt.Errorf("%w: message %d of %s has no body", ErrCorrupt, m.SequenceNumber, c.k)
	}
	if err != nil {
		return err
	}
	return MergeBody(c.key, p, m)
}

// Slot decodes the slot of p, the state record the cursor stands at
// (after Record, or State), and its lock token.
func (c *Cursor) Slot(p []byte) (Slot, []byte, error) {
	s, token, err := StateSlot(p)
	if err != nil {
		return s, nil, fmt.Errorf("%w: message %x: %v", ErrCorrupt, c.key, err)
	}
	return s, token, nil
}

// Decode decodes p, the state record the cursor stands at (after Record,
// or State), whole.
func (c *Cursor) Decode(p []byte) (*partitionpb.StoredMessage, error) { return DecodeState(c.key, p) }

// Next moves the state iterator to the next message.
func (c *Cursor) Next() bool { return c.states.Next() }

// State returns the unsealed state record the state iterator stands at
// (after SeekState or Next), valid until it moves.
func (c *Cursor) State() ([]byte, error) {
	c.key = c.states.Key()
	return IterValue(c.states)
}

// Error is the state iterator's error.
func (c *Cursor) Error() error { return c.states.Error() }

// Close closes the iterators and returns the first of err and their errors;
// a nil cursor (one never made) returns err.
func (c *Cursor) Close(err error) error {
	if c == nil {
		return err
	}
	if c.bodies != nil {
		err = CloseIter(c.bodies, err)
	}
	return CloseIter(c.states, err)
}
