package store

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// marshal encodes the few nested messages of records deterministically.
var marshal = proto.MarshalOptions{Deterministic: true}

// Slot is where a message sits: what decides its key, its index entries
// and the counters it adds to. Taken before a change, it says what to
// remove.
type Slot struct {
	Sub    partitionpb.SubQueue
	Seq    uint64
	State  partitionpb.MessageState
	Locked bool
	Until  int64
	At     int64 // scheduled enqueue time
	Exp    int64 // expires at, 0: never
	Size   int64
	InLog  bool   // the body is in the Raft log, not in a body record
	Blob   []byte // the id of the blob holding the bare message, if any (blobs.go)
	// blobEntity is the topic whose shared blob it is, 0 for the
	// message's own (sharedblobs.go).
	BlobEntity uint64
	// Share is a topic copy's part of its topic's size
	// (StoredMessage.topic_share).
	Share int64
	// session is the message's session id; on an entity that requires
	// sessions it places a main-queue message in its session's stream
	// (sessiongo).
	Session string
}

func SlotOf(m *partitionpb.StoredMessage) Slot {
	return Slot{
		Sub:    m.SubQueue,
		Seq:    m.SequenceNumber,
		State:  m.State,
		Locked: len(m.LockToken) > 0,
		Until:  m.LockedUntilMs,
		At:     m.ScheduledEnqueueTimeMs,
		Exp:    m.ExpiresAtMs,
		Size:   m.Size,
		InLog:  m.BodyIndex != 0,
		Blob:   m.BodyBlob,

		BlobEntity: m.BodyBlobEntity,

		Session: m.SessionId,
		Share:   m.TopicShare,
	}
}

// Available reports whether a message in this slot can be locked (expiry
// aside).
func (s Slot) Available() bool {
	return s.State == partitionpb.MessageState_MESSAGE_STATE_ACTIVE && !s.Locked
}

// Expired reports whether a message in this slot has outlived its time to
// live at now.
func (s Slot) Expired(now int64) bool { return s.Exp != 0 && s.Exp <= now }

// Expiring reports whether a message in this slot is in the expiry index:
// ExpireMessages may end it. Dead-lettered messages do not expire;
// scheduled ones only once active; locked ones once their lock ends.
func (s Slot) Expiring() bool {
	return s.Sub == partitionpb.SubQueue_SUB_QUEUE_MAIN && s.Exp != 0 && !s.Locked &&
		s.State != partitionpb.MessageState_MESSAGE_STATE_SCHEDULED
}

// Field numbers of StoredMessage's sections (partition.proto), which a
// body record holds alone. TestBodyEncoding holds them to the proto.
const (
	fieldLockToken   protowire.Number = 6
	fieldLockedUntil protowire.Number = 7
	fieldHeader      protowire.Number = 13
	fieldAnnotations protowire.Number = 14
	fieldBare        protowire.Number = 15
)

// SetBody writes key → the sealed body record of m: its three sections,
// encoded as protobuf encodes a StoredMessage holding only them.
func SetBody(b *pebble.Batch, key []byte, m *partitionpb.StoredMessage) error {
	_, err := SetRecord(b, key, m, true)
	return err
}

// SetState writes key → the sealed state record of m: m without its
// sections, encoded as protobuf encodes it. TestStateEncoding holds the
// encoding to protobuf's, field for field.
func SetState(b *pebble.Batch, key []byte, m *partitionpb.StoredMessage) error {
	_, err := SetRecord(b, key, m, false)
	return err
}

// SetRecord writes key → m's sealed body record (body) or state record,
// straight into the batch's buffer: the record is encoded once to size it
// and once to write it. Records are encoded by hand because every send,
// lock and settlement writes one or two on every replica, and the generic
// marshaller's sizing and reflective field walk cost as much as copying a
// body. (A flag rather than an encoding function: the encoder passed to a
// function value would escape, an allocation per record.) It returns the
// unsealed record, which is the batch's until the batch is reset.
func SetRecord(b *pebble.Batch, key []byte, m *partitionpb.StoredMessage, body bool) ([]byte, error) {
	var e recordEncoder
	e.message(m, body)
	n := e.n
	op := b.SetDeferred(len(key), n+CRCLen)
	copy(op.Key, key)
	e.out = op.Value[:0]
	e.message(m, body)
	if len(e.out) != n {
		return nil, fmt.Errorf("partition: record %x: %d bytes, sized %d", key, len(e.out), n)
	}
	binary.BigEndian.PutUint32(op.Value[n:], Checksum(key, op.Value[:n]))
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

// StateFields are the field numbers state writes; TestStateEncoding checks
// that with the sections they are all of StoredMessage's.
var StateFields = []protowire.Number{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 40, 41, 42}

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
	e.varint(42, uint64(m.TopicShare))
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

// GetState reads the state record of a message (everything but its
// sections, see store/doc.go); nil if absent.
func GetState(r pebble.Reader, key []byte) (*partitionpb.StoredMessage, error) {
	v, closer, err := r.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("partition: read %x: %w", key, err)
	}
	defer closer.Close()
	p, err := Unseal(key, v)
	if err != nil {
		return nil, err
	}
	return DecodeState(key, p)
}

