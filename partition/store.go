package partition

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/sstable"
	"google.golang.org/protobuf/proto"

	"github.com/quorumbus/quorumbus/partition/store"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// Field numbers of StoredMessage's sections (partition.proto), which a
// body record holds alone. TestBodyEncoding holds them to the proto.
const (
	fieldLockToken   protowire.Number = 6
	fieldLockedUntil protowire.Number = 7
	fieldHeader      protowire.Number = 13
	fieldAnnotations protowire.Number = 14
	fieldBare        protowire.Number = 15
)

// setBody writes key → the sealed body record of m: its three sections,
// encoded as protobuf encodes a StoredMessage holding only them.
func setBody(b *pebble.Batch, key []byte, m *partitionpb.StoredMessage) error {
	_, err := setRecord(b, key, m, true)
	return err
}

// setState writes key → the sealed state record of m: m without its
// sections, encoded as protobuf encodes it. TestStateEncoding holds the
// encoding to protobuf's, field for field.
func setState(b *pebble.Batch, key []byte, m *partitionpb.StoredMessage) error {
	_, err := setRecord(b, key, m, false)
	return err
}

// setRecord writes key → m's sealed body record (body) or state record,
// straight into the batch's buffer: the record is encoded once to size it
// and once to write it. Records are encoded by hand because every send,
// lock and settlement writes one or two on every replica, and the generic
// marshaller's sizing and reflective field walk cost as much as copying a
// body. (A flag rather than an encoding function: the encoder passed to a
// function value would escape, an allocation per record.) It returns the
// unsealed record, which is the batch's until the batch is reset.
func setRecord(b *pebble.Batch, key []byte, m *partitionpb.StoredMessage, body bool) ([]byte, error) {
	var e recordEncoder
	e.message(m, body)
	n := e.n
	op := b.SetDeferred(len(key), n+store.CRCLen)
	copy(op.Key, key)
	e.out = op.Value[:0]
	e.message(m, body)
	if len(e.out) != n {
		return nil, fmt.Errorf("partition: record %x: %d bytes, sized %d", key, len(e.out), n)
	}
	binary.BigEndian.PutUint32(op.Value[n:], store.Checksum(key, op.Value[:n]))
	return op.Value[:n], op.Finish()
}

// recordEncoder sizes (out == nil) or appends protobuf fields, proto3
// style: zero scalars and empty strings and bytes are left out.
type recordEncoder struct {
	n   int
	out []byte
}

func (e *recordEncoder) varint(num protowire.Number, v uint64) {
	if v == 0 {
		return
	}
	if e.out == nil {
		e.n += protowire.SizeTag(num) + protowire.SizeVarint(v)
		return
	}
	e.out = protowire.AppendVarint(protowire.AppendTag(e.out, num, protowire.VarintType), v)
}

// bytes encodes v, even empty when always (an element of a repeated field).
func (e *recordEncoder) bytes(num protowire.Number, v []byte, always bool) {
	if len(v) == 0 && !always {
		return
	}
	if e.out == nil {
		e.n += protowire.SizeTag(num) + protowire.SizeBytes(len(v))
		return
	}
	e.out = protowire.AppendBytes(protowire.AppendTag(e.out, num, protowire.BytesType), v)
}

func (e *recordEncoder) str(num protowire.Number, v string) {
	if v == "" {
		return
	}
	if e.out == nil {
		e.n += protowire.SizeTag(num) + protowire.SizeBytes(len(v))
		return
	}
	e.out = protowire.AppendString(protowire.AppendTag(e.out, num, protowire.BytesType), v)
}

// stateFields are the field numbers state writes; TestStateEncoding checks
// that with the sections they are all of StoredMessage's.
var stateFields = []protowire.Number{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 40, 41}

// message encodes m's body record (body) or its state record.
func (e *recordEncoder) message(m *partitionpb.StoredMessage, body bool) {
	if body {
		e.sections(m)
	} else {
		e.state(m)
	}
}

