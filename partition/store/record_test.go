package store

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// TestBodyEncoding: SetBody writes what protobuf writes for a StoredMessage
// holding only the sections, for every mix of present and empty sections,
// sealed for its key.
func TestBodyEncoding(t *testing.T) {
	db, err := pebble.Open("", &pebble.Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	long := bytes.Repeat([]byte{0xA5}, 300) // a two-byte length
	for mask := range 8 {
		m := &partitionpb.StoredMessage{SequenceNumber: 7, LockToken: []byte("not in a body")}
		if mask&1 != 0 {
			m.Header = []byte{0x00, 0x53, 0x70}
		}
		if mask&2 != 0 {
			m.Annotations = []byte("annotations")
		}
		if mask&4 != 0 {
			m.Bare = long
		}
		key := []byte{byte(mask)}
		b := db.NewIndexedBatch()
		if err := SetBody(b, key, m); err != nil {
			t.Fatal(err)
		}
		payload, found, err := Get(b, key) // unsealed: checksum verified
		if err != nil || !found {
			t.Fatalf("mask %d: %v, found %v", mask, err, found)
		}
		want, err := marshal.Marshal(&partitionpb.StoredMessage{Header: m.Header, Annotations: m.Annotations, Bare: m.Bare})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(payload, want) {
			t.Fatalf("mask %d: body record %x, protobuf %x", mask, payload, want)
		}
		var back partitionpb.StoredMessage
		if err := proto.Unmarshal(payload, &back); err != nil || !bytes.Equal(back.Bare, m.Bare) {
			t.Fatalf("mask %d: decodes to %v, %v", mask, &back, err)
		}
		b.Close()
	}
}

// TestStateEncoding: SetState writes exactly what protobuf writes for a
// StoredMessage without sections, whatever its fields hold (zero, negative,
// empty elements, unknown fields from a newer version), and it knows every
// field of StoredMessage but the sections.
func TestStateEncoding(t *testing.T) {
	known := map[protowire.Number]bool{fieldHeader: true, fieldAnnotations: true, fieldBare: true}
	for _, n := range StateFields {
		known[n] = true
	}
	fields := (&partitionpb.StoredMessage{}).ProtoReflect().Descriptor().Fields()
	for i := range fields.Len() {
		if n := fields.Get(i).Number(); !known[n] {
			t.Fatalf("StoredMessage field %d (%s) is unknown to SetState", n, fields.Get(i).Name())
		}
	}
	if len(known) != fields.Len() {
		t.Fatalf("SetState knows %d fields, StoredMessage has %d", len(known), fields.Len())
	}

	db, err := pebble.Open("", &pebble.Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	i64 := func() int64 {
		switch rng.IntN(4) {
		case 0:
			return 0
		case 1:
			return -rng.Int64N(1 << 40)
		default:
			return rng.Int64N(1 << 50)
		}
	}
	str := func() string {
		if rng.IntN(3) == 0 {
			return ""
		}
		return string(bytes.Repeat([]byte{'a' + byte(rng.IntN(26))}, rng.IntN(200)))
	}
	for i := range 2000 {
		m := &partitionpb.StoredMessage{
			SequenceNumber:         uint64(i64()),
			EnqueuedTimeMs:         i64(),
			DeliveryCount:          uint32(rng.IntN(3)),
			State:                  partitionpb.MessageState(rng.IntN(5) - 1),
			SubQueue:               partitionpb.SubQueue(rng.IntN(3) - 1),
			LockedUntilMs:          i64(),
			ExpiresAtMs:            i64(),
			ScheduledEnqueueTimeMs: i64(),
			MessageId:              str(),
			SessionId:              str(),
			PartitionKey:           str(),
			DeadLetterReason:       str(),
			DeadLetterDescription:  str(),
			DeadLetterSource:       str(),
			TtlMs:                  i64(),
			Size:                   i64(),
			TopicShare:             i64(),
		}
		if rng.IntN(2) == 0 {
			m.LockToken = []byte(str())
		}
		for range rng.IntN(3) {
			m.ModifiedProperties = append(m.ModifiedProperties, []byte(str()))
		}
		if rng.IntN(4) == 0 { // a field of a newer version
			m.ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.VarintType), uint64(i)))
		}
		key := binary.BigEndian.AppendUint64(nil, uint64(i))
		b := db.NewIndexedBatch()
		if err := SetState(b, key, m); err != nil {
			t.Fatal(err)
		}
		payload, found, err := Get(b, key)
		if err != nil || !found {
			t.Fatalf("message %d: %v, found %v", i, err, found)
		}
		want, err := marshal.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(payload, want) {
			t.Fatalf("message %d: state record\n%x\nprotobuf\n%x\n%v", i, payload, want, m)
		}
		b.Close()
		checkAppendLocked(t, m)
	}
}

// checkAppendLocked: lockRecord's record of m locked, made from m's record
// without a lock, is protobuf's encoding of m locked, byte for byte.
func checkAppendLocked(t *testing.T, m *partitionpb.StoredMessage) {
	t.Helper()
	m = proto.Clone(m).(*partitionpb.StoredMessage)
	m.LockToken, m.LockedUntilMs = nil, 0
	unlocked, err := marshal.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	m.LockToken, m.LockedUntilMs = bytes.Repeat([]byte{7}, 16), 1_700_000_060_000+int64(len(unlocked))
	want, err := marshal.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	got, ok := AppendLocked([]byte("prefix"), unlocked, m.LockToken, m.LockedUntilMs)
	if !ok || !bytes.Equal(got, append([]byte("prefix"), want...)) {
		t.Fatalf("AppendLocked of\n%x\n= %x (%v), protobuf\n%x", unlocked, got, ok, want)
	}
	if _, ok := AppendLocked(nil, want, m.LockToken, m.LockedUntilMs); ok {
		t.Fatalf("AppendLocked took a record with a lock: %x", want)
	}
}

