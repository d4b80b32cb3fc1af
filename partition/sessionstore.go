package partition

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"

	"github.com/cockroachdb/pebble/v2"

	"github.com/quorumbus/quorumbus/partition/store"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// The store of sessions. On an entity that requires sessions every message
// of the main sub-queue belongs to one session, and the entity partition
// keeps, beside the message records every entity has (store/doc.go):
//
//	0x02 eid part 0x0b session_id                    the session record (sessionRecord)
//	0x02 eid part 0x0c sub len(2) session_id seq(8)  the session's stream: its available messages, in order
//	0x02 eid part 0x0d sub len(2) session_id seq(8)  its messages locked under the session lock
//	0x02 eid part 0x0e seq(8) session_id             sessions with available messages and no lock, by when they became so
//	0x02 eid part 0x0f until(8) session_id           session locks by their end
//	0x02 eid part 0x18 sub len(2) session_id seq(8)  its messages that are neither available nor locked: deferred, scheduled
//
// These take the place of the available index (store.KindAvailable) and of
// entity.fresh for session messages: index() puts a session message's
// entries here and keeps the session record's counts with them, so every
// rule that moves a message (lock, settle, expiry, activation) keeps the
// sessions right without knowing them. The three entries of a session's
// messages (stream, held, parked) together name every message of the
// session in the main sub-queue, which is what a session's peek reads.
// The functions below are the
// rules' words for this part of the store; no rule builds these keys.
// MaxSessionIDBytes caps a session id: the most bytes that Service Bus's
// 128 characters take in UTF-8. The front-end refuses more than 128
// characters; the state machine keeps the byte bound it has always
// applied, so that replicas of every version judge a command alike.
const MaxSessionIDBytes = 512

// MaxSessionStateBytes caps a session's state. Service Bus's limit is
// the entity's maximum message size, which the front-end applies; this
// bound keeps a state within a Raft entry whatever the entity says.
const MaxSessionStateBytes = 1 << 20

// inSession reports whether the message in slot s is kept in a session's
// stream rather than in the entity's available index.
func (e *entity) inSession(s store.Slot) bool {
	return e.cfg.RequiresSession && s.Sub == partitionpb.SubQueue_SUB_QUEUE_MAIN && s.Session != ""
}

// sessionRecord is what an entity partition keeps of one session. It
// exists while the session has available or held messages, a lock or a
// state; a session without any of them is implicit (no record).
type sessionRecord struct {
	token    []byte // the session lock's, 16 bytes; nil: not locked
	until    int64  // the lock's end
	avail    int64  // entries in the session's stream
	held     int64  // messages locked under the session lock
	parked   int64  // deferred and scheduled messages (store.KindSessionParked)
	ready    bool   // it has a ready entry, at readySeq
	readySeq uint64
	updated  int64  // when its state was last set or cleared (ms); 0: never
	state    []byte // nil: none
}

func (r *sessionRecord) locked() bool { return len(r.token) > 0 }

// lockedBy reports whether token holds the session's lock at now.
func (r *sessionRecord) lockedBy(token []byte, now int64) bool {
	return r.locked() && bytes.Equal(r.token, token) && r.until > now
}

