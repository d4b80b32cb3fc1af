package store

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// A message's two records (doc.go): its body, written once, and its state,
// which locks and settlements rewrite. Which indexes a message is in, and
// the counters, are the rules' (partition's applier keeps them in step
// with these writes).

// seqKey returns the key of a message's record of the given kind in the
// batch's key buffer, valid until the next call. The batch copies keys.
func (b *Batch) seqKey(k EntityKey, kind byte, sub partitionpb.SubQueue, seq uint64) []byte {
	b.keyBuf = AppendSeqKey(b.keyBuf[:0], k, kind, sub, seq)
	return b.keyBuf
}

// PutBody writes m's body record: its three sections.
func (b *Batch) PutBody(k EntityKey, m *partitionpb.StoredMessage) error {
	return SetBody(b.pb, b.seqKey(k, KindBody, m.SubQueue, m.SequenceNumber), m)
}

// PutState writes m's state record: m without its sections (which it
// leaves in m). The cache of locked states keeps it while m is locked.
func (b *Batch) PutState(k EntityKey, m *partitionpb.StoredMessage) error {
	if err := b.settle(); err != nil {
		return err
	}
	_, err := b.putState(b.pb, k, m)
	return err
}

// PutNewState writes the state record of m, a message added in this
// Apply under a sequence number its sub-queue has not used, where
// nothing reads it until the batch is read (Batch's unindexed records).
func (b *Batch) PutNewState(k EntityKey, m *partitionpb.StoredMessage) error {
	if b.unindexed == nil {
		b.unindexed = b.db.NewBatch()
	}
	p, err := b.putState(b.unindexed, k, m)
	if err != nil {
		return err
	}
	// Keep what follows the sequence number (field 1, first) for
	// PutNewCopy; the record lies in the batch's buffer, which a settle
	// clears.
	b.lastTail = append(b.lastTail[:0], p[seqFieldLen(m.SequenceNumber):]...)
	b.haveTail = true
	return nil
}

// PutNewCopy writes the state record of m as PutNewState does, from the
// encoding of the record PutNewState wrote last: the caller vouches that m
// differs from that message in its sequence number alone (the copies of
// one topic message in subscriptions whose rules changed nothing of it,
// which a topic send would otherwise encode once per subscription). The
// key is m's own.
func (b *Batch) PutNewCopy(k EntityKey, m *partitionpb.StoredMessage) error {
	if !b.haveTail {
		return fmt.Errorf("store: a copy of message %d with no record written before it", m.SequenceNumber)
	}
	key := b.seqKey(k, KindMessage, m.SubQueue, m.SequenceNumber)
	head := seqFieldLen(m.SequenceNumber)
	n := head + len(b.lastTail)
	op := b.unindexed.SetDeferred(len(key), n+CRCLen)
	copy(op.Key, key)
	v := op.Value[:0]
	if head > 0 {
		v = protowire.AppendVarint(protowire.AppendTag(v, 1, protowire.VarintType), m.SequenceNumber)
	}
	v = append(v, b.lastTail...)
	binary.BigEndian.PutUint32(op.Value[n:], Checksum(key, op.Value[:n]))
	if VerifyCopies {
		if err := verifyCopy(key, v, m); err != nil {
			return err
		}
	}
	if err := op.Finish(); err != nil {
		return err
	}
	b.locked.wrote(key, v, false)
	return nil
}

// VerifyCopies makes PutNewCopy encode every copy in full as well and fail
// when the two differ: tests set it, so that a field that tells copies
// apart and that the caller does not check for shows up as an error.
var VerifyCopies = false

