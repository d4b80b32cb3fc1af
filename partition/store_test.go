package partition

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// TestBodyEncoding: setBody writes what protobuf writes for a StoredMessage
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
		if err := setBody(b, key, m); err != nil {
			t.Fatal(err)
		}
		payload, found, err := get(b, key) // unsealed: checksum verified
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

// TestStateEncoding: setState writes exactly what protobuf writes for a
// StoredMessage without sections, whatever its fields hold (zero, negative,
// empty elements, unknown fields from a newer version), and it knows every
// field of StoredMessage but the sections.
func TestStateEncoding(t *testing.T) {
	known := map[protowire.Number]bool{fieldHeader: true, fieldAnnotations: true, fieldBare: true}
	for _, n := range stateFields {
		known[n] = true
	}
	fields := (&partitionpb.StoredMessage{}).ProtoReflect().Descriptor().Fields()
	for i := range fields.Len() {
		if n := fields.Get(i).Number(); !known[n] {
			t.Fatalf("StoredMessage field %d (%s) is unknown to setState", n, fields.Get(i).Name())
		}
	}
	if len(known) != fields.Len() {
		t.Fatalf("setState knows %d fields, StoredMessage has %d", len(known), fields.Len())
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
		if err := setState(b, key, m); err != nil {
			t.Fatal(err)
		}
		payload, found, err := get(b, key)
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
	}
}

// TestSortEntries: commitSorted's order is by key, and writes to one key
// keep their batch order, whatever the mix of buckets and orders.
func TestSortEntries(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var s sortedCommit
	for round := range 200 {
		s.entries = s.entries[:0]
		for i := range rng.IntN(300) {
			var key []byte
			switch rng.IntN(4) {
			case 0: // a short key of its own
				key = []byte{byte(rng.IntN(3))}
			default:
				k := ekey{uint64(rng.IntN(2)), uint32(rng.IntN(2))}
				key = appendSeqKey(nil, k, byte(1+rng.IntN(4)), partitionpb.SubQueue(rng.IntN(2)), uint64(rng.IntN(20)))
			}
			s.entries = append(s.entries, batchEntry{key: key, value: binary.BigEndian.AppendUint64(nil, uint64(i))})
		}
		s.sortEntries()
		if len(s.order) != len(s.entries) {
			t.Fatalf("round %d: %d in order, %d entries", round, len(s.order), len(s.entries))
		}
		seen := make([]bool, len(s.entries))
		for k, i := range s.order {
			if seen[i] {
				t.Fatalf("round %d: entry %d twice", round, i)
			}
			seen[i] = true
			if k == 0 {
				continue
			}
			prev, cur := s.entries[s.order[k-1]], s.entries[i]
			switch c := bytes.Compare(prev.key, cur.key); {
			case c > 0:
				t.Fatalf("round %d: %x before %x", round, prev.key, cur.key)
			case c == 0 && bytes.Compare(prev.value, cur.value) > 0:
				t.Fatalf("round %d: writes to %x out of batch order", round, cur.key)
			}
		}
	}
}
