package store

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"

	"github.com/cockroachdb/pebble/v2"

	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// The store of sessions (doc.go: kinds 0x0b to 0x0f and 0x18). On an
// entity that requires sessions every message of the main sub-queue
// belongs to one session, and its index entries are the session's
// (SetSessionEntry) instead of the available index; a session's record
// counts them and says whether it is locked and ready.

// Session is the record an entity partition keeps of one session. It
// exists while the session has available or held messages, a lock or a
// state; a session without any of them is implicit (no record).
type Session struct {
	Token    []byte // the session lock's, 16 bytes; nil: not locked
	Until    int64  // the lock's end
	Avail    int64  // entries in the session's stream
	Held     int64  // messages locked under the session lock
	Parked   int64  // deferred and scheduled messages (KindSessionParked)
	Ready    bool   // it has a ready entry, at readySeq
	ReadySeq uint64
	Updated  int64  // when its state was last set or cleared (ms); 0: never
	State    []byte // nil: none
}

func (r *Session) Locked() bool { return len(r.Token) > 0 }

// lockedBy reports whether token holds the session's lock at now.
func (r *Session) LockedBy(token []byte, now int64) bool {
	return r.Locked() && bytes.Equal(r.Token, token) && r.Until > now
}

func (r *Session) Empty() bool {
	return !r.Locked() && r.Avail == 0 && r.Held == 0 && r.Parked == 0 && len(r.State) == 0
}

// The session record: a version byte, flags (1: locked, 2: ready), the
// token (16), until, avail, held and readySeq (8 each); version 2 then
// has parked and updated (8 each); then the state. A record whose parked
// and updated are zero is written as version 1, as before they existed.
const (
	sessionRecordV1    = 1
	sessionRecordV2    = 2
	sessionRecordLen   = 2 + 16 + 8*4
	sessionRecordV2Len = sessionRecordLen + 8*2
)

// Encode returns the record's payload.
func (r *Session) Encode() []byte {
	v2 := r.Parked != 0 || r.Updated != 0
	b := make([]byte, 0, sessionRecordV2Len+len(r.State))
	var flags byte
	if r.Locked() {
		flags |= 1
	}
	if r.Ready {
		flags |= 2
	}
	version := byte(sessionRecordV1)
	if v2 {
		version = sessionRecordV2
	}
	b = append(b, version, flags)
	var token [16]byte
	copy(token[:], r.Token)
	b = append(b, token[:]...)
	b = binary.BigEndian.AppendUint64(b, uint64(r.Until))
	b = binary.BigEndian.AppendUint64(b, uint64(r.Avail))
	b = binary.BigEndian.AppendUint64(b, uint64(r.Held))
	b = binary.BigEndian.AppendUint64(b, r.ReadySeq)
	if v2 {
		b = binary.BigEndian.AppendUint64(b, uint64(r.Parked))
		b = binary.BigEndian.AppendUint64(b, uint64(r.Updated))
	}
	return append(b, r.State...)
}

func DecodeSession(key, p []byte) (*Session, error) {
	n := sessionRecordLen
	if len(p) > 0 && p[0] == sessionRecordV2 {
		n = sessionRecordV2Len
	}
	if len(p) < n || (p[0] != sessionRecordV1 && p[0] != sessionRecordV2) {
		return nil, fmt.Errorf("%w: session record %x", ErrCorrupt, key)
	}
	r := &Session{
		Until:    int64(binary.BigEndian.Uint64(p[18:])),
		Avail:    int64(binary.BigEndian.Uint64(p[26:])),
		Held:     int64(binary.BigEndian.Uint64(p[34:])),
		ReadySeq: binary.BigEndian.Uint64(p[42:]),
		Ready:    p[1]&2 != 0,
	}
	if p[1]&1 != 0 {
		r.Token = append([]byte(nil), p[2:18]...)
	}
	if n == sessionRecordV2Len {
		r.Parked = int64(binary.BigEndian.Uint64(p[sessionRecordLen:]))
		r.Updated = int64(binary.BigEndian.Uint64(p[sessionRecordLen+8:]))
	}
	if len(p) > n {
		r.State = append([]byte(nil), p[n:]...)
	}
	return r, nil
}

