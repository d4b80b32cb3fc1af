package store

import (
	"encoding/binary"
	"fmt"

	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// The key space is described in doc.go (and docs/storage.md, which
// TestKeySpaceDocumented holds to it). Every integer is big-endian so
// that byte order is numeric order; times have their sign bit flipped
// (TimeBits) so that negative ones sort first.
const (
	PrefixMeta    byte = 0x00
	PrefixEntity  byte = 0x01
	PrefixEntData byte = 0x02
	PrefixRequest byte = 0x03
	PrefixReqTime byte = 0x04
	PrefixDeleted byte = 0x05
)

// The kinds of an entity partition's data, the byte after its prefix.
const (
	KindMessage   byte = 0x01
	KindAvailable byte = 0x02
	KindLock      byte = 0x03
	KindScheduled byte = 0x04
	KindExpiry    byte = 0x05
	KindDedup     byte = 0x06
	KindDedupTime byte = 0x07
	KindBody      byte = 0x08
	KindBlob      byte = 0x09
	KindStaged    byte = 0x0a

	KindSession      byte = 0x0b
	KindSessionMsg   byte = 0x0c
	KindSessionHeld  byte = 0x0d
	KindSessionReady byte = 0x0e
	KindSessionLock  byte = 0x0f
	// 0x10-0x17 are left to other kinds of entity data.
	KindSessionParked byte = 0x18

	KindForward     byte = 0x1a
	KindForwardTime byte = 0x1b

	KindTopicSched     byte = 0x1c
	KindTopicSchedTime byte = 0x1d
	KindBlobRefs       byte = 0x1e
	KindBlobUse        byte = 0x1f
)

var (
	KeyApplied = []byte("\x00applied")
	KeyFormat  = []byte("\x00format")
)

// Format is the layout version above. Open upgrades a store of
// FormatLockEntries, which had a lock index entry per locked message
// (grants), and refuses any other.
const (
	Format            = 3
	FormatLockEntries = 2
)

// EntityKey names an entity partition.
type EntityKey struct {
	ID   uint64
	Part uint32
}

func (k EntityKey) String() string { return fmt.Sprintf("%d/%d", k.ID, k.Part) }

// Less orders entity partitions as their keys sort.
func (k EntityKey) Less(o EntityKey) bool {
	return k.ID < o.ID || k.ID == o.ID && k.Part < o.Part
}

// EntityRecordKey is the key of an entity partition's record.
func EntityRecordKey(k EntityKey) []byte {
	b := make([]byte, 0, 13)
	b = append(b, PrefixEntity)
	b = binary.BigEndian.AppendUint64(b, k.ID)
	return binary.BigEndian.AppendUint32(b, k.Part)
}

func TombstoneKey(k EntityKey) []byte {
	b := append(make([]byte, 0, 13), PrefixDeleted)
	b = binary.BigEndian.AppendUint64(b, k.ID)
	return binary.BigEndian.AppendUint32(b, k.Part)
}

func ParseEntityRecordKey(b []byte) (EntityKey, bool) {
	if len(b) != 13 || b[0] != PrefixEntity {
		return EntityKey{}, false
	}
	return EntityKey{binary.BigEndian.Uint64(b[1:]), binary.BigEndian.Uint32(b[9:])}, true
}

// DataPrefix is the prefix of everything an entity partition holds.
func DataPrefix(k EntityKey) []byte { return AppendDataPrefix(make([]byte, 0, 40), k) }

func AppendDataPrefix(b []byte, k EntityKey) []byte {
	b = append(b, PrefixEntData)
	b = binary.BigEndian.AppendUint64(b, k.ID)
	return binary.BigEndian.AppendUint32(b, k.Part)
}

// AppendSeqKey appends the key of a message's record of the given kind
// (KindMessage, KindBody) to b: the hot paths build keys in one reused
// buffer instead of allocating two per message on every replica.
func AppendSeqKey(b []byte, k EntityKey, kind byte, sub partitionpb.SubQueue, seq uint64) []byte {
	b = append(AppendDataPrefix(b, k), kind, byte(sub))
	return binary.BigEndian.AppendUint64(b, seq)
}

func KindPrefix(k EntityKey, kind byte) []byte { return append(DataPrefix(k), kind) }

func SubPrefix(k EntityKey, kind byte, sub partitionpb.SubQueue) []byte {
	return append(KindPrefix(k, kind), byte(sub))
}

func MessageKey(k EntityKey, sub partitionpb.SubQueue, seq uint64) []byte {
	return binary.BigEndian.AppendUint64(SubPrefix(k, KindMessage, sub), seq)
}

func BodyKey(k EntityKey, sub partitionpb.SubQueue, seq uint64) []byte {
	return binary.BigEndian.AppendUint64(SubPrefix(k, KindBody, sub), seq)
}

func AvailableKey(k EntityKey, sub partitionpb.SubQueue, seq uint64) []byte {
	return binary.BigEndian.AppendUint64(SubPrefix(k, KindAvailable, sub), seq)
}

// LockKey is the key of a lock grant; base is the first sequence number
// it covers.
func LockKey(k EntityKey, until int64, sub partitionpb.SubQueue, base uint64) []byte {
	b := binary.BigEndian.AppendUint64(KindPrefix(k, KindLock), TimeBits(until))
	b = append(b, byte(sub))
	return binary.BigEndian.AppendUint64(b, base)
}

func ScheduledKey(k EntityKey, at int64, seq uint64) []byte {
	b := binary.BigEndian.AppendUint64(KindPrefix(k, KindScheduled), TimeBits(at))
	return binary.BigEndian.AppendUint64(b, seq)
}

func ExpiryKey(k EntityKey, at int64, seq uint64) []byte {
	b := binary.BigEndian.AppendUint64(KindPrefix(k, KindExpiry), TimeBits(at))
	return binary.BigEndian.AppendUint64(b, seq)
}

func RequestKey(id []byte) []byte { return append([]byte{PrefixRequest}, id...) }

func RequestTimeKey(at int64, id []byte) []byte {
	b := binary.BigEndian.AppendUint64([]byte{PrefixReqTime}, TimeBits(at))
	return append(b, id...)
}

func DedupKey(k EntityKey, id string) []byte { return append(KindPrefix(k, KindDedup), id...) }

func DedupTimeKey(k EntityKey, at int64, id string) []byte {
	b := binary.BigEndian.AppendUint64(KindPrefix(k, KindDedupTime), TimeBits(at))
	return append(b, id...)
}

// SessionKey is the key of a session's record.
func SessionKey(k EntityKey, sid string) []byte { return append(KindPrefix(k, KindSession), sid...) }

// SessionStreamPrefix is the prefix of a session's entries of kind
// KindSessionMsg, KindSessionHeld or KindSessionParked.
func SessionStreamPrefix(k EntityKey, kind byte, sub partitionpb.SubQueue, sid string) []byte {
	b := append(KindPrefix(k, kind), byte(sub))
	b = binary.BigEndian.AppendUint16(b, uint16(len(sid)))
	return append(b, sid...)
}

func SessionStreamKey(k EntityKey, kind byte, sub partitionpb.SubQueue, sid string, seq uint64) []byte {
	return binary.BigEndian.AppendUint64(SessionStreamPrefix(k, kind, sub, sid), seq)
}

func SessionReadyKey(k EntityKey, seq uint64, sid string) []byte {
	return append(binary.BigEndian.AppendUint64(KindPrefix(k, KindSessionReady), seq), sid...)
}

func SessionLockKey(k EntityKey, until int64, sid string) []byte {
	return append(binary.BigEndian.AppendUint64(KindPrefix(k, KindSessionLock), TimeBits(until)), sid...)
}

// BlobPrefix is the prefix of the chunks of a staged blob.
func BlobPrefix(k EntityKey, blob []byte) []byte {
	return append(KindPrefix(k, KindBlob), blob...)
}

func BlobChunkKey(k EntityKey, blob []byte, offset uint64) []byte {
	return binary.BigEndian.AppendUint64(BlobPrefix(k, blob), offset)
}

func StagedKey(k EntityKey, blob []byte) []byte {
	return append(KindPrefix(k, KindStaged), blob...)
}

// BlobRefsKey is the key of the count of copies naming a blob staged
// under topic partition owner.
func BlobRefsKey(owner EntityKey, blob []byte) []byte {
	return append(KindPrefix(owner, KindBlobRefs), blob...)
}

// BlobUseKey is the key of the count of subscription partition k's
// copies that name topic owner's blob.
func BlobUseKey(k EntityKey, owner uint64, blob []byte) []byte {
	b := binary.BigEndian.AppendUint64(KindPrefix(k, KindBlobUse), owner)
	return append(b, blob...)
}

// ForwardKey is the key of a forwarded message's origin record.
func ForwardKey(k EntityKey, id []byte) []byte { return append(KindPrefix(k, KindForward), id...) }

func ForwardTimeKey(k EntityKey, at int64, id []byte) []byte {
	b := binary.BigEndian.AppendUint64(KindPrefix(k, KindForwardTime), TimeBits(at))
	return append(b, id...)
}

// TopicSchedKey is the key of a topic's scheduled message's record.
func TopicSchedKey(k EntityKey, seq uint64) []byte {
	return binary.BigEndian.AppendUint64(KindPrefix(k, KindTopicSched), seq)
}

func TopicSchedTimeKey(k EntityKey, at int64, seq uint64) []byte {
	b := binary.BigEndian.AppendUint64(KindPrefix(k, KindTopicSchedTime), TimeBits(at))
	return binary.BigEndian.AppendUint64(b, seq)
}

// ParseTimeSeqKey returns the time and sequence number of a scheduled or
// expiry key of the given kind.
func ParseTimeSeqKey(b []byte, kind byte) (at int64, seq uint64, ok bool) {
	if len(b) != KindPrefixLen+8+8 || b[KindPrefixLen-1] != kind {
		return 0, 0, false
	}
	return TimeFromBits(binary.BigEndian.Uint64(b[KindPrefixLen:])), binary.BigEndian.Uint64(b[KindPrefixLen+8:]), true
}

// KindPrefixLen is the length of the prefixes above: 0x02 eid part kind.
const KindPrefixLen = 14

// ParseAvailableKey returns the sequence number of an available key.
func ParseAvailableKey(b []byte) (uint64, bool) {
	if len(b) != KindPrefixLen+1+8 || b[KindPrefixLen-1] != KindAvailable {
		return 0, false
	}
	return binary.BigEndian.Uint64(b[KindPrefixLen+1:]), true
}

// ParseLockKey returns the locked-until time, sub-queue and first
// sequence number of a lock grant's key.
func ParseLockKey(b []byte) (until int64, sub partitionpb.SubQueue, base uint64, ok bool) {
	if len(b) != KindPrefixLen+8+1+8 || b[KindPrefixLen-1] != KindLock {
		return 0, 0, 0, false
	}
	until = TimeFromBits(binary.BigEndian.Uint64(b[KindPrefixLen:]))
	sub = partitionpb.SubQueue(b[KindPrefixLen+8])
	base = binary.BigEndian.Uint64(b[KindPrefixLen+9:])
	return until, sub, base, true
}

func TimeBits(t int64) uint64     { return uint64(t) ^ 1<<63 }
func TimeFromBits(u uint64) int64 { return int64(u ^ 1<<63) }

// PrefixEnd returns the smallest key greater than every key with prefix p.
func PrefixEnd(p []byte) []byte {
	end := append([]byte(nil), p...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] != 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil // p is all 0xff: no upper bound
}
