package partition

import (
	"encoding/binary"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// TestEntityRecordV2: a store written before the access time was kept
// opens, its entities never accessed; a record written now reads back
// whole.
func TestEntityRecordV2(t *testing.T) {
	k := ekey{ID: 7, Part: 1}
	cfg := &partitionpb.EntityConfig{EntityId: 7, Partition: 1, Name: "q", LockDurationMs: 1000}
	v2 := []byte{entityRecordV2}
	for _, v := range []uint64{5, 3, 1, 0, 2, 999, 4} {
		v2 = binary.BigEndian.AppendUint64(v2, v)
	}
	c, err := proto.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e, err := parseEntityRecord(k, append(v2, c...))
	if err != nil {
		t.Fatal(err)
	}
	if e.next != 5 || e.n != (counts{3, 1, 0, 2, 999}) || e.fresh != 4 || e.accessed != 0 || e.cfg.GetName() != "q" {
		t.Fatalf("v2 read as next %d counts %+v fresh %d accessed %d cfg %v", e.next, e.n, e.fresh, e.accessed, e.cfg)
	}
	e.accessed = 123456
	back, err := parseEntityRecord(k, e.record())
	if err != nil {
		t.Fatal(err)
	}
	if back.next != e.next || back.n != e.n || back.fresh != e.fresh || back.accessed != 123456 || !proto.Equal(back.cfg, e.cfg) {
		t.Fatalf("v3 round trip: %+v", back)
	}
	if _, err := parseEntityRecord(k, e.record()[:entityRecordLen+4]); err == nil {
		t.Fatal("a short v3 record parsed")
	}
}