func (r *sessionRecord) empty() bool {
	return !r.locked() && r.avail == 0 && r.held == 0 && r.parked == 0 && len(r.state) == 0
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

func (r *sessionRecord) encode() []byte {
	v2 := r.parked != 0 || r.updated != 0
	b := make([]byte, 0, sessionRecordV2Len+len(r.state))
	var flags byte
	if r.locked() {
		flags |= 1
	}
	if r.ready {
		flags |= 2
	}
	version := byte(sessionRecordV1)
	if v2 {
		version = sessionRecordV2
	}
	b = append(b, version, flags)
	var token [16]byte
	copy(token[:], r.token)
	b = append(b, token[:]...)
	b = binary.BigEndian.AppendUint64(b, uint64(r.until))
	b = binary.BigEndian.AppendUint64(b, uint64(r.avail))
	b = binary.BigEndian.AppendUint64(b, uint64(r.held))
	b = binary.BigEndian.AppendUint64(b, r.readySeq)
	if v2 {
		b = binary.BigEndian.AppendUint64(b, uint64(r.parked))
		b = binary.BigEndian.AppendUint64(b, uint64(r.updated))
	}
	return append(b, r.state...)
}

func decodeSessionRecord(key, p []byte) (*sessionRecord, error) {
	n := sessionRecordLen
	if len(p) > 0 && p[0] == sessionRecordV2 {
		n = sessionRecordV2Len
	}
	if len(p) < n || (p[0] != sessionRecordV1 && p[0] != sessionRecordV2) {
		return nil, fmt.Errorf("%w: session record %x", ErrCorrupt, key)
	}
	r := &sessionRecord{
		until:    int64(binary.BigEndian.Uint64(p[18:])),
		avail:    int64(binary.BigEndian.Uint64(p[26:])),
		held:     int64(binary.BigEndian.Uint64(p[34:])),
		readySeq: binary.BigEndian.Uint64(p[42:]),
		ready:    p[1]&2 != 0,
	}
	if p[1]&1 != 0 {
		r.token = append([]byte(nil), p[2:18]...)
	}
	if n == sessionRecordV2Len {
		r.parked = int64(binary.BigEndian.Uint64(p[sessionRecordLen:]))
		r.updated = int64(binary.BigEndian.Uint64(p[sessionRecordLen+8:]))
	}
	if len(p) > n {
		r.state = append([]byte(nil), p[n:]...)
	}
	return r, nil
}

// readSession reads a session's record from r; an implicit session reads
// as an empty record.
func readSession(r pebble.Reader, k ekey, sid string) (*sessionRecord, error) {
	key := store.SessionKey(k, sid)
	p, found, err := store.Get(r, key)
	if err != nil || !found {
		return &sessionRecord{}, err
	}
	return decodeSessionRecord(key, p)
}

// sessionRef names a session of an entity partition.
type sessionRef struct {
	k   ekey
	sid string
}

// session returns a session's record as this Apply left it. The records
// an Apply reads stay with the applier (changed in place) until
// flushSessions writes the changed ones: a session's messages change its
// counts several times per command (a Lock of 64 messages: 128 times),
// and a read through the batch for each cost more than the messages.
func (a *applier) session(e *entity, sid string) (*sessionRecord, error) {
	ref := sessionRef{e.key, sid}
	if r, ok := a.sessionRecs[ref]; ok {
		return r, nil
	}
	r, err := readSession(a.b, e.key, sid)
	if err != nil {
		return nil, err
	}
	if a.sessionRecs == nil {
		a.sessionRecs = make(map[sessionRef]*sessionRecord)
		a.sessionDirty = make(map[sessionRef]bool)
	}
	a.sessionRecs[ref] = r
	return r, nil
}

// putSession notes that a session's record (the one session returned)
// changed.
func (a *applier) putSession(e *entity, sid string, r *sessionRecord) error {
	ref := sessionRef{e.key, sid}
	if a.sessionRecs[ref] != r {
		return fmt.Errorf("partition: %s: session %q: a record not read through the applier", e.key, sid)
	}
	a.sessionDirty[ref] = true
	return nil
}

// flushSessions writes the session records changed since the last flush,
// in key order: a record, or its deletion once the session is implicit
// again.
func (a *applier) flushSessions() error {
	refs := make([]sessionRef, 0, len(a.sessionDirty))
	for ref := range a.sessionDirty {
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
		r, key := a.sessionRecs[ref], store.SessionKey(ref.k, ref.sid)
		var err error
		if r.empty() {
			err = a.b.Delete(key, nil)
		} else {
			err = a.b.Set(key, store.Seal(key, r.encode()), nil)
		}
		if err != nil {
			return err
		}
		delete(a.sessionDirty, ref)
	}
	return nil
}

// dropSessions forgets the session records of an entity partition whose
// records a range deletion removed.
func (a *applier) dropSessions(k ekey) {
	for ref := range a.sessionRecs {
		if ref.k == k {
			delete(a.sessionRecs, ref)
			delete(a.sessionDirty, ref)
		}
	}
}

// setReady puts the session in (or takes it out of) the index of sessions
// that accept-next may hand out: unlocked with available messages. seq
// orders it among them: the message that made it available.
func (a *applier) setReady(e *entity, sid string, r *sessionRecord, ready bool, seq uint64) error {
	if r.ready == ready {
		return nil
	}
	if r.ready {
		if err := a.b.Delete(store.SessionReadyKey(e.key, r.readySeq, sid), nil); err != nil {
			return err
		}
		r.ready, r.readySeq = false, 0
		return nil
	}
	key := store.SessionReadyKey(e.key, seq, sid)
	r.ready, r.readySeq = true, seq
	if bytes.Compare(key, e.readyFloor) < 0 {
		e.readyFloor = key
	}
	return a.b.Set(key, store.Seal(key, nil), nil)
}

// countSessionMessage notes a message of a session entering (+1) or
// leaving (-1) the session's stream (avail), its held messages (held) or
// its parked ones (parked).
func (a *applier) countSessionMessage(e *entity, sid string, seq uint64, avail, held, parked int64) error {
	r, err := a.session(e, sid)
	if err != nil {
		return err
	}
	r.avail += avail
	r.held += held
	// A store written before parked messages were counted has deferred
	// and scheduled session messages that never counted: the count
	// stops at zero rather than call the store corrupt.
	r.parked = max(r.parked+parked, 0)
	if r.avail < 0 || r.held < 0 {
		return fmt.Errorf("%w: %s: session %q counts %d available, %d held", ErrCorrupt, e.key, sid, r.avail, r.held)
	}
	switch {
	case r.avail == 0:
		err = a.setReady(e, sid, r, false, 0)
	case !r.locked():
		err = a.setReady(e, sid, r, true, seq)
	}
	if err != nil {
		return err
	}
	return a.putSession(e, sid, r)
}

// setSessionLock gives (token non-nil) or takes the session's lock and
// keeps the index of session locks by their end with it. The caller
// writes the record.
func (a *applier) setSessionLock(e *entity, sid string, r *sessionRecord, token []byte, until int64) error {
	if r.locked() {
		if err := a.b.SetSessionLock(&e.slock, e.key, r.until, sid, false); err != nil {
			return err
		}
	}
	r.token, r.until = token, 0
	if token != nil {
		r.until = until
		if err := a.b.SetSessionLock(&e.slock, e.key, until, sid, true); err != nil {
			return err
		}
	}
	if a.slocks == nil {
		a.slocks = make(map[ekey]bool)
	}
	a.slocks[e.key] = true
	return nil
}

// sessionSeqs returns the sequence numbers of a session's entries of kind
// store.KindSessionMsg (its stream, in order) or store.KindSessionHeld, at most max
// (0: all).
func sessionSeqs(r pebble.Reader, k ekey, kind byte, sid string, max int) ([]uint64, error) {
	it, err := store.PrefixIter(r, store.SessionStreamPrefix(k, kind, partitionpb.SubQueue_SUB_QUEUE_MAIN, sid))
	if err != nil {
		return nil, err
	}
	var seqs []uint64
	for valid := it.First(); valid && (max == 0 || len(seqs) < max); valid = it.Next() {
		if _, err := store.IterValue(it); err != nil {
			return nil, store.CloseIter(it, err)
		}
		key := it.Key()
		if len(key) < 8 {
			return nil, store.CloseIter(it, fmt.Errorf("%w: session key %x", ErrCorrupt, key))
		}
		seqs = append(seqs, binary.BigEndian.Uint64(key[len(key)-8:]))
	}
	return seqs, store.CloseIter(it, it.Error())
}

// firstReadySession returns the session that has waited longest with
// available messages and no lock; ok is false when there is none. The
// scan starts at e.readyFloor; head is the key the index starts at now
// (its end when it is empty), which the applier raises the floor to.
func firstReadySession(r pebble.Reader, e *entity) (sid string, head []byte, ok bool, err error) {
	end := store.PrefixEnd(store.KindPrefix(e.key, store.KindSessionReady))
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: e.readyFloor, UpperBound: end})
	if err != nil {
		return "", nil, false, fmt.Errorf("partition: iterator: %w", err)
	}
	head = end
	if it.First() {
		if _, err := store.IterValue(it); err != nil {
			return "", nil, false, store.CloseIter(it, err)
		}
		key := it.Key()
		if len(key) < store.KindPrefixLen+8 {
			return "", nil, false, store.CloseIter(it, fmt.Errorf("%w: ready session key %x", ErrCorrupt, key))
		}
		sid, head, ok = string(key[store.KindPrefixLen+8:]), append([]byte(nil), key...), true
	}
	return sid, head, ok, store.CloseIter(it, it.Error())
}

// listSessions returns the ids of the sessions that have a record, in id
// order, after skipping skip of them, at most top; with since > 0 only
// those whose state was set or cleared at or after since (ms).
func listSessions(r pebble.Reader, k ekey, skip, top int, since int64) ([]string, error) {
	it, err := store.PrefixIter(r, store.KindPrefix(k, store.KindSession))
	if err != nil {
		return nil, err
	}
	var sids []string
	for valid := it.First(); valid && len(sids) < top; valid = it.Next() {
		if since > 0 {
			p, err := store.IterValue(it)
			if err != nil {
				return nil, store.CloseIter(it, err)
			}
			rec, err := decodeSessionRecord(it.Key(), p)
			if err != nil {
				return nil, store.CloseIter(it, err)
			}
			if rec.updated < since {
				continue
			}
		}
		if skip > 0 {
			skip--
			continue
		}
		if _, err := store.IterValue(it); err != nil {
			return nil, store.CloseIter(it, err)
		}
		sids = append(sids, string(it.Key()[store.KindPrefixLen:]))
	}
	return sids, store.CloseIter(it, it.Error())
}