// sections encodes the sections of m.
func (e *recordEncoder) sections(m *partitionpb.StoredMessage) {
	e.bytes(fieldHeader, m.Header, false)
	e.bytes(fieldAnnotations, m.Annotations, false)
	e.bytes(fieldBare, m.Bare, false)
}

// state encodes the fields of m but its sections, in field order.
func (e *recordEncoder) state(m *partitionpb.StoredMessage) {
	e.varint(1, m.SequenceNumber)
	e.varint(2, uint64(m.EnqueuedTimeMs))
	e.varint(3, uint64(m.DeliveryCount))
	e.varint(4, uint64(int64(m.State))) // enums are int32, sign-extended
	e.varint(5, uint64(int64(m.SubQueue)))
	e.bytes(6, m.LockToken, false)
	e.varint(7, uint64(m.LockedUntilMs))
	e.varint(8, uint64(m.ExpiresAtMs))
	e.varint(9, uint64(m.ScheduledEnqueueTimeMs))
	e.str(10, m.MessageId)
	e.str(11, m.SessionId)
	e.str(12, m.PartitionKey)
	e.str(16, m.DeadLetterReason)
	e.str(17, m.DeadLetterDescription)
	e.str(18, m.DeadLetterSource)
	e.varint(19, uint64(m.TtlMs))
	for _, p := range m.ModifiedProperties {
		e.bytes(20, p, true)
	}
	e.varint(21, uint64(m.Size))
	e.varint(22, m.BodyIndex)
	e.varint(23, uint64(m.BodyOffset))
	e.varint(24, uint64(m.BodyLength))
	e.varint(25, uint64(m.BodyCrc))
	e.bytes(26, m.BodyBlob, false)
	e.varint(27, m.BodyBlobLength)
	e.varint(28, uint64(m.BodyBlobCrc))
	if m.ActionSet != nil { // only copies changed by a rule's action (fanout.go)
		set, err := marshal.Marshal(m.ActionSet)
		if err != nil {
			panic(fmt.Sprintf("partition: marshal action changes: %v", err)) // a generated message always marshals
		}
		e.bytes(29, set, true)
	}
	for _, name := range m.ActionRemoved {
		e.bytes(30, []byte(name), true)
	}
	e.varint(40, uint64(m.ForwardHops))
	e.varint(41, m.BodyBlobEntity)
	// Fields a newer version wrote, kept as protobuf keeps them: replicas
	// of two versions must still write the same bytes.
	if u := m.ProtoReflect().GetUnknown(); len(u) > 0 {
		if e.out == nil {
			e.n += len(u)
		} else {
			e.out = append(e.out, u...)
		}
	}
}

// getState reads the state record of a message (everything but its
// sections, see store/doc.go); nil if absent.
func getState(r pebble.Reader, key []byte) (*partitionpb.StoredMessage, error) {
	v, closer, err := r.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("partition: read %x: %w", key, err)
	}
	defer closer.Close()
	p, err := store.Unseal(key, v)
	if err != nil {
		return nil, err
	}
	return decodeState(key, p)
}

// decodeState decodes the unsealed payload of the state record under key.
func decodeState(key, p []byte) (*partitionpb.StoredMessage, error) {
	m := new(partitionpb.StoredMessage)
	if err := unmarshalState(p, m); err != nil {
		return nil, fmt.Errorf("%w: message %x: %v", ErrCorrupt, key, err)
	}
	return m, nil
}

