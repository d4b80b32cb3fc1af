package partition

import (
	"encoding/binary"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/quorumbus/quorumbus/proto/partitionpb"
	"github.com/quorumbus/quorumbus/proto/placementpb"
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
	if e.next != 5 || e.n != (counts{active: 3, dead: 1, locked: 2, size: 999}) || e.fresh != 4 || e.accessed != 0 || e.cfg.GetName() != "q" {
		t.Fatalf("v2 read as next %d counts %+v fresh %d accessed %d cfg %v", e.next, e.n, e.fresh, e.accessed, e.cfg)
	}
	e.accessed = 123456
	e.n.share = 77
	back, err := parseEntityRecord(k, e.record())
	if err != nil {
		t.Fatal(err)
	}
	if back.next != e.next || back.n != e.n || back.fresh != e.fresh || back.accessed != 123456 || !proto.Equal(back.cfg, e.cfg) {
		t.Fatalf("v4 round trip: %+v", back)
	}
	if _, err := parseEntityRecord(k, e.record()[:entityRecordLen+12]); err == nil {
		t.Fatal("a short v4 record parsed")
	}
	if back.uncounted {
		t.Fatal("a v4 record read as written before topics were counted")
	}
}

// TestEntityRecordV3Topic: a topic's entity record written before topics
// were counted reads without shares and marked uncounted, so that
// Machine.load counts its scheduled messages' records; a queue's is not.
func TestEntityRecordV3Topic(t *testing.T) {
	for _, kind := range []placementpb.EntityKind{placementpb.EntityKind_ENTITY_KIND_TOPIC, placementpb.EntityKind_ENTITY_KIND_QUEUE} {
		k := ekey{ID: 7, Part: 0}
		cfg := &partitionpb.EntityConfig{EntityId: 7, Name: "t", Kind: kind}
		v3 := []byte{entityRecordV3}
		for _, v := range []uint64{5, 0, 0, 0, 0, 0, 1, 42} {
			v3 = binary.BigEndian.AppendUint64(v3, v)
		}
		c, err := proto.Marshal(cfg)
		if err != nil {
			t.Fatal(err)
		}
		e, err := parseEntityRecord(k, append(v3, c...))
		if err != nil {
			t.Fatal(err)
		}
		if e.accessed != 42 || e.n.share != 0 || e.uncounted != (kind == placementpb.EntityKind_ENTITY_KIND_TOPIC) {
			t.Fatalf("%v: v3 read as accessed %d share %d uncounted %v", kind, e.accessed, e.n.share, e.uncounted)
		}
	}
}
