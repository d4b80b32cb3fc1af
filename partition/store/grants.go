package store

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"slices"

	"github.com/cockroachdb/pebble/v2"

	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// Lock grants: the lock index, a record per bucket of sequence numbers.
//
// Expiring locks needs the locked messages in locked_until order. With an
// index entry per lock, written when a message was locked and deleted when
// it was settled, two of the four store writes a received and completed
// message cost each replica were the index's (the others rewrite and
// delete its state record). A grant holds, in a bitmap, the locks that end
// at the same millisecond on GrantSpan consecutive sequence numbers of one
// sub-queue. A Lock of a few hundred messages sets bits in one or two
// grants and a settle clears them in the one or two its tokens fall in,
// so the index costs a write per command instead of two per message,
// which receiving and completing pay on every replica.
//
// A Batch keeps the grants it touches in memory and writes each once
// (FlushGrants): at the end of the Apply, and before it reads grants from
// itself (DueLocks, for partition's expireLocks). A grant with no bit set is deleted. Grants are
// rewritten, so they are deleted with Delete, never SingleDelete.
//
// The invariant partition.CheckIndexes verifies: a message is locked exactly when
// its bit is set in the grant of its locked_until_ms, sub-queue and bucket.

// GrantSpan is how many sequence numbers one grant covers: 128 bytes of
// bitmap at most. A Lock takes consecutive messages as a rule, so a grant
// mostly fills from its start and a settle touches one or two.
const (
	GrantSpan  = 1024
	grantWords = GrantSpan / 64
)

// grantKey names a grant: locks of entity partition k in sub-queue sub
// that end at until, on sequence numbers base to base+GrantSpan-1.
type grantKey struct {
	k     EntityKey
	until int64
	sub   partitionpb.SubQueue
	base  uint64
}

func grantKeyOf(k EntityKey, until int64, sub partitionpb.SubQueue, seq uint64) grantKey {
	return grantKey{k, until, sub, seq &^ (GrantSpan - 1)}
}

func (g grantKey) key() []byte { return LockKey(g.k, g.until, g.sub, g.base) }

// grant is a grant as a Batch holds it.
type grant struct {
	bits   [grantWords]uint64
	n      int  // bits set
	stored bool // the batch holds the grant (non-empty)
	dirty  bool // bits differ from what the batch holds
}

// decodeGrant reads a grant's bitmap: bit i (of byte i/8, least
// significant first) stands for sequence number base+i. Trailing zero
// bytes are left out.
func decodeGrant(key, p []byte) (grant, error) {
	var g grant
	if len(p) == 0 || len(p) > GrantSpan/8 || p[len(p)-1] == 0 {
		return g, fmt.Errorf("%w: lock grant %x of %d bytes", ErrCorrupt, key, len(p))
	}
	var word [8]byte
	for i := range grantWords {
		if i*8 >= len(p) {
			break
		}
		word = [8]byte{}
		copy(word[:], p[i*8:])
		g.bits[i] = binary.LittleEndian.Uint64(word[:])
		g.n += bits.OnesCount64(g.bits[i])
	}
	g.stored = true
	return g, nil
}

// encode appends the grant's bitmap to b.
func (g *grant) encode(b []byte) []byte {
	for _, w := range g.bits {
		b = binary.LittleEndian.AppendUint64(b, w)
	}
	end := len(b)
	for end > 0 && b[end-1] == 0 {
		end--
	}
	return b[:end]
}

// add sets the bit of seq, which the grant at base covers and does not
// hold yet.
func (g *grant) add(base, seq uint64) {
	i := seq - base
	g.bits[i/64] |= 1 << (i % 64)
	g.n++
}

// seqs returns the sequence numbers whose bits are set, in order.
func (g *grant) seqs(base uint64) []uint64 {
	out := make([]uint64, 0, g.n)
	for i, w := range g.bits {
		for w != 0 {
			j := bits.TrailingZeros64(w)
			out = append(out, base+uint64(i*64+j))
			w &= w - 1
		}
	}
	return out
}