// unmarshalState decodes a state record into m as protobuf would (it
// accepts any encoding protobuf accepts for these fields, keeps fields it
// does not know as unknown fields, and copies what it keeps), by hand:
// every lock and settlement decodes one per message on every replica.
// TestStateDecoding and FuzzStateDecoding compare it with protobuf's.
func unmarshalState(p []byte, m *partitionpb.StoredMessage) error {
	var unknown []byte
	for len(p) > 0 {
		num, typ, n := protowire.ConsumeTag(p)
		if n < 0 {
			return protowire.ParseError(n)
		}
		p = p[n:]
		value := p
		var v uint64
		var b []byte
		switch typ {
		case protowire.VarintType:
			v, n = protowire.ConsumeVarint(p)
		case protowire.BytesType:
			b, n = protowire.ConsumeBytes(p)
		default:
			n = protowire.ConsumeFieldValue(num, typ, p)
		}
		if n < 0 {
			return protowire.ParseError(n)
		}
		value = value[:n]
		p = p[n:]
		known := true
		switch {
		case typ == protowire.VarintType:
			switch num {
			case 1:
				m.SequenceNumber = v
			case 2:
				m.EnqueuedTimeMs = int64(v)
			case 3:
				m.DeliveryCount = uint32(v)
			case 4:
				m.State = partitionpb.MessageState(int32(v))
			case 5:
				m.SubQueue = partitionpb.SubQueue(int32(v))
			case 7:
				m.LockedUntilMs = int64(v)
			case 8:
				m.ExpiresAtMs = int64(v)
			case 9:
				m.ScheduledEnqueueTimeMs = int64(v)
			case 19:
				m.TtlMs = int64(v)
			case 21:
				m.Size = int64(v)
			case 22:
				m.BodyIndex = v
			case 23:
				m.BodyOffset = uint32(v)
			case 24:
				m.BodyLength = uint32(v)
			case 25:
				m.BodyCrc = uint32(v)
			case 27:
				m.BodyBlobLength = v
			case 28:
				m.BodyBlobCrc = uint32(v)
			case 40:
				m.ForwardHops = uint32(v)
			case 41:
				m.BodyBlobEntity = v
			default:
				known = false
			}
		case typ == protowire.BytesType:
			switch num {
			case 6:
				m.LockToken = append([]byte{}, b...)
			case 10:
				m.MessageId = string(b)
			case 11:
				m.SessionId = string(b)
			case 12:
				m.PartitionKey = string(b)
			case 16:
				m.DeadLetterReason = string(b)
			case 17:
				m.DeadLetterDescription = string(b)
			case 18:
				m.DeadLetterSource = string(b)
			case 20:
				m.ModifiedProperties = append(m.ModifiedProperties, append([]byte{}, b...))
			case 26:
				m.BodyBlob = append([]byte{}, b...)
			case 29:
				m.ActionSet = new(partitionpb.FilterView)
				if err := proto.Unmarshal(b, m.ActionSet); err != nil {
					return fmt.Errorf("%w: action changes: %v", ErrCorrupt, err)
				}
			case 30:
				m.ActionRemoved = append(m.ActionRemoved, string(b))
			case fieldHeader: // sections belong in a body record, but
				m.Header = append([]byte{}, b...) // protobuf would take them
			case fieldAnnotations:
				m.Annotations = append([]byte{}, b...)
			case fieldBare:
				m.Bare = append([]byte{}, b...)
			default:
				known = false
			}
		default:
			known = false
		}
		if !known { // as protobuf keeps it: the tag re-encoded, the value raw
			unknown = append(protowire.AppendTag(unknown, num, typ), value...)
		}
	}
	if len(unknown) > 0 {
		m.ProtoReflect().SetUnknown(unknown)
	}
	return nil
}