func verifyCopy(key, v []byte, m *partitionpb.StoredMessage) error {
	h, an, bare := m.Header, m.Annotations, m.Bare
	m.Header, m.Annotations, m.Bare = nil, nil, nil
	var e recordEncoder
	e.message(m, false)
	e.out = make([]byte, 0, e.n)
	e.message(m, false)
	m.Header, m.Annotations, m.Bare = h, an, bare
	if !bytes.Equal(e.out, v) {
		return fmt.Errorf("%w: copy %x written as %x, encoded %x: it differs from the message before in more than its sequence number", ErrCorrupt, key, v, e.out)
	}
	return nil
}

// seqFieldLen is the length of a state record's first field, the sequence
// number (none when it is 0: zero fields are left out).
func seqFieldLen(seq uint64) int {
	if seq == 0 {
		return 0
	}
	return protowire.SizeTag(1) + protowire.SizeVarint(seq)
}

// putState writes m's state record into to and returns it (unsealed, in
// to's buffer).
func (b *Batch) putState(to *pebble.Batch, k EntityKey, m *partitionpb.StoredMessage) ([]byte, error) {
	h, an, bare := m.Header, m.Annotations, m.Bare
	m.Header, m.Annotations, m.Bare = nil, nil, nil
	key := b.seqKey(k, KindMessage, m.SubQueue, m.SequenceNumber)
	p, err := SetRecord(to, key, m, false)
	m.Header, m.Annotations, m.Bare = h, an, bare
	if err != nil {
		return nil, err
	}
	b.locked.wrote(key, p, len(m.LockToken) > 0)
	return p, nil
}

// LockedRecord returns p, the state record of an available message,
// with the lock token and locked-until (non-zero) put in where the
// encoder puts them (AppendLocked): byte for byte the record PutState
// would write for the locked message. It is built in the batch's buffer,
// valid until the next call. ok is false when p is not such a record: the
// caller then decodes it and writes it whole.
func (b *Batch) LockedRecord(p, token []byte, until int64) (v []byte, ok bool) {
	v, ok = AppendLocked(b.recBuf[:0], p, token, until)
	if ok {
		b.recBuf = v
	}
	return v, ok
}

// PutLocked writes v, a record LockedRecord made, as the state record of
// the message in slot s (which is now locked).
func (b *Batch) PutLocked(k EntityKey, s Slot, v []byte) error {
	if err := b.settle(); err != nil {
		return err
	}
	key := b.seqKey(k, KindMessage, s.Sub, s.Seq)
	if err := SetSealed(b.pb, key, v); err != nil {
		return err
	}
	b.locked.wrote(key, v, true)
	return nil
}

// DeleteState deletes the state record of the message in slot s. State
// records are rewritten, so this is a Delete, not a single delete.
func (b *Batch) DeleteState(k EntityKey, s Slot) error {
	if err := b.settle(); err != nil {
		return err
	}
	key := b.seqKey(k, KindMessage, s.Sub, s.Seq)
	if err := b.pb.Delete(key, nil); err != nil {
		return err
	}
	b.locked.deleted(key)
	return nil
}

// DeleteBody deletes the body record of message seq of sub-queue sub.
// A body record is written once between deletes: a single delete.
func (b *Batch) DeleteBody(k EntityKey, sub partitionpb.SubQueue, seq uint64) error {
	return b.pb.SingleDelete(b.seqKey(k, KindBody, sub, seq), nil)
}

// MoveBody moves the body record of message fromSeq of sub-queue fromSub
// to message toSeq of toSub, unread but sealed for its new key.
func (b *Batch) MoveBody(k EntityKey, fromSub partitionpb.SubQueue, fromSeq uint64, toSub partitionpb.SubQueue, toSeq uint64) error {
	from := BodyKey(k, fromSub, fromSeq)
	p, found, err := Get(b.pb, from)
	if err != nil {
		return err
	}
	if !found {
		return fmt.Errorf("%w: message %d of %s has no body", ErrCorrupt, fromSeq, k)
	}
	to := BodyKey(k, toSub, toSeq)
	if err := b.pb.Set(to, Seal(to, p), nil); err != nil {
		return err
	}
	return b.pb.SingleDelete(from, nil)
}