// ReadSession reads a session's record from r; an implicit session reads
// as an empty record.
func ReadSession(r pebble.Reader, k EntityKey, sid string) (*Session, error) {
	key := SessionKey(k, sid)
	p, found, err := Get(r, key)
	if err != nil || !found {
		return &Session{}, err
	}
	return DecodeSession(key, p)
}

// sessionRef names a session of an entity partition.
type sessionRef struct {
	k   EntityKey
	sid string
}

// Session returns a session's record as this batch left it. The records
// a batch reads stay with it (changed in place by the caller) until
// FlushSessions writes the changed ones: a session's messages change its
// counts several times per command (a Lock of 64 messages: 128 times),
// and a read through the batch for each cost more than the messages.
func (b *Batch) Session(k EntityKey, sid string) (*Session, error) {
	ref := sessionRef{k, sid}
	if r, ok := b.sessionRecs[ref]; ok {
		return r, nil
	}
	r, err := ReadSession(b.pb, k, sid)
	if err != nil {
		return nil, err
	}
	if b.sessionRecs == nil {
		b.sessionRecs = make(map[sessionRef]*Session)
		b.sessionDirty = make(map[sessionRef]bool)
	}
	b.sessionRecs[ref] = r
	return r, nil
}

// PutSession notes that a session's record (the one Session returned)
// changed.
func (b *Batch) PutSession(k EntityKey, sid string, r *Session) error {
	ref := sessionRef{k, sid}
	if b.sessionRecs[ref] != r {
		return fmt.Errorf("partition: %s: session %q: a record not read through the applier", k, sid)
	}
	b.sessionDirty[ref] = true
	return nil
}

// FlushSessions writes the session records changed since the last flush,
// in key order: a record, or its deletion once the session is implicit
// again.
func (b *Batch) FlushSessions() error {
	refs := make([]sessionRef, 0, len(b.sessionDirty))
	for ref := range b.sessionDirty {
		refs = append(refs, ref)
	}
	slices.SortFunc(refs, func(x, y sessionRef) int {
		switch {
		case x.k.Less(y.k):
			return -1
		case y.k.Less(x.k):
			return 1
		}
		return strings.Compare(x.sid, y.sid)
	})
	for _, ref := range refs {
		r, key := b.sessionRecs[ref], SessionKey(ref.k, ref.sid)
		var err error
		if r.Empty() {
			err = b.pb.Delete(key, nil)
		} else {
			err = b.pb.Set(key, Seal(key, r.Encode()), nil)
		}
		if err != nil {
			return err
		}
		delete(b.sessionDirty, ref)
	}
	return nil
}

// dropSessions forgets the session records of an entity partition whose
// records a range deletion removed.
func (b *Batch) dropSessions(k EntityKey) {
	for ref := range b.sessionRecs {
		if ref.k == k {
			delete(b.sessionRecs, ref)
			delete(b.sessionDirty, ref)
		}
	}
}

// SetReady puts the session in (or takes it out of) the index of sessions
// that accept-next may hand out: unlocked with available messages. seq
// orders it among them: the message that made it available.
func (b *Batch) SetReady(x *ReadyIndex, k EntityKey, sid string, r *Session, ready bool, seq uint64) error {
	if r.Ready == ready {
		return nil
	}
	if r.Ready {
		if err := b.pb.Delete(SessionReadyKey(k, r.ReadySeq, sid), nil); err != nil {
			return err
		}
		r.Ready, r.ReadySeq = false, 0
		return nil
	}
	key := SessionReadyKey(k, seq, sid)
	r.Ready, r.ReadySeq = true, seq
	if bytes.Compare(key, x.floor) < 0 {
		x.floor = key
	}
	return b.pb.Set(key, Seal(key, nil), nil)
}