// stateSlot decodes only what settling a locked message needs from its
// state record: its slot and its lock token (pointing into p), as
// unmarshalState would decode them. A completion removes the message and
// needs nothing else; decoding the whole record (message id and all) for
// it was 3% of the dev cluster's CPU when receiving and completing.
func stateSlot(p []byte) (s slot, token []byte, err error) {
	for len(p) > 0 {
		num, typ, n := protowire.ConsumeTag(p)
		if n < 0 {
			return s, nil, protowire.ParseError(n)
		}
		p = p[n:]
		var v uint64
		switch typ {
		case protowire.VarintType:
			v, n = protowire.ConsumeVarint(p)
		case protowire.BytesType:
			var b []byte
			b, n = protowire.ConsumeBytes(p)
			switch num {
			case 6:
				token = b
			case 11:
				s.session = string(b) // only messages with a session id pay for it
			case 26:
				s.blob = append([]byte(nil), b...) // rare: a staged body
			}
		default:
			n = protowire.ConsumeFieldValue(num, typ, p)
		}
		if n < 0 {
			return s, nil, protowire.ParseError(n)
		}
		p = p[n:]
		if typ != protowire.VarintType {
			continue
		}
		switch num {
		case 1:
			s.seq = v
		case 4:
			s.state = partitionpb.MessageState(int32(v))
		case 5:
			s.sub = partitionpb.SubQueue(int32(v))
		case 7:
			s.until = int64(v)
		case 8:
			s.exp = int64(v)
		case 9:
			s.at = int64(v)
		case 21:
			s.size = int64(v)
		case 22:
			s.inLog = v != 0
		case 41:
			s.blobEntity = v
		}
	}
	s.locked = len(token) > 0
	return s, token, nil
}

// mergeBody fills in the sections of m from the unsealed payload of its
// body record under key. The body record holds only the three sections,
// so merging sets them and leaves the state alone.
func mergeBody(key, p []byte, m *partitionpb.StoredMessage) error {
	if err := (proto.UnmarshalOptions{Merge: true}).Unmarshal(p, m); err != nil {
		return fmt.Errorf("%w: body %x: %v", ErrCorrupt, key, err)
	}
	return nil
}

// readBody fills in the sections of a message read by getState from its
// body record.
func readBody(r pebble.Reader, logs *logReader, k ekey, m *partitionpb.StoredMessage) error {
	if m.BodyIndex != 0 {
		return logs.sections(m)
	}
	if err := readBodyRecord(r, k, m); err != nil || len(m.BodyBlob) == 0 {
		return err
	}
	return readBlob(r, k, m)
}

// readBodyRecord merges m's body record into m.
func readBodyRecord(r pebble.Reader, k ekey, m *partitionpb.StoredMessage) error {
	key := store.BodyKey(k, m.SubQueue, m.SequenceNumber)
	v, closer, err := r.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return fmt.Errorf("%w: message %d of %s has no body", ErrCorrupt, m.SequenceNumber, k)
	}
	if err != nil {
		return fmt.Errorf("partition: read %x: %w", key, err)
	}
	defer closer.Close()
	p, err := store.Unseal(key, v)
	if err != nil {
		return err
	}
	return mergeBody(key, p, m)
}

// getMessage reads a whole message, state and body; nil if absent.
func getMessage(r pebble.Reader, logs *logReader, k ekey, sub partitionpb.SubQueue, seq uint64) (*partitionpb.StoredMessage, error) {
	m, err := getState(r, store.MessageKey(k, sub, seq))
	if err != nil || m == nil {
		return nil, err
	}
	if err := readBody(r, logs, k, m); err != nil {
		return nil, err
	}
	return m, nil
}

