package partitionpb

import (
	"encoding/binary"
	"hash/fnv"
)

// The identifiers that cross processes, defined once: the partition group
// that assigns them (package partition), the front-ends and gateways that
// route by them, and the clients that hold them all read them here.
//
// A sequence number is the entity partition's index in its top 16 bits
// and a 48-bit counter below (Service Bus puts the partition id there
// too), so a number alone names the partition that holds its message.
//
// A lock token is 16 bytes: the locked message's sequence number, big
// endian, then 8 bytes the leader chose (Lock.token_seed). A token alone
// therefore names its partition, and every replica derives the same one.
//
// A keyed message goes to the partition its key hashes to: FNV-1a (32 bit)
// of the key, modulo the entity's partition count. The choice is part of
// the contract: a key maps to the same partition whichever front-end or
// gateway takes the message.

const (
	// SequencePartitionShift is where the partition index starts in a
	// sequence number.
	SequencePartitionShift = 48
	// SequenceCounterMask masks the counter part of a sequence number.
	SequenceCounterMask = 1<<SequencePartitionShift - 1
	// LockTokenBytes is the length of a lock token.
	LockTokenBytes = 16
)

// SequenceNumber returns the sequence number of counter n in partition p.
func SequenceNumber(p uint32, n uint64) uint64 {
	return uint64(p)<<SequencePartitionShift | n&SequenceCounterMask
}

// PartitionOfSequence returns the partition a sequence number belongs to.
func PartitionOfSequence(seq uint64) uint32 { return uint32(seq >> SequencePartitionShift) }

// LockToken returns the token of a lock on message seq taken with seed.
func LockToken(seq uint64, seed []byte) []byte {
	return append(binary.BigEndian.AppendUint64(make([]byte, 0, LockTokenBytes), seq), seed...)
}

// SequenceOfToken returns the sequence number a lock token starts with; ok
// is false if it is not a token's length.
func SequenceOfToken(token []byte) (seq uint64, ok bool) {
	if len(token) != LockTokenBytes {
		return 0, false
	}
	return binary.BigEndian.Uint64(token), true
}

// PartitionOfToken returns the partition of a lock token (0 for anything
// too short to be one, which the partition then refuses as lock lost).
func PartitionOfToken(token []byte) uint32 {
	if len(token) < 2 {
		return 0
	}
	return uint32(token[0])<<8 | uint32(token[1])
}

// PartitionForKey returns the partition of n that a keyed message goes to.
func PartitionForKey(key string, n uint32) uint32 {
	if n <= 1 {
		return 0
	}
	h := fnv.New32a()
	h.Write([]byte(key))
	return h.Sum32() % n
}
