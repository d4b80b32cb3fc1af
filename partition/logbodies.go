package partition

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"sync"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/quorumbus/quorumbus/partition/store"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
	"github.com/quorumbus/quorumbus/proto/wire"
)

// castagnoli is the CRC of bodies in the Raft log (the store's records
// have their own seal, store.Seal, and snapshot streams theirs).
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Bodies kept in the Raft log.
//
// Every replica writes each message body to its Raft log before the entry
// commits. Writing it into the store as well (memtable, then a blob file at
// flush) wrote every body twice on every replica, and the second copy was
// a large share of the CPU a send costs (the commit that introduced this
// has the measurements). With
// Options.Log, a message's state record instead names the entry and the
// bytes in it that carry the message (StoredMessage.body_index and the
// fields after it), and readers take the sections from there.
//
// The log only keeps what Raft has not truncated, and Raft truncates after
// a snapshot, up to at most the snapshot's index. So Snapshot first moves
// every body still in the log into body records (inlineBodies) and then
// flushes: what the snapshot captures, and what the store holds durably
// from then on, names no entry Raft may drop. Entries applied after the
// snapshot are above its index and stay in the log until the next one,
// which moves their bodies in turn. A message that lives across no
// snapshot, the common case for a queue, is never written to the store.
//
// Whether a body is in the log or in a body record is each replica's own
// business (snapshots are taken at different times); the messages are the
// same, and a snapshot stream holds no references, so replicas' snapshots
// stay identical (TestLogBodiesDeterminism).

// span is where one message lies in an entry.
type span struct {
	off, n uint32
}

// enqueueSpans walks a Raft entry as DecodeBatch decodes it and returns,
// per command, where each message of an Enqueue lies in data (nil for other
// commands). It returns nil if the entry does not walk as expected; its
// messages are then stored whole.
func enqueueSpans(data []byte) [][]span {
	if len(data) < 1 {
		return nil
	}
	var out [][]span
	err := walkFields(data, 1, len(data), func(num protowire.Number, off, n int) error {
		if num != 2 { // Batch.commands
			return nil
		}
		var spans []span
		err := walkFields(data, off, off+n, func(num protowire.Number, off, n int) error {
			if num != 3 { // Command.enqueue
				return nil
			}
			return walkFields(data, off, off+n, func(num protowire.Number, off, n int) error {
				if num == 3 { // Enqueue.messages
					spans = append(spans, span{uint32(off), uint32(n)})
				}
				return nil
			})
		})
		out = append(out, spans)
		return err
	})
	if err != nil {
		return nil
	}
	return out
}

// walkFields calls f with the number, offset and length of every
// length-delimited field in data[from:to], and skips the others.
func walkFields(data []byte, from, to int, f func(num protowire.Number, off, n int) error) error {
	for p := from; p < to; {
		num, typ, n := protowire.ConsumeTag(data[p:to])
		if n < 0 {
			return protowire.ParseError(n)
		}
		p += n
		if typ != protowire.BytesType {
			n = protowire.ConsumeFieldValue(num, typ, data[p:to])
			if n < 0 {
				return protowire.ParseError(n)
			}
			p += n
			continue
		}
		v, n := protowire.ConsumeBytes(data[p:to])
		if n < 0 {
			return protowire.ParseError(n)
		}
		if err := f(num, p+n-len(v), len(v)); err != nil {
			return err
		}
		p += n
	}
	return nil
}

// keepInLog makes m's body a reference to where it lies in the entry
// being applied, when the machine reads the log and the entry walked.
func (a *applier) keepInLog(m *partitionpb.StoredMessage, i int) {
	if a.logs == nil || i >= len(a.spans) {
		return
	}
	s := a.spans[i]
	m.BodyIndex, m.BodyOffset, m.BodyLength = a.entry, s.off, s.n
	// A topic's copies of one message name the same bytes: one checksum.
	if a.crcOf != (crcKey{a.entry, s}) || a.crcOf.entry == 0 {
		a.crcOf, a.crc = crcKey{a.entry, s}, crc32.Checksum(a.data[s.off:s.off+s.n], castagnoli)
	}
	m.BodyCrc = a.crc
}

