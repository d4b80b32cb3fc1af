package partition

import (
	"bytes"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
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