// State reads the state record of message seq of sub-queue sub; nil if
// there is none.
func (b *Batch) State(k EntityKey, sub partitionpb.SubQueue, seq uint64) (*partitionpb.StoredMessage, error) {
	if err := b.settle(); err != nil {
		return nil, err
	}
	return GetState(b.pb, MessageKey(k, sub, seq))
}

// CachedLocked returns the state record of locked message seq of
// sub-queue sub, if the cache of locked states holds it; it is valid
// until the next write.
func (b *Batch) CachedLocked(k EntityKey, sub partitionpb.SubQueue, seq uint64) (p []byte, ok bool) {
	return b.locked.get(b.seqKey(k, KindMessage, sub, seq))
}

// forgetLocked clears the cache of locked states: records were rewritten
// or deleted wholesale (an entity deleted).
func (b *Batch) forgetLocked() { b.locked.Reset() }

// Cursor reads sub-queue sub of entity partition k as this batch holds
// it, from sequence number from on (NewCursor).
func (b *Batch) Cursor(k EntityKey, sub partitionpb.SubQueue, from uint64, bodies bool) (*Cursor, error) {
	if err := b.settle(); err != nil {
		return nil, err
	}
	return NewCursor(b.pb, k, sub, from, bodies)
}

// OpenCursor opens c, a Cursor the caller keeps in a struct of its own
// (one allocation fewer per command), over the batch as Cursor does.
func (b *Batch) OpenCursor(c *Cursor, k EntityKey, sub partitionpb.SubQueue, from uint64, bodies bool) error {
	if err := b.settle(); err != nil {
		return err
	}
	return c.open(b.pb, k, sub, from, bodies)
}

// AvailableScan walks the available index of one sub-queue in sequence
// order: the messages Lock hands out first. Its zero value is a scan of
// an empty index, for a caller that knows there is nothing to scan.
type AvailableScan struct {
	it    *pebble.Iterator
	valid bool
	first bool
}

// Available scans the available index of sub-queue sub of entity
// partition k from sequence number head on (partition's availHead: no
// entry is below it). It sees the batch as it is when made; writes after
// do not disturb it.
func (b *Batch) Available(k EntityKey, sub partitionpb.SubQueue, head uint64) (AvailableScan, error) {
	return ScanAvailable(b.pb, k, sub, head)
}

// ScanAvailable is Batch.Available over any reader.
// (A value, not a pointer: Lock makes one per command on every replica.)
func ScanAvailable(r pebble.Reader, k EntityKey, sub partitionpb.SubQueue, head uint64) (AvailableScan, error) {
	it, err := r.NewIter(&pebble.IterOptions{
		LowerBound: AvailableKey(k, sub, head),
		UpperBound: PrefixEnd(SubPrefix(k, KindAvailable, sub)),
	})
	if err != nil {
		return AvailableScan{}, fmt.Errorf("partition: iterator: %w", err)
	}
	return AvailableScan{it: it, first: true}, nil
}

// Next returns the next available message's sequence number; ok is false
// at the end.
func (s *AvailableScan) Next() (seq uint64, ok bool, err error) {
	if s.it == nil {
		return 0, false, nil
	}
	if s.first {
		s.valid, s.first = s.it.First(), false
	} else if s.valid {
		s.valid = s.it.Next()
	}
	if !s.valid {
		return 0, false, s.it.Error()
	}
	if _, err := IterValue(s.it); err != nil {
		return 0, false, err
	}
	seq, ok = ParseAvailableKey(s.it.Key())
	if !ok {
		return 0, false, fmt.Errorf("%w: index key %x", ErrCorrupt, s.it.Key())
	}
	return seq, true, nil
}

// Close closes the scan and returns the first of err and its error.
func (s *AvailableScan) Close(err error) error {
	if s.it == nil {
		return err
	}
	return CloseIter(s.it, err)
}