// DecodeState decodes the unsealed payload of the state record under key.
func DecodeState(key, p []byte) (*partitionpb.StoredMessage, error) {
	m := new(partitionpb.StoredMessage)
	if err := UnmarshalState(p, m); err != nil {
		return nil, fmt.Errorf("%w: message %x: %v", ErrCorrupt, key, err)
	}
	return m, nil
}

// UnmarshalState decodes a state record into m as protobuf would (it
// accepts any encoding protobuf accepts for these fields, keeps fields it
// does not know as unknown fields, and copies what it keeps), by hand:
// every lock and settlement decodes one per message on every replica.
// TestStateDecoding and FuzzStateDecoding compare it with protobuf's.
func UnmarshalState(p []byte, m *partitionpb.StoredMessage) error {
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
			case 42:
				m.TopicShare = int64(v)
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

// StateSlot decodes only what settling a locked message needs from its
// state record: its slot and its lock token (pointing into p), as
// UnmarshalState would decode them. A completion removes the message and
// needs nothing else, and decoding the whole record (message id and all)
// for it would be work every replica does for each message settled.
func StateSlot(p []byte) (s Slot, token []byte, err error) {
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
				s.Session = string(b) // only messages with a session id pay for it
			case 26:
				s.Blob = append([]byte(nil), b...) // rare: a staged body
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
			s.Seq = v
		case 4:
			s.State = partitionpb.MessageState(int32(v))
		case 5:
			s.Sub = partitionpb.SubQueue(int32(v))
		case 7:
			s.Until = int64(v)
		case 8:
			s.Exp = int64(v)
		case 9:
			s.At = int64(v)
		case 21:
			s.Size = int64(v)
		case 22:
			s.InLog = v != 0
		case 41:
			s.BlobEntity = v
		case 42:
			s.Share = int64(v)
		}
	}
	s.Locked = len(token) > 0
	return s, token, nil
}

// MergeBody fills in the sections of m from the unsealed payload of its
// body record under key. The body record holds only the three sections,
// so merging sets them and leaves the state alone.
func MergeBody(key, p []byte, m *partitionpb.StoredMessage) error {
	if err := (proto.UnmarshalOptions{Merge: true}).Unmarshal(p, m); err != nil {
		return fmt.Errorf("%w: body %x: %v", ErrCorrupt, key, err)
	}
	return nil
}

// AppendLocked appends to dst the state record p, as the encoder writes it
// for a message without a lock, with the lock token and locked-until
// (non-zero) put where the encoder puts them: fields in number order, and
// those it does not know last. ok is false if p is not such a record.
func AppendLocked(dst, p, token []byte, until int64) (_ []byte, ok bool) {
	at := 0
	for at < len(p) {
		num, typ, n := protowire.ConsumeTag(p[at:])
		if n < 0 || num == fieldLockToken || num == fieldLockedUntil {
			return nil, false
		}
		if num > fieldLockedUntil {
			break
		}
		m := protowire.ConsumeFieldValue(num, typ, p[at+n:])
		if m < 0 {
			return nil, false
		}
		at += n + m
	}
	dst = append(dst, p[:at]...)
	dst = protowire.AppendBytes(protowire.AppendTag(dst, fieldLockToken, protowire.BytesType), token)
	dst = protowire.AppendVarint(protowire.AppendTag(dst, fieldLockedUntil, protowire.VarintType), uint64(until))
	return append(dst, p[at:]...), true
}

// ReadBodyRecord merges m's body record into m.
func ReadBodyRecord(r pebble.Reader, k EntityKey, m *partitionpb.StoredMessage) error {
	key := BodyKey(k, m.SubQueue, m.SequenceNumber)
	v, closer, err := r.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return fmt.Errorf("%w: message %d of %s has no body", ErrCorrupt, m.SequenceNumber, k)
	}
	if err != nil {
		return fmt.Errorf("partition: read %x: %w", key, err)
	}
	defer closer.Close()
	p, err := Unseal(key, v)
	if err != nil {
		return err
	}
	return MergeBody(key, p, m)
}

// IterState decodes the state record under it.
func IterState(it *pebble.Iterator) (*partitionpb.StoredMessage, error) {
	p, err := IterValue(it)
	if err != nil {
		return nil, err
	}
	return DecodeState(it.Key(), p)
}