// SessionSeqs returns the sequence numbers in list l of a session (in
// order), at most max (0: all).
func SessionSeqs(r pebble.Reader, k EntityKey, l SessionList, sid string, max int) ([]uint64, error) {
	it, err := PrefixIter(r, SessionStreamPrefix(k, byte(l), partitionpb.SubQueue_SUB_QUEUE_MAIN, sid))
	if err != nil {
		return nil, err
	}
	var seqs []uint64
	for valid := it.First(); valid && (max == 0 || len(seqs) < max); valid = it.Next() {
		if _, err := IterValue(it); err != nil {
			return nil, CloseIter(it, err)
		}
		key := it.Key()
		if len(key) < 8 {
			return nil, CloseIter(it, fmt.Errorf("%w: session key %x", ErrCorrupt, key))
		}
		seqs = append(seqs, binary.BigEndian.Uint64(key[len(key)-8:]))
	}
	return seqs, CloseIter(it, it.Error())
}

// SessionSeqs is SessionSeqs over the batch.
func (b *Batch) SessionSeqs(k EntityKey, l SessionList, sid string, max int) ([]uint64, error) {
	return SessionSeqs(b.pb, k, l, sid, max)
}

// ReadyIndex follows the index of an entity partition's ready sessions
// (available messages, no lock): a floor below which it has no entry.
// Accept-next takes the session at the index's head and so deletes there,
// one session after another: from the start of the index an accept would
// step over every session consumed lately.
type ReadyIndex struct{ floor []byte }

// NewReadyIndex is entity partition k's index of ready sessions.
func NewReadyIndex(k EntityKey) ReadyIndex { return ReadyIndex{floor: KindPrefix(k, KindSessionReady)} }

// Floor is the key below which the index has no entry (for checks).
func (x *ReadyIndex) Floor() []byte { return x.floor }

// FirstReady returns the session of entity partition k that has waited
// longest with available messages and no lock; ok is false when there is
// none. head is the key the index starts at now (its end when it is
// empty): the floor a batch that takes the session may raise to (Take).
func (x *ReadyIndex) FirstReady(r pebble.Reader, k EntityKey) (sid string, head []byte, ok bool, err error) {
	end := PrefixEnd(KindPrefix(k, KindSessionReady))
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: x.floor, UpperBound: end})
	if err != nil {
		return "", nil, false, fmt.Errorf("partition: iterator: %w", err)
	}
	head = end
	if it.First() {
		if _, err := IterValue(it); err != nil {
			return "", nil, false, CloseIter(it, err)
		}
		key := it.Key()
		if len(key) < KindPrefixLen+8 {
			return "", nil, false, CloseIter(it, fmt.Errorf("%w: ready session key %x", ErrCorrupt, key))
		}
		sid, head, ok = string(key[KindPrefixLen+8:]), append([]byte(nil), key...), true
	}
	return sid, head, ok, CloseIter(it, it.Error())
}

// NextReady is FirstReady in a batch about to take the session: the floor
// rises to the index's head (nothing is below it; the accept deletes at
// it).
func (b *Batch) NextReady(x *ReadyIndex, k EntityKey) (sid string, ok bool, err error) {
	sid, head, ok, err := x.FirstReady(b.pb, k)
	if err != nil {
		return "", false, err
	}
	x.floor = head
	return sid, ok, nil
}

// ListSessions returns the ids of the sessions that have a record, in id
// order, after skipping skip of them, at most top; with since > 0 only
// those whose state was set or cleared at or after since (ms).
func ListSessions(r pebble.Reader, k EntityKey, skip, top int, since int64) ([]string, error) {
	it, err := PrefixIter(r, KindPrefix(k, KindSession))
	if err != nil {
		return nil, err
	}
	var sids []string
	for valid := it.First(); valid && len(sids) < top; valid = it.Next() {
		if since > 0 {
			p, err := IterValue(it)
			if err != nil {
				return nil, CloseIter(it, err)
			}
			rec, err := DecodeSession(it.Key(), p)
			if err != nil {
				return nil, CloseIter(it, err)
			}
			if rec.Updated < since {
				continue
			}
		}
		if skip > 0 {
			skip--
			continue
		}
		if _, err := IterValue(it); err != nil {
			return nil, CloseIter(it, err)
		}
		sids = append(sids, string(it.Key()[KindPrefixLen:]))
	}
	return sids, CloseIter(it, it.Error())
}