// stateSeeds are encodings a state decoder meets: records as SetState
// writes them, and what protobuf also accepts (fields out of order or
// repeated, a known number with another wire type, unknown fields).
func stateSeeds() [][]byte {
	full, _ := marshal.Marshal(&partitionpb.StoredMessage{
		SequenceNumber: 7, EnqueuedTimeMs: -5, DeliveryCount: 2, State: 3, SubQueue: 1, LockToken: []byte("0123456789abcdef"),
		LockedUntilMs: 9, ExpiresAtMs: 10, ScheduledEnqueueTimeMs: 11, MessageId: "id", SessionId: "s", PartitionKey: "k",
		DeadLetterReason: "r", DeadLetterDescription: "d", DeadLetterSource: "src", TtlMs: 12,
		ModifiedProperties: [][]byte{{1}, {}, {2, 3}}, Size: 1024, BodyBlob: []byte("b"), BodyBlobEntity: 10, TopicShare: 13,
	})
	var odd []byte
	odd = protowire.AppendVarint(protowire.AppendTag(odd, 21, protowire.VarintType), 5)
	odd = protowire.AppendVarint(protowire.AppendTag(odd, 1, protowire.VarintType), 3)
	odd = protowire.AppendVarint(protowire.AppendTag(odd, 1, protowire.VarintType), 4)         // last wins
	odd = protowire.AppendBytes(protowire.AppendTag(odd, 2, protowire.BytesType), []byte("x")) // wrong type: unknown
	odd = protowire.AppendFixed32(protowire.AppendTag(odd, 99, protowire.Fixed32Type), 1)
	odd = protowire.AppendVarint(protowire.AppendTag(odd, 4, protowire.VarintType), 1<<40) // enum truncates
	odd = protowire.AppendBytes(protowire.AppendTag(odd, 15, protowire.BytesType), []byte("a section"))
	odd = protowire.AppendBytes(protowire.AppendTag(odd, 20, protowire.BytesType), nil)
	return [][]byte{nil, full, odd, full[:len(full)-1]}
}

// checkStateDecoding compares UnmarshalState with protobuf's decoder on p:
// the same message, unknown fields included, whenever protobuf accepts it.
func checkStateDecoding(t *testing.T, p []byte) {
	want := new(partitionpb.StoredMessage)
	wantErr := proto.Unmarshal(p, want)
	got := new(partitionpb.StoredMessage)
	err := UnmarshalState(p, got)
	if wantErr != nil {
		return // protobuf refuses it (bad UTF-8 too, which SetState never writes)
	}
	if err != nil {
		t.Fatalf("%x: %v; protobuf decodes %v", p, err, want)
	}
	if !proto.Equal(got, want) || !bytes.Equal(got.ProtoReflect().GetUnknown(), want.ProtoReflect().GetUnknown()) {
		t.Fatalf("%x: decoded\n%v\nprotobuf\n%v", p, got, want)
	}
	s, token, err := StateSlot(p)
	if err != nil || !sameSlot(s, SlotOf(got)) || !bytes.Equal(token, got.LockToken) {
		t.Fatalf("%x: StateSlot %+v token %x (%v), the message's %+v token %x", p, s, token, err, SlotOf(got), got.LockToken)
	}
}

func sameSlot(a, b Slot) bool {
	return bytes.Equal(a.Blob, b.Blob) && reflect.DeepEqual(withoutBlob(a), withoutBlob(b))
}

func withoutBlob(s Slot) Slot {
	s.Blob = nil
	return s
}

// TestStateDecoding: UnmarshalState decodes what protobuf decodes, for the
// seeds and for every record TestStateEncoding's generator makes.
func TestStateDecoding(t *testing.T) {
	for _, p := range stateSeeds() {
		checkStateDecoding(t, p)
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for i := range 2000 {
		m := &partitionpb.StoredMessage{
			SequenceNumber: rng.Uint64() >> rng.IntN(64), EnqueuedTimeMs: rng.Int64() - 1<<62, // negative too
			DeliveryCount: rng.Uint32() >> rng.IntN(32), State: partitionpb.MessageState(rng.IntN(6) - 1),
			LockedUntilMs: -rng.Int64N(9), MessageId: fmt.Sprint(i), Size: int64(i),
		}
		if i%3 == 0 {
			m.LockToken = binary.BigEndian.AppendUint64(nil, rng.Uint64())
			m.ModifiedProperties = [][]byte{nil, {byte(i)}}
		}
		p, err := marshal.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		checkStateDecoding(t, p)
	}
}

func FuzzStateDecoding(f *testing.F) {
	for _, p := range stateSeeds() {
		f.Add(p)
	}
	f.Fuzz(checkStateDecoding)
}

// BenchmarkDecodeState decodes a locked message's state record by hand and
// with protobuf's decoder.
func BenchmarkDecodeState(b *testing.B) {
	p, err := marshal.Marshal(&partitionpb.StoredMessage{
		SequenceNumber: 123456, EnqueuedTimeMs: 1_700_000_000_000, DeliveryCount: 1, State: 1,
		LockToken: make([]byte, 16), LockedUntilMs: 1_700_000_060_000, MessageId: "0f8fad5b-d9cb-469f-a165-70867728950e", Size: 1100,
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("hand", func(b *testing.B) {
		for b.Loop() {
			if err := UnmarshalState(p, new(partitionpb.StoredMessage)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("protobuf", func(b *testing.B) {
		for b.Loop() {
			if err := proto.Unmarshal(p, new(partitionpb.StoredMessage)); err != nil {
				b.Fatal(err)
			}
		}
	})
}
