// Package store is the on-disk layer under partition's rules: the key
// space of one partition group's pebble store, the sealing of its
// records and their encodings, and the engine pieces that read and write
// them. It knows records, indexes and their keys; what a message may do
// (Service Bus's rules) is partition's. It imports nothing of partition.
//
// # The key space
//
// Every integer is big-endian so that byte order is numeric order; times
// have their sign bit flipped so that negative ones sort first. Every value
// is sealed with a CRC-32C over key and value (Seal). docs/storage.md
// describes the same table in prose; TestKeySpaceDocumented holds the two
// to the same kinds.
//
//	0x00 "applied"                                      last applied Raft index
//	0x00 "format"                                       store format version
//	0x01 eid(8) part(4)                                 entity record (config and counters)
//	0x02 eid(8) part(4) 0x01 sub(1) seq(8)              message state: all but the sections, with their size
//	0x02 eid(8) part(4) 0x02 sub(1) seq(8)              available: active, unlocked (Lock's order)
//	0x02 eid(8) part(4) 0x03 until(8) sub(1) base(8)    lock grant: locks ending at until of base..base+1023
//	0x02 eid(8) part(4) 0x04 at(8) seq(8)               scheduled, by scheduled_enqueue_time_ms
//	0x02 eid(8) part(4) 0x05 at(8) seq(8)               expiry: unlocked, unscheduled main messages with a TTL, by expires_at_ms
//	0x02 eid(8) part(4) 0x06 message_id                 dedup: first sent at(8), its sequence number(8)
//	0x02 eid(8) part(4) 0x07 at(8) message_id           dedup by time, for pruning
//	0x02 eid(8) part(4) 0x08 sub(1) seq(8)              message body: header, annotations, bare
//	0x02 eid(8) part(4) 0x09 blob(16) off(8)            a chunk of a staged bare message
//	0x02 eid(8) part(4) 0x0a blob(16)                   staged blob not yet taken over: last chunk at(8), length(8)
//	0x02 eid(8) part(4) 0x0b session_id                 session record
//	0x02 eid(8) part(4) 0x0c sub(1) len(2) sid seq(8)   a session's stream: its available messages, in order
//	0x02 eid(8) part(4) 0x0d sub(1) len(2) sid seq(8)   a session's messages locked under its session lock
//	0x02 eid(8) part(4) 0x0e seq(8) session_id          ready sessions: available messages and no lock
//	0x02 eid(8) part(4) 0x0f until(8) session_id        session locks by their end
//	0x02 eid(8) part(4) 0x18 sub(1) len(2) sid seq(8)   a session's parked messages: deferred or scheduled, not locked
//	0x02 eid(8) part(4) 0x1a origin(21)                 a forwarded message's origin: taken at(8), its sequence number(8)
//	0x02 eid(8) part(4) 0x1b at(8) origin(21)           forwarded origins by time, for pruning
//	0x02 eid(8) part(4) 0x1c seq(8)                     a topic's scheduled message: due at(8), its copies: subscription eid(8), seq(8)...
//	0x02 eid(8) part(4) 0x1d at(8) seq(8)               the same by due time, for pruning
//	0x02 eid(8) part(4) 0x1e blob(16)                   a topic's blob shared by copies: how many name it(8)
//	0x02 eid(8) part(4) 0x1f topic(8) blob(16)          how many of this subscription's copies name that blob(8)
//	0x03 request_id                                     a request's result: applied at(8), then the Result
//	0x04 at(8) request_id                               requests by time, for pruning
//	0x05 eid(8) part(4)                                 tombstone of a deleted entity partition: the delete's version(8)
//
// A message is two records: its body, written once when it arrives (and
// moved only with the message, to the dead-letter queue or to a new
// sequence number), and its state, which locks and settlements rewrite.
// Locking a message therefore rewrites a hundred bytes, not the message,
// and no replica reads a body back except to return it. Everything of an
// entity partition lives under its 0x02 prefix, so deleting an entity is
// one range deletion. A lock token carries the sequence number, so the
// message key is the lock-token index.
//
// # Files
//
// keys.go builds and parses the keys above; seal.go seals values;
// record.go encodes a message's two records; engine.go opens the db
// (db.go: it, its cache, its snapshots) and holds Batch, an Apply's
// writes, whose methods are the rules' words: messages.go and cursor.go
// (a message's records, reading a sub-queue in order), indexes.go (index
// entries), grants.go (lock grants), timeindex.go (indexes by time),
// sessions.go, stamps.go (ids by time: dedup, forwarded origins, a
// topic's scheduled messages, request pruning), blobs.go (staged and
// shared blobs), meta.go (entity records, tombstones, request results),
// lockcache.go (locked messages' state records in memory), reqfilter.go
// (the request ids recorded lately). reads.go serves reads outside an
// Apply, commit.go commits a batch in key order, snapshot.go writes and
// loads snapshot streams.
package store