// A topic message's bare message is kept once for all its copies. While
// it is in the Raft log the copies name the same bytes of the entry
// (keepInLog); when they leave it (inlineBodies), or when the machine
// does not keep bodies in the log (addCopy), the bare message becomes a
// blob of the topic partition that every copy names and counts, as a
// staged one (sharedblobs.go), and each copy keeps only its header and
// annotations in a body record of its own. The blob's name comes from
// where the message lies in its entry, so that every replica writes the
// same records whichever way it kept the body, and a snapshot of either
// is the same.

// bodyBlobID is the name of the shared blob of the message at s of entry
// index: store.BlobIDBytes long, as a staged blob's (random) name is.
func bodyBlobID(index uint64, s span) []byte {
	id := binary.BigEndian.AppendUint64(make([]byte, 0, store.BlobIDBytes), index)
	id = binary.BigEndian.AppendUint32(id, s.off)
	return binary.BigEndian.AppendUint32(id, s.n)
}

// nameSharedBody makes m, a copy of a message sent to topic, name the
// shared blob blob that keeps bare, its bare message.
func nameSharedBody(m *partitionpb.StoredMessage, topic uint64, blob, bare []byte) {
	m.BodyBlob, m.BodyBlobLength, m.BodyBlobCrc = blob, uint64(len(bare)), crc32.Checksum(bare, castagnoli)
	m.BodyBlobEntity = topic
}

// shareBody makes m, a message of subscription partition s, name the
// shared blob blob of its topic partition that keeps its bare message,
// and counts it. With refs > 0 it also writes the blob, for refs
// messages (a topic's send writes it once for all its copies instead).
func (a *applier) shareBody(s *entity, m *partitionpb.StoredMessage, blob []byte, refs int) error {
	topic := s.cfg.GetTopicId()
	nameSharedBody(m, topic, blob, m.Bare)
	if refs > 0 {
		if err := a.b.ShareBody(ekey{ID: topic, Part: s.key.Part}, blob, m.Bare, refs); err != nil {
			return err
		}
	}
	m.Bare = nil
	return a.b.UseSharedBlob(s.key, topic, blob)
}

// crcKey names the bytes of an entry whose checksum the applier kept.
type crcKey struct {
	entry uint64
	span  span
}

// dropLogRef clears where m's body lay in the log, once it is in the
// store.
func dropLogRef(m *partitionpb.StoredMessage) {
	m.BodyIndex, m.BodyOffset, m.BodyLength, m.BodyCrc = 0, 0, 0, 0
}

// logReader reads bodies from the Raft log. It keeps the entries it read
// last, least recently used out: messages are read in sequence order and
// neighbours share entries, so one reader hits its entry for all but the
// first message of it. Several readers at once read from several entries:
// a topic's subscriptions drained together hold copies of the same
// messages, from the same entries, each read at its own pace (and a
// group's queues are read side by side). One entry kept served none of
// them: each read took the entry of another subscription's last read out,
// and nearly every message read its whole entry back from the log.
//
// Invariant: recent holds distinct indexes; their data adds up to at most
// logReaderBytes, unless a single entry is larger (it is kept alone).
type logReader struct {
	read func(index uint64) ([]byte, error)

	mu     sync.Mutex
	recent []cachedEntry
	bytes  int
	clock  uint64 // counts reads; cachedEntry.used is the last that took it
}

type cachedEntry struct {
	index uint64
	data  []byte
	used  uint64
}

// The entries a logReader keeps: enough for the subscriptions of a topic
// drained at once (and the queues of its group), each reading its next
// entry, within a budget of memory per group, whose entries are usually
// tens of kilobytes (64 messages each at most) and at most a few
// megabytes.
const (
	logReaderEntries = 32
	logReaderBytes   = 8 << 20
)

// entry returns the data of the entry at index, from the ones kept or
// from the log.
func (l *logReader) entry(index uint64) ([]byte, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.clock++
	for i := range l.recent {
		if c := &l.recent[i]; c.index == index {
			c.used = l.clock
			return c.data, nil
		}
	}
	data, err := l.read(index)
	if err != nil {
		return nil, err
	}
	for len(l.recent) > 0 && (len(l.recent) >= logReaderEntries || l.bytes+len(data) > logReaderBytes) {
		old := 0
		for i, c := range l.recent {
			if c.used < l.recent[old].used {
				old = i
			}
		}
		l.bytes -= len(l.recent[old].data)
		last := len(l.recent) - 1
		l.recent[old] = l.recent[last]
		l.recent[last] = cachedEntry{}
		l.recent = l.recent[:last]
	}
	l.recent = append(l.recent, cachedEntry{index: index, data: data, used: l.clock})
	l.bytes += len(data)
	return data, nil
}