// LockIndex is what an entity partition keeps in memory of its lock
// grants: the earliest lock in the committed store, and a floor below
// which there is no grant, so that scans skip the grants deleted at the
// index's head (their tombstones) instead of stepping over them.
type LockIndex struct {
	prefix []byte
	floor  []byte // no grant below this key
	// min is the earliest locked_until_ms of the committed store's
	// grants; has is false when there is none.
	min int64
	has bool
	// Stale: grants changed since min was read (Load); floor may be
	// below the first grant, never above.
	Stale bool
	// top, once topKnown, is at or above the locked_until_ms of every
	// grant the store holds: no grant ends later. Lock ends grow with the
	// leader's clock, so a Lock's grant mostly ends after every other and
	// MarkLock need not look for it in the store: each Lock did a point
	// read through every level for it, and a topic's drain of many small
	// Locks paid it per Lock. It only rises (a grant deleted leaves it
	// where it is), and it lives in memory only, so a replica without it
	// reads and writes the same.
	top      int64
	topKnown bool
}

// NewLockIndex is the lock index of entity partition k before Load.
func NewLockIndex(k EntityKey) LockIndex {
	p := KindPrefix(k, KindLock)
	return LockIndex{prefix: p, floor: p}
}

// Min returns the earliest lock's end, as of the last Load.
func (x *LockIndex) Min() (until int64, ok bool) { return x.min, x.has }

// lower notes a grant written at key.
func (x *LockIndex) lower(key []byte) {
	if bytes.Compare(key, x.floor) < 0 {
		x.floor = key
	}
}

// FloorTime is the earliest locked_until_ms a grant may have.
func (x *LockIndex) FloorTime() int64 {
	if until, _, _, ok := ParseLockKey(x.floor); ok {
		return until
	}
	if bytes.Compare(x.floor, x.prefix) <= 0 {
		return math.MinInt64
	}
	return math.MaxInt64 // past the end: no locks
}

// Load reads the earliest grant from r, scanning from the floor, and
// raises the floor to it.
func (x *LockIndex) Load(r pebble.Reader) error {
	x.Stale = false
	end := PrefixEnd(x.prefix)
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: x.floor, UpperBound: end})
	if err != nil {
		return fmt.Errorf("partition: iterator: %w", err)
	}
	x.has = false
	x.floor = end
	if it.First() {
		if _, err := IterValue(it); err != nil {
			return CloseIter(it, err)
		}
		until, _, _, ok := ParseLockKey(it.Key())
		if !ok {
			return CloseIter(it, fmt.Errorf("%w: lock key %x", ErrCorrupt, it.Key()))
		}
		x.min, x.has = until, true
		x.floor = append([]byte(nil), it.Key()...)
	}
	return CloseIter(it, it.Error())
}

// loadTop sets x.top to the latest end of k's grants in the batch's
// view, or the least time when there is none.
func (b *Batch) loadTop(x *LockIndex) error {
	x.top, x.topKnown = math.MinInt64, true
	it, err := b.pb.NewIter(&pebble.IterOptions{LowerBound: x.prefix, UpperBound: PrefixEnd(x.prefix)})
	if err != nil {
		return fmt.Errorf("partition: iterator: %w", err)
	}
	if it.Last() {
		until, _, _, ok := ParseLockKey(it.Key())
		if !ok {
			return CloseIter(it, fmt.Errorf("%w: lock key %x", ErrCorrupt, it.Key()))
		}
		x.top = until
	}
	return CloseIter(it, it.Error())
}

// grant returns the grant gk as this batch holds it, read from the
// batch the first time unless absent says none is stored.
func (b *Batch) grant(gk grantKey, absent bool) (*grant, error) {
	// Consecutive messages of a Lock or a settle mostly share a grant:
	// the last one found spares hashing the key again for each.
	if b.lastGrant != nil && b.lastGrantKey == gk {
		return b.lastGrant, nil
	}
	g, err := b.findGrant(gk, absent)
	if err == nil {
		b.lastGrantKey, b.lastGrant = gk, g
	}
	return g, err
}