// pebbleOptions are the store's options: no WAL, because the Raft log is
// the write-ahead log (Apply commits with NoSync and Snapshot flushes), and
// memory bounded by the shared block cache plus at most two memtables.
func pebbleOptions(cache *pebble.Cache, cacheBytes int64, log *slog.Logger, misuse *atomic.Int64) *pebble.Options {
	// Memtables as large as the cache: a queue's messages mostly die in
	// the memtable they were written to when consumers keep up, and every
	// flush costs compaction work per key. With memtables of a quarter of
	// a 32 MiB cache (8 MiB) the dev cluster sent a third fewer messages
	// per second than with 32 MiB ones, and received 40% fewer.
	memtable := uint64(cacheBytes)
	memtable = max(memtable, 4<<20)
	memtable = min(memtable, 64<<20)
	opts := &pebble.Options{
		Cache:                       cache,
		DisableWAL:                  true,
		MemTableSize:                memtable,
		MemTableStopWritesThreshold: 2,
		// Pinned, so that a pebble upgrade does not move the on-disk format
		// by itself.
		FormatMajorVersion: pebble.FormatValueSeparation,
		Logger:             pebbleLogger{log},
	}
	// A write stall holds up Apply, and with it the group's whole Raft
	// pipeline: worth a line in the log.
	opts.EventListener = &pebble.EventListener{
		WriteStallBegin: func(info pebble.WriteStallBeginInfo) {
			log.Warn("partition: store write stall", "reason", info.Reason)
		},
		WriteStallEnd: func() { log.Info("partition: store write stall ended") },
		// A single delete that met no write or two (singleDelete) means the
		// records' bookkeeping broke: a deleted record may come back.
		PossibleAPIMisuse: func(info pebble.PossibleAPIMisuseInfo) {
			misuse.Add(1)
			log.Error("partition: store misuse", "what", info.String())
		},
	}
	// Fewer, larger compactions of the small keys that stay in the tables
	// once bodies are separated: 16 MiB tables instead of 2 MiB ones, and
	// level 0 compacted at 8 sublevels instead of 4. A send-only run of
	// 600,000 messages into one store applied 12-25% faster with 22
	// compactions instead of 110; on the dev cluster sends at 2048 in
	// flight gained 15% (four alternated runs) and receives held. Reads
	// barely notice the deeper level 0: Lock reads in one forward pass.
	opts.L0CompactionThreshold = 8
	opts.L0CompactionFileThreshold = 2000
	for i := range opts.TargetFileSizes {
		opts.TargetFileSizes[i] = 16 << 20
	}
	// Compressing blocks of message bodies costs CPU for little gain:
	// bodies are often compressed or encrypted already.
	// Message bodies go to blob files when a memtable is flushed, and
	// compactions then move only keys and small records. Without it every
	// body was rewritten about 2.4 times by compactions over a growing
	// backlog (a send-only run of 300 MB wrote 1 GB), and compactions took
	// a quarter of the dev cluster's CPU; with it the same run writes
	// 343 MB. A queue drains its oldest messages first, so blob files
	// mostly die whole; the garbage ratio bounds the space the survivors
	// (deferred or dead-lettered messages) keep alive.
	opts.Experimental.ValueSeparationPolicy = func() pebble.ValueSeparationPolicy {
		return pebble.ValueSeparationPolicy{
			Enabled:               true,
			MinimumSize:           512,
			MaxBlobReferenceDepth: 64,
			RewriteMinimumAge:     300e9, // five minutes, as nanoseconds: partition keeps off package time
			TargetGarbageRatio:    0.5,
		}
	}
	for i := range opts.Levels {
		opts.Levels[i].Compression = func() *sstable.CompressionProfile { return sstable.NoCompression }
	}
	return opts
}

// pebbleLogger sends pebble's log lines to slog.
type pebbleLogger struct{ log *slog.Logger }

func (l pebbleLogger) Infof(format string, args ...any) {
	l.log.Debug(fmt.Sprintf(format, args...), "component", "pebble")
}

func (l pebbleLogger) Errorf(format string, args ...any) {
	l.log.Error(fmt.Sprintf(format, args...), "component", "pebble")
}

// Fatalf reports an invariant pebble found broken. pebble expects it not to
// return.
func (l pebbleLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	l.log.Log(context.Background(), slog.LevelError+4, msg, "component", "pebble")
	panic("pebble: " + msg)
}

// iterState decodes the state record under it.
func iterState(it *pebble.Iterator) (*partitionpb.StoredMessage, error) {
	p, err := store.IterValue(it)
	if err != nil {
		return nil, err
	}
	return decodeState(it.Key(), p)
}
