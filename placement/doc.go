// Package placement runs the cluster's catalog and control loop: the meta
// Raft group.
//
// # Pieces
//
//   - catalog: the meta group's state machine. Entities (ids never reused,
//     names unique ignoring case), partition groups and their replicas,
//     storage nodes, and the partition tasks the leader still owes. Pure:
//     time and every placement decision arrive in the command.
//   - planner: pure placement functions. How many groups the cluster
//     wants (WantGroups); replicas of new groups on distinct nodes, spread
//     over zones, then balanced, within a cap of replicas per node for the
//     groups past Config.Groups; an entity's partitions over as many
//     groups as it has partitions, least loaded first.
//   - membership: memberlist gossip. Each process announces node id, role
//     (storage, frontend, gateway), gRPC address and zone.
//   - Service (this package): one member of the meta group. It runs Raft
//     over the Transport the caller hands in, serves PlacementService on any
//     gRPC server (Register), and runs the control loop while it leads.
//   - placementtest: an in-process meta group for tests, with a fake
//     PartitionService on every member.
//
// # The meta log
//
// Every entry is a format byte (1) and a CatalogCommand (placement.proto).
// The leader stamps now_ms and decides what needs more than the catalog to
// decide: which groups hold a new entity's partitions, which nodes hold a
// new group's replicas. Replicas only check and record, so a newer planner
// on one member cannot make the members diverge. Checks that depend on
// the catalog (name taken, limits, unknown groups, property rules) are made
// while applying, and a command that fails one is a rejection returned to
// the proposer: the catalog stays as it was. A member whose state machine
// meets an entry it cannot apply (other format, undecodable, an op it does
// not know) stops applying and leaves the meta group (fail-stop); the
// others and the process carry on. A new op must therefore only be
// proposed once every member runs a version that knows it.
//
// The catalog lives in memory (at most 10,000 entities: a few MB) and is
// persisted by Raft: a raft-boltdb log and stable store with fsync, and
// file snapshots in DataDir. A restart restores the latest snapshot and
// replays the log after it.
//
// # Requests
//
// Writes (create, update, delete, group reports) and reads (get, list) are
// served by the meta leader. A member that does not lead forwards the
// request to the leader itself, one hop, with the caller's deadline, so
// gateways may call any member. A request that was forwarded already, or
// that finds no known leader address, gets FAILED_PRECONDITION with a
// MetaLeaderHint (UNAVAILABLE while no leader is known). Reads on the
// leader first confirm leadership with a quorum (VerifyLeader), so they
// never miss an acknowledged change; a new leader first applies the entries
// of earlier terms (a barrier). A restarted member serves reads, the
// routing table included, only once its catalog caught up with the commit
// index it learned after starting, and answers UNAVAILABLE before, never
// NOT_FOUND for an entity it has not replayed yet (catchup.go). A write
// whose Raft outcome is unknown
// (leadership lost in flight) answers UNAVAILABLE; retrying a create may
// then find the name taken.
//
// WatchRoutes is served by every member from its own replica: the whole
// routing table at once, then after each change of entities, groups or
// nodes (not of tasks). Its version is the meta log index of the last such
// change, so equal versions mean equal tables on every member. A watcher
// that asks for changes (front-ends, gateways, storage agents) gets the
// whole table once, then only what changed (catalog.ChangesSince: the
// entities touched since, every group and node, the rules if they
// changed), so a creation costs each watcher one entity, not the
// namespace. The catalog remembers the last catalog.MaxRouteChanges
// changes; a watcher further behind, or one reconnecting after a restore
// of a newer snapshot, gets a whole table.
//
// # The control loop
//
// While it leads, a member:
//
//  1. registers the live storage members as catalog nodes, and marks the
//     others not alive;
//  2. creates the missing partition groups (groups.go): Config.Groups
//     once ReplicationFactor storage nodes are usable, then, with
//     Config.MaxReplicasPerNode, one per partition of the widest entity
//     while the usable nodes have room. CreateEntity does the same for
//     the entity it is about to place, before placing it, so that a new
//     partitioned entity spreads over new groups. The command names the
//     number of groups it was planned against, so a plan proposed twice
//     (an old and a new leader) applies once;
//  3. carries out partition tasks. Creating or updating an entity gives
//     each of its partitions an upsert task, deleting it a delete task,
//     all in the same command. The leader calls UpsertEntity or DeleteEntity
//     on the group's leader (the last node that answered as leader, else
//     the leader the group reported, else the replicas in order, following
//     LeaderHint details of FAILED_PRECONDITION answers), retries with
//     backoff until it succeeds, and then records the task done. A task is
//     removed only if it is still the same version, so a change that came
//     meanwhile is carried out too. A new leader resumes whatever is left.
//
// CreateEntity answers after the commit, once the partitions are
// configured or Config.CreateWait passed, whichever is first.
//
// # What storage nodes are expected to do
//
// The routing table lists every group with its replicas and every node
// with its gRPC address. A storage node starts the groups that list it as
// a replica (bootstrapping with that replica set), answers PartitionService
// calls for groups it leads and FAILED_PRECONDITION with a LeaderHint for
// the others, treats UpsertEntity as idempotent, answers DeleteEntity for
// an entity partition it does not have with OK or NOT_FOUND (never for a
// group it does not host), and reports the groups it leads through
// ReportGroups.
//
// # Group health
//
// A group without a quorum has no leader to report it, so the meta leader
// judges it by silence: a group not reported serving for GroupSilence is
// recorded without quorum, and every entity with a partition in it reads
// Degraded (in gets, lists and the routing table) until the group's next
// serving report (health.go).
//
// # Replica moves
//
// The control loop also moves replicas (moves.go): off draining nodes
// (DrainNode, `quorumbus node drain`), off nodes dead for GoneAfter, and
// onto nodes that joined, until replica counts differ by one at most. A
// move is recorded in the catalog (StartMove, FinishMove) and carried out
// through the group leader's GroupMembership service: the target joins as
// a non-voter, catches up, is promoted, and the source is removed. Storage
// nodes that join after the bootstrap read the routing table from the
// members until the meta group needs them as voters (metavoters.go: it
// keeps MetaVoters voters on usable nodes, replacing drained and gone
// ones). When nothing moves, it also spreads group leaderships (one
// transfer at a time) so that every node leads as many groups as the
// others, give or take one.
package placement