func (b *Batch) findGrant(gk grantKey, absent bool) (*grant, error) {
	if g, ok := b.grants[gk]; ok {
		return g, nil
	}
	g := &grant{}
	if !absent {
		key := gk.key()
		p, found, err := Get(b.pb, key)
		if err != nil {
			return nil, err
		}
		if found {
			if *g, err = decodeGrant(key, p); err != nil {
				return nil, err
			}
		}
	}
	if b.grants == nil {
		b.grants = make(map[grantKey]*grant)
	}
	b.grants[gk] = g
	return g, nil
}

// MarkLock sets (or clears) the bit of the message of entity partition k
// in slot s, which is locked, in its grant; x is k's lock index.
func (b *Batch) MarkLock(x *LockIndex, k EntityKey, s Slot, set bool) error {
	gk := grantKeyOf(k, s.Until, s.Sub, s.Seq)
	if !x.topKnown {
		if err := b.loadTop(x); err != nil {
			return err
		}
	}
	g, err := b.grant(gk, gk.until > x.top)
	if err != nil {
		return err
	}
	if set {
		x.top = max(x.top, gk.until)
	}
	i := s.Seq - gk.base
	w, m := i/64, uint64(1)<<(i%64)
	if had := g.bits[w]&m != 0; had == set {
		return fmt.Errorf("%w: %s: message %d locked until %d: lock grant bit is %v already", ErrCorrupt, k, s.Seq, s.Until, had)
	}
	if set && g.n == 0 {
		// Every write below the floor lowers it; a grant that holds locks
		// lies at or above it already.
		x.lower(gk.key())
	}
	g.bits[w] ^= m
	if set {
		g.n++
	} else {
		g.n--
	}
	g.dirty = true
	return nil
}

// FlushGrants writes the grants changed since the last flush to the
// batch, in key order.
func (b *Batch) FlushGrants() error {
	var changed []grantKey
	for gk, g := range b.grants {
		if g.dirty {
			changed = append(changed, gk)
		}
	}
	slices.SortFunc(changed, compareGrantKeys)
	var buf []byte
	for _, gk := range changed {
		g := b.grants[gk]
		key := gk.key()
		var err error
		switch {
		case g.n > 0:
			buf = g.encode(buf[:0])
			err = b.pb.Set(key, Seal(key, buf), nil)
			g.stored = true
		case g.stored:
			err = b.pb.Delete(key, nil)
			g.stored = false
		}
		if err != nil {
			return err
		}
		g.dirty = false
	}
	return nil
}

// DueLocks calls f with every lock of entity partition k (lock index x)
// that ends at or before now, earliest first, until f returns false. It
// reads the grants as flushed (FlushGrants first); f may end the locks
// it is given, which clears their bits in the batch's copy.
func (b *Batch) DueLocks(x *LockIndex, now int64, f func(until int64, sub partitionpb.SubQueue, seq uint64) (bool, error)) error {
	if x.FloorTime() > now {
		return nil
	}
	it, err := b.pb.NewIter(&pebble.IterOptions{LowerBound: x.floor, UpperBound: PrefixEnd(x.prefix)})
	if err != nil {
		return fmt.Errorf("partition: iterator: %w", err)
	}
	for valid := it.First(); valid; valid = it.Next() {
		until, sub, base, ok := ParseLockKey(it.Key())
		if !ok {
			return CloseIter(it, fmt.Errorf("%w: lock grant key %x", ErrCorrupt, it.Key()))
		}
		if until > now {
			break
		}
		p, err := IterValue(it)
		if err != nil {
			return CloseIter(it, err)
		}
		g, err := decodeGrant(it.Key(), p)
		if err != nil {
			return CloseIter(it, err)
		}
		for _, seq := range g.seqs(base) {
			more, err := f(until, sub, seq)
			if err != nil {
				return CloseIter(it, err)
			}
			if !more {
				return CloseIter(it, nil)
			}
		}
	}
	return CloseIter(it, it.Error())
}

