// Package partition is the replicated state machine of one partition group:
// the messages of many entity partitions, their sequence numbers, locks,
// delivery counts and sub-queues, kept on disk in pebble together with the
// last applied Raft index. node wraps a Machine in a Raft FSM.
//
// # Purity
//
// Apply reads no clock, no randomness and no network. Time arrives in each
// Batch (now_ms, stamped by the leader); lock tokens derive from a seed the
// leader chose and the sequence number. Replicas fed the same entries hold
// the same state: their snapshot streams are byte-equal.
//
// # Results and failures
//
// A command that breaks a rule is answered with a Result whose code names
// the rule (entity not found, lock lost, quota exceeded, entity disabled,
// invalid) and nothing of it is applied; Code and Err map between those
// codes and this package's sentinel errors. An error from Apply is a
// failure instead: a record that fails its checksum, a write the store
// refused, or an entry this version cannot apply (unknown format byte or
// command). Nothing of that Apply call is applied and the machine refuses
// further work; the caller stops the group (fail-stop) and may reopen it.
//
// # Durability
//
// pebble runs without its write-ahead log, because the Raft log is the
// write-ahead log. Apply writes one pebble batch per call, holding the
// applied index, and commits it without sync. Snapshot flushes the store
// before it captures it, so what a Raft snapshot covers is on disk before
// Raft truncates its log; Close flushes too. After a crash the store holds
// a prefix of the applied calls together with the matching applied index,
// never less than the last snapshot: Raft replays the tail and Apply skips
// the entries at or below AppliedIndex.
//
// Restore loads a snapshot into a new store beside the current one and
// swaps it in when complete; Open finishes a swap a crash interrupted. If
// a crash interrupts the load itself, the old store stays, and it may be
// behind the snapshot Raft recorded: the caller must then restore that
// snapshot again (compare AppliedIndex with the snapshot's index at start).
//
// # Memory
//
// Only entity configs and counters live in memory; messages and their
// indexes are on disk, read through a block cache of Options.CacheBytes.
// Every command does bounded work (MaxLockCount, MaxLockBytes,
// MaxSequenceNumbers, and bounds on the messages and locks one time-driven
// command handles), so a store batch
// stays small whatever the backlog.
//
// # What Stats counts
//
// active_messages: the main sub-queue's active and deferred messages,
// locked or not; dead_letter_messages: the dead-letter sub-queue;
// scheduled_messages: scheduled ones; locked_messages: locks in either
// sub-queue; size_bytes: header, annotations and bare message of all;
// accessed_at_ms: the now_ms of the last Enqueue, Lock or LockBySequence
// applied to the entity partition (Service Bus's AccessedAt), kept in the
// entity record at no cost of its own.
//
// # Time-driven commands
//
// Three leader commands carry the leader's clock into the state: ExpireLocks
// (locks that ran out), ActivateScheduled (scheduled messages that are due:
// each is re-keyed under a new sequence number, enqueued at activation, its
// time to live counting from then) and ExpireMessages (unlocked main-queue
// messages past expires_at_ms, active or deferred: removed, or
// dead-lettered with TTLExpiredException). Each has an index by time on
// disk and a NextXxx method the leader polls; each does bounded work.
//
// # Duplicate detection
//
// With requires_duplicate_detection, Enqueue keeps, per message id, when it
// was first accepted and its sequence number; a message with the same id
// within duplicate_detection_window_ms (also within the same Enqueue) is
// acknowledged with that number and dropped. Stale entries are pruned a
// few at a time by later Enqueues, by the batch's now_ms. The index lives
// in the store, so it survives restarts, snapshots and failovers.
//
// # Not yet here
//
// Sessions.
package partition