// sections fills in m's sections from the entry m.BodyIndex names, after
// checking the bytes against the CRC its state record holds.
func (l *logReader) sections(m *partitionpb.StoredMessage) error {
	data, err := l.entry(m.BodyIndex)
	if err != nil {
		return fmt.Errorf("partition: body of message %d from Raft entry %d: %w", m.SequenceNumber, m.BodyIndex, err)
	}
	end := uint64(m.BodyOffset) + uint64(m.BodyLength)
	if end > uint64(len(data)) {
		return fmt.Errorf("%w: message %d: bytes %d-%d of Raft entry %d, which has %d", ErrCorrupt, m.SequenceNumber, m.BodyOffset, end, m.BodyIndex, len(data))
	}
	b := data[m.BodyOffset:end]
	if crc32.Checksum(b, castagnoli) != m.BodyCrc {
		return fmt.Errorf("%w: message %d: body in Raft entry %d fails its checksum", ErrCorrupt, m.SequenceNumber, m.BodyIndex)
	}
	if h, an, bare, ok := newMessageSections(b); ok {
		m.Header, m.Annotations, m.Bare = h, an, bare
		return nil
	}
	var nm partitionpb.NewMessage
	if err := proto.Unmarshal(b, &nm); err != nil {
		return fmt.Errorf("%w: message %d in Raft entry %d: %v", ErrCorrupt, m.SequenceNumber, m.BodyIndex, err)
	}
	m.Header, m.Annotations, m.Bare = nm.Header, nm.Annotations, nm.Bare
	return nil
}

// newMessageSections returns the header, annotations and bare message of
// an encoded NewMessage, pointing into p: entries read from the log are
// never written to, so a body a Lock returns need not be copied out of its
// entry, nor decoded with protobuf's allocations. ok is false for what
// only protobuf's decoder can judge: a section field of another wire type,
// or a wire type the walker does not take.
func newMessageSections(p []byte) (header, annotations, bare []byte, ok bool) {
	for len(p) > 0 {
		f, rest, ok := wire.Next(p)
		if !ok {
			return nil, nil, nil, false
		}
		p = rest
		switch f.Num {
		case 6, 7, 8:
			if f.Typ != protowire.BytesType {
				return nil, nil, nil, false
			}
		}
		b := f.B
		if len(b) == 0 {
			b = nil // as protobuf decodes an empty bytes field
		}
		switch f.Num { // the last of a repeated field wins, as in protobuf
		case 6:
			header = b
		case 7:
			annotations = b
		case 8:
			bare = b
		}
	}
	return header, annotations, bare, true
}

// inlineBodies moves every body that is still in the Raft log into a body
// record, so that Raft may truncate the log once the snapshot about to be
// taken is stored. Call it with m.mu held.
func (m *Machine) inlineBodies() error {
	if m.logs == nil {
		return nil
	}
	m.lockedStates.Reset() // the records change: their bodies move
	keys := make([]ekey, 0, len(m.entities))
	for k := range m.entities {
		keys = append(keys, k)
	}
	moved, err := store.RewriteMessages(m.db, keys, store.BatchBytes, func(k ekey, st *partitionpb.StoredMessage) (store.Rewrite, error) {
		if st.BodyIndex == 0 {
			return store.Rewrite{}, nil
		}
		if err := m.logs.sections(st); err != nil {
			return store.Rewrite{}, err
		}
		rw := store.Rewrite{Move: true}
		if e := m.entities[k]; e != nil && isSubscription(e.cfg) && len(st.Bare) > 0 {
			// A topic's copy: its bare message is kept once for every
			// copy, in the topic partition, as addCopy keeps it when
			// the body is not in the log.
			blob := bodyBlobID(st.BodyIndex, span{st.BodyOffset, st.BodyLength})
			topic := e.cfg.GetTopicId()
			nameSharedBody(st, topic, blob, st.Bare)
			rw.Shared = &store.SharedBlob{Owner: ekey{ID: topic, Part: k.Part}, Blob: blob}
		}
		dropLogRef(st)
		return rw, nil
	})
	if err != nil {
		return err
	}
	if moved > 0 {
		m.log.Debug("partition: bodies moved from the Raft log into the store", "messages", moved, "applied", m.applied)
	}
	return nil
}