func compareGrantKeys(x, y grantKey) int {
	switch {
	case x.k != y.k:
		if x.k.Less(y.k) {
			return -1
		}
		return 1
	case x.until != y.until:
		if x.until < y.until {
			return -1
		}
		return 1
	case x.sub != y.sub:
		return int(x.sub) - int(y.sub)
	case x.base != y.base:
		if x.base < y.base {
			return -1
		}
		return 1
	}
	return 0
}

// dropGrants forgets the grants of an entity partition whose records a
// range deletion removed.
func (b *Batch) dropGrants(k EntityKey) {
	b.lastGrant = nil
	for gk := range b.grants {
		if gk.k == k {
			delete(b.grants, gk)
		}
	}
}

// EachGrant calls f with every lock grant of entity partition k in r:
// the locks of sub-queue sub that end at until, in sequence order, in
// the grant of the GrantSpan numbers from base.
// (Tests check the grants against the messages with it.)
func EachGrant(r pebble.Reader, k EntityKey, f func(until int64, sub partitionpb.SubQueue, base uint64, seqs []uint64) error) error {
	it, err := PrefixIter(r, KindPrefix(k, KindLock))
	if err != nil {
		return err
	}
	for valid := it.First(); valid; valid = it.Next() {
		p, err := IterValue(it)
		if err != nil {
			return CloseIter(it, err)
		}
		g, err := decodeGrant(it.Key(), p)
		if err != nil {
			return CloseIter(it, err)
		}
		until, sub, base, ok := ParseLockKey(it.Key())
		if !ok {
			return CloseIter(it, fmt.Errorf("%w: lock grant key %x", ErrCorrupt, it.Key()))
		}
		if err := f(until, sub, base, g.seqs(base)); err != nil {
			return CloseIter(it, err)
		}
	}
	return CloseIter(it, it.Error())
}

// upgradeLockIndex turns a store of FormatLockEntries, whose lock index had
// an entry per locked message at the key a grant now has, into one of
// Format, in one batch with the new format version: a crash before
// the store is flushed leaves the old format, upgraded again on restart.
func upgradeLockIndex(db *pebble.DB) error {
	b := db.NewBatch()
	defer b.Close()
	grants := map[grantKey]*grant{}
	it, err := PrefixIter(db, []byte{PrefixEntity})
	if err != nil {
		return err
	}
	var entities []EntityKey
	for valid := it.First(); valid; valid = it.Next() {
		k, ok := ParseEntityRecordKey(it.Key())
		if !ok {
			return CloseIter(it, fmt.Errorf("%w: entity key %x", ErrCorrupt, it.Key()))
		}
		entities = append(entities, k)
	}
	if err := CloseIter(it, it.Error()); err != nil {
		return err
	}
	for _, k := range entities {
		it, err := PrefixIter(db, KindPrefix(k, KindLock))
		if err != nil {
			return err
		}
		for valid := it.First(); valid; valid = it.Next() {
			if _, err := IterValue(it); err != nil {
				return CloseIter(it, err)
			}
			until, sub, seq, ok := ParseLockKey(it.Key())
			if !ok {
				return CloseIter(it, fmt.Errorf("%w: lock key %x", ErrCorrupt, it.Key()))
			}
			if err := b.Delete(it.Key(), nil); err != nil {
				return CloseIter(it, err)
			}
			gk := grantKeyOf(k, until, sub, seq)
			g := grants[gk]
			if g == nil {
				g = &grant{}
				grants[gk] = g
			}
			g.add(gk.base, seq)
		}
		if err := CloseIter(it, it.Error()); err != nil {
			return err
		}
	}
	for gk, g := range grants {
		key := gk.key()
		if err := b.Set(key, Seal(key, g.encode(nil)), nil); err != nil {
			return err
		}
	}
	v := Seal(KeyFormat, binary.BigEndian.AppendUint64(nil, Format))
	if err := b.Set(KeyFormat, v, nil); err != nil {
		return err
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		return fmt.Errorf("partition: upgrade the lock index: %w", err)
	}
	return nil
}
