package partition

import (
	"encoding/binary"
	"fmt"

	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// The store's key space. Every integer is big-endian so that byte order is
// numeric order.
//
//	0x00 "applied"                               last applied Raft index
//	0x00 "format"                                store format version
//	0x01 eid(8) part(4)                          entity record (config and counters)
//	0x02 eid(8) part(4) 0x01 sub(1) seq(8)       message state: all but the sections, with their size
//	0x02 eid(8) part(4) 0x02 sub(1) seq(8)       available: active, unlocked (Lock's order)
//	0x02 eid(8) part(4) 0x03 until(8) sub(1) base(8) lock grant: locks ending at until of base..base+1023 (grants.go)
//	0x02 eid(8) part(4) 0x04 at(8) seq(8)        scheduled, by scheduled_enqueue_time_ms
//	0x02 eid(8) part(4) 0x05 at(8) seq(8)        expiry: unlocked, unscheduled main messages with a TTL, by expires_at_ms
//	0x02 eid(8) part(4) 0x06 message_id          dedup: first sent at(8), its sequence number(8)
//	0x02 eid(8) part(4) 0x07 at(8) message_id    dedup by time, for pruning
//	0x02 eid(8) part(4) 0x08 sub(1) seq(8)       message body: header, annotations, bare
//	0x02 eid(8) part(4) 0x09 blob(16) off(8)     a chunk of a staged bare message (blobs.go)
//	0x02 eid(8) part(4) 0x0a blob(16)            staged blob not yet taken over: last chunk at(8), length(8)
//	0x02 eid(8) part(4) 0x0b..0x0f ...           sessions (sessionstore.go)
//	0x02 eid(8) part(4) 0x1a origin(21)          a forwarded message's origin: taken at(8), its sequence number(8) (forward.go)
//	0x02 eid(8) part(4) 0x1b at(8) origin(21)    forwarded origins by time, for pruning
//	0x02 eid(8) part(4) 0x1c seq(8)              a topic's scheduled message: due at(8), its copies: subscription eid(8), seq(8)... (topicsched.go)
//	0x02 eid(8) part(4) 0x1d at(8) seq(8)        the same by due time, for pruning
//	0x02 eid(8) part(4) 0x1e blob(16)            a topic's blob shared by copies: how many name it(8) (sharedblobs.go)
//	0x02 eid(8) part(4) 0x1f topic(8) blob(16)   how many of this subscription's copies name that blob(8)
//	0x03 request_id                              a request's result: applied at(8), then the Result
//	0x04 at(8) request_id                        requests by time, for pruning
//	0x05 eid(8) part(4)                          tombstone of a deleted entity partition: the delete's version(8)
//
// A message is two records: its body, written once when it arrives (and
// moved only with the message, to the dead-letter queue or to a new
// sequence number), and its state, which locks and settlements rewrite.
// Locking a message therefore rewrites a hundred bytes, not the message,
// and no replica reads a body back except to return it.
// Everything of an entity partition lives under its 0x02 prefix, so
// DeleteEntity is one range deletion. A lock token carries the sequence
// number, so the message key is the lock-token index. Times are encoded
// with the sign bit flipped so that negative values sort first.
const (
	prefixMeta    byte = 0x00
	prefixEntity  byte = 0x01
	prefixEntData byte = 0x02
	prefixRequest byte = 0x03
	prefixReqTime byte = 0x04
	prefixDeleted byte = 0x05

	kindMessage   byte = 0x01
	kindAvailable byte = 0x02
	kindLock      byte = 0x03
	kindScheduled byte = 0x04
	kindExpiry    byte = 0x05
	kindDedup     byte = 0x06
	kindDedupTime byte = 0x07
	kindBody      byte = 0x08
	kindBlob      byte = 0x09
	kindStaged    byte = 0x0a

	kindForward     byte = 0x1a
	kindForwardTime byte = 0x1b

	kindTopicSched     byte = 0x1c
	kindTopicSchedTime byte = 0x1d
	kindBlobRefs       byte = 0x1e
	kindBlobUse        byte = 0x1f
)

var (
	keyApplied = []byte("\x00applied")
	keyFormat  = []byte("\x00format")
)

// storeFormat is the layout version above. Open upgrades a store of
// formatLockEntries, which had a lock index entry per locked message
// (grants.go), and refuses any other.
const (
	storeFormat       = 3
	formatLockEntries = 2
)

// ekey names an entity partition.
type ekey struct {
	id   uint64
	part uint32
}

func (k ekey) String() string { return fmt.Sprintf("%d/%d", k.id, k.part) }

func (k ekey) less(o ekey) bool {
	return k.id < o.id || k.id == o.id && k.part < o.part
}

func entityKey(k ekey) []byte {
	b := make([]byte, 0, 13)
	b = append(b, prefixEntity)
	b = binary.BigEndian.AppendUint64(b, k.id)
	return binary.BigEndian.AppendUint32(b, k.part)
}

func tombstoneKey(k ekey) []byte {
	b := append(make([]byte, 0, 13), prefixDeleted)
	b = binary.BigEndian.AppendUint64(b, k.id)
	return binary.BigEndian.AppendUint32(b, k.part)
}

func parseEntityKey(b []byte) (ekey, bool) {
	if len(b) != 13 || b[0] != prefixEntity {
		return ekey{}, false
	}
	return ekey{binary.BigEndian.Uint64(b[1:]), binary.BigEndian.Uint32(b[9:])}, true
}

// dataPrefix is the prefix of everything an entity partition holds.
func dataPrefix(k ekey) []byte { return appendDataPrefix(make([]byte, 0, 40), k) }

func appendDataPrefix(b []byte, k ekey) []byte {
	b = append(b, prefixEntData)
	b = binary.BigEndian.AppendUint64(b, k.id)
	return binary.BigEndian.AppendUint32(b, k.part)
}

// appendSeqKey appends the key of a message's record of the given kind
// (kindMessage, kindBody) to b: the hot paths build keys in one reused
// buffer instead of allocating two per message on every replica.
func appendSeqKey(b []byte, k ekey, kind byte, sub partitionpb.SubQueue, seq uint64) []byte {
	b = append(appendDataPrefix(b, k), kind, byte(sub))
	return binary.BigEndian.AppendUint64(b, seq)
}

func kindPrefix(k ekey, kind byte) []byte { return append(dataPrefix(k), kind) }

func subPrefix(k ekey, kind byte, sub partitionpb.SubQueue) []byte {
	return append(kindPrefix(k, kind), byte(sub))
}

func messageKey(k ekey, sub partitionpb.SubQueue, seq uint64) []byte {
	return binary.BigEndian.AppendUint64(subPrefix(k, kindMessage, sub), seq)
}

func bodyKey(k ekey, sub partitionpb.SubQueue, seq uint64) []byte {
	return binary.BigEndian.AppendUint64(subPrefix(k, kindBody, sub), seq)
}

func availableKey(k ekey, sub partitionpb.SubQueue, seq uint64) []byte {
	return binary.BigEndian.AppendUint64(subPrefix(k, kindAvailable, sub), seq)
}

// lockKey is the key of a lock grant (grants.go); base is the first
// sequence number it covers.
func lockKey(k ekey, until int64, sub partitionpb.SubQueue, base uint64) []byte {
	b := binary.BigEndian.AppendUint64(kindPrefix(k, kindLock), timeBits(until))
	b = append(b, byte(sub))
	return binary.BigEndian.AppendUint64(b, base)
}

func scheduledKey(k ekey, at int64, seq uint64) []byte {
	b := binary.BigEndian.AppendUint64(kindPrefix(k, kindScheduled), timeBits(at))
	return binary.BigEndian.AppendUint64(b, seq)
}

func expiryKey(k ekey, at int64, seq uint64) []byte {
	b := binary.BigEndian.AppendUint64(kindPrefix(k, kindExpiry), timeBits(at))
	return binary.BigEndian.AppendUint64(b, seq)
}

func requestKey(id []byte) []byte { return append([]byte{prefixRequest}, id...) }

func requestTimeKey(at int64, id []byte) []byte {
	b := binary.BigEndian.AppendUint64([]byte{prefixReqTime}, timeBits(at))
	return append(b, id...)
}

func dedupKey(k ekey, id string) []byte { return append(kindPrefix(k, kindDedup), id...) }

func dedupTimeKey(k ekey, at int64, id string) []byte {
	b := binary.BigEndian.AppendUint64(kindPrefix(k, kindDedupTime), timeBits(at))
	return append(b, id...)
}

// parseTimeSeqKey returns the time and sequence number of a scheduled or
// expiry key of the given kind.
func parseTimeSeqKey(b []byte, kind byte) (at int64, seq uint64, ok bool) {
	if len(b) != kindPrefixLen+8+8 || b[kindPrefixLen-1] != kind {
		return 0, 0, false
	}
	return timeFromBits(binary.BigEndian.Uint64(b[kindPrefixLen:])), binary.BigEndian.Uint64(b[kindPrefixLen+8:]), true
}

// The lengths of the prefixes above: 0x02 eid part kind.
const kindPrefixLen = 14

// parseAvailableKey returns the sequence number of an available key.
func parseAvailableKey(b []byte) (uint64, bool) {
	if len(b) != kindPrefixLen+1+8 || b[kindPrefixLen-1] != kindAvailable {
		return 0, false
	}
	return binary.BigEndian.Uint64(b[kindPrefixLen+1:]), true
}

// parseLockKey returns the locked-until time, sub-queue and first sequence
// number of a lock grant's key.
func parseLockKey(b []byte) (until int64, sub partitionpb.SubQueue, base uint64, ok bool) {
	if len(b) != kindPrefixLen+8+1+8 || b[kindPrefixLen-1] != kindLock {
		return 0, 0, 0, false
	}
	until = timeFromBits(binary.BigEndian.Uint64(b[kindPrefixLen:]))
	sub = partitionpb.SubQueue(b[kindPrefixLen+8])
	base = binary.BigEndian.Uint64(b[kindPrefixLen+9:])
	return until, sub, base, true
}

func timeBits(t int64) uint64     { return uint64(t) ^ 1<<63 }
func timeFromBits(u uint64) int64 { return int64(u ^ 1<<63) }

// prefixEnd returns the smallest key greater than every key with prefix p.
func prefixEnd(p []byte) []byte {
	end := append([]byte(nil), p...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] != 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil // p is all 0xff: no upper bound
}
