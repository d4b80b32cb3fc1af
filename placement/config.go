package placement

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/hashicorp/raft"

	"github.com/quorumbus/quorumbus/placement/membership"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
	"github.com/quorumbus/quorumbus/proto/placementpb"
	"github.com/quorumbus/quorumbus/proto/rpcnet"
)

// idleCommitTimeout is how long the meta leader with nothing new to
// replicate waits before it tells its followers the commit index anyway
// (raft.Config.CommitTimeout; node's partition groups use the same, and
// say why).
const idleCommitTimeout = 250 * time.Millisecond

// Members is the live member list the service works from. A
// *membership.Memberlist is one; MembersFunc adapts a function.
//
// If it also has a `Changed() <-chan struct{}` method (as Memberlist has),
// the meta leader reacts to changes at once instead of at its next tick.
type Members interface {
	Members() []membership.Member
}

// MembersFunc adapts a function to Members.
type MembersFunc func() []membership.Member

// Members calls f.
func (f MembersFunc) Members() []membership.Member { return f() }

type changeNotifier interface {
	Changed() <-chan struct{}
}

// Guard keeps a member that opens the meta group without Raft state (one
// added by the meta leader, one whose disk was lost, or a first voter
// that has not bootstrapped yet) out of the group's elections until a
// leader has brought it up to date, and tells a first voter whether the
// group exists already; node.MetaGuard is one, and cmd wires it.
type Guard interface {
	// Open is called before Raft starts, with whether the stores hold
	// Raft state, and the stores.
	Open(hasState bool, stable raft.StableStore, logs raft.LogStore) error
	// Exists tells whether the group exists on the other voters listed:
	// true once one of them holds an entry past the bootstrap entry,
	// false once every one holds no more; an error until it can tell.
	Exists(ctx context.Context, voters []raft.Server) (bool, error)
	// Bootstrapped is told that this member bootstrapped a new group.
	Bootstrapped()
}

// Config configures one member of the meta group. The zero value of every
// optional field is a working default.
type Config struct {
	// NodeID is this member's Raft server id and its id among members.
	NodeID string
	// DataDir holds the meta group's Raft log and stable store (raft.db)
	// and its snapshots.
	DataDir string
	// Transport carries the meta group's Raft traffic. Its LocalAddr is the
	// address the other members know this one by.
	Transport raft.Transport
	// Bootstrap lists the meta group's initial voters (this member among
	// them). Every initial member gets the same list; it is used once, when
	// DataDir holds no Raft state. Empty: join a group that exists, once
	// its leader adds this member.
	Bootstrap []raft.Server
	// Guard, when set, keeps a member without Raft state out of elections
	// until it has caught up, and makes a first voter without Raft state
	// bootstrap only once every other one in Bootstrap has shown the
	// group is new; when one shows it exists, the member joins it instead
	// of bootstrapping a second one (bootstrap.go). Nil: a first voter
	// without Raft state bootstraps at once, and votes at once.
	Guard Guard

	// Groups is how many partition groups the meta leader creates once
	// ReplicationFactor storage nodes are alive, whatever the entities.
	// Default 3. Raising it later adds groups; lowering it removes none.
	Groups int
	// MaxReplicasPerNode lets the cluster have more groups than Groups: as
	// many as its widest entity has partitions, while every usable node
	// holds at most this many group replicas (planner.WantGroups). The
	// groups an entity needs are created as it is created, and more as
	// nodes join. 0: Groups, no more.
	MaxReplicasPerNode int
	// ReplicationFactor is the number of replicas of each partition group.
	// Default 3.
	ReplicationFactor int

	// Members is the live member list: storage nodes to place replicas on,
	// and the gRPC addresses of meta members to forward requests to.
	// Default: none (this member serves the catalog but places nothing).
	Members Members
	// Creds is the cluster's mutual TLS this member dials storage nodes
	// (PartitionService, GroupMembership) and other members with; nil:
	// plain text.
	Creds *rpcnet.Creds
	// DialPartition returns a PartitionService client for a storage node's
	// gRPC address. Default: a gRPC connection with Creds, kept per address.
	DialPartition func(addr string) (partitionpb.PartitionServiceClient, error)
	// DialPlacement returns a PlacementService client for another meta
	// member's gRPC address, to forward requests to the leader. Default: a
	// gRPC connection with Creds, kept per address.
	DialPlacement func(addr string) (placementpb.PlacementServiceClient, error)

	// ElectionTimeout is Raft's heartbeat and election timeout; the leader
	// lease lasts as long. Default 1 s.
	ElectionTimeout time.Duration
	// ControlInterval is how often the meta leader looks for work when
	// nothing wakes it earlier. Default 1 s.
	ControlInterval time.Duration
	// CreateWait bounds how long CreateEntity waits for the entity's
	// partitions to be configured on their groups before it answers (it
	// answers with the created entity either way). Default 5 s; negative:
	// do not wait.
	CreateWait time.Duration
	// GroupSilence is how long a partition group may go without its leader
	// reporting it serving before the meta leader records it without
	// quorum and its entities Degraded (health.go). Storage nodes report
	// every second. Default 3 s.
	GroupSilence time.Duration
	// MaxMoves bounds the replica moves under way at once (moves.go).
	// Default 2; negative: no moves (the replicas stay where they were
	// created).
	MaxMoves int
	// GoneAfter is how long a storage node may be dead before its
	// replicas are re-created on other nodes. Default DefaultGoneAfter.
	GoneAfter time.Duration
	// LeaderBalanceDelay is how long a new meta leader waits before it
	// hands group leaderships over to spread them (moves.go). Default
	// 10 s; negative: leaders are not balanced.
	LeaderBalanceDelay time.Duration

	// MetaVoters is how many voters on usable storage nodes the meta group
	// keeps: it adds storage nodes as voters up to it and replaces voters
	// on drained or gone nodes (metavoters.go). Default 3; negative: the
	// voters stay as bootstrapped.
	MetaVoters int
	// MetaAddr is the meta group's Raft address of a storage node. Default:
	// its gRPC address, which carries the meta group's Raft traffic too.
	MetaAddr func(*placementpb.Node) raft.ServerAddress

	// Logger receives the service's logs; the caller names the node in it.
	Logger *slog.Logger
}

// DefaultGoneAfter is Config.GoneAfter's default.
const DefaultGoneAfter = 10 * time.Minute

// ErrInvalidConfig is wrapped by every error of Config.Validate.
var ErrInvalidConfig = errors.New("placement: invalid config")

func (c Config) withDefaults() Config {
	if c.Groups == 0 {
		c.Groups = 3
	}
	if c.ReplicationFactor == 0 {
		c.ReplicationFactor = 3
	}
	if c.Members == nil {
		c.Members = MembersFunc(func() []membership.Member { return nil })
	}
	if c.ElectionTimeout == 0 {
		c.ElectionTimeout = time.Second
	}
	if c.ControlInterval == 0 {
		c.ControlInterval = time.Second
	}
	if c.CreateWait == 0 {
		c.CreateWait = 5 * time.Second
	}
	if c.GroupSilence == 0 {
		c.GroupSilence = 3 * time.Second
	}
	if c.MaxMoves == 0 {
		c.MaxMoves = 2
	}
	if c.GoneAfter == 0 {
		c.GoneAfter = DefaultGoneAfter
	}
	if c.LeaderBalanceDelay == 0 {
		c.LeaderBalanceDelay = 10 * time.Second
	}
	if c.MetaVoters == 0 {
		c.MetaVoters = 3
	}
	if c.MetaAddr == nil {
		c.MetaAddr = func(n *placementpb.Node) raft.ServerAddress { return raft.ServerAddress(n.GrpcAddr) }
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Validate reports whether the config, with defaults filled in, can run.
func (c Config) Validate() error {
	c = c.withDefaults()
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...)
	}
	switch {
	case c.NodeID == "":
		return bad("NodeID is required")
	case c.DataDir == "":
		return bad("DataDir is required")
	case c.Transport == nil:
		return bad("Transport is required")
	case c.Groups < 0:
		return bad("Groups %d is negative", c.Groups)
	case c.MaxReplicasPerNode < 0:
		return bad("MaxReplicasPerNode %d is negative", c.MaxReplicasPerNode)
	case c.ReplicationFactor < 1:
		return bad("ReplicationFactor %d is below 1", c.ReplicationFactor)
	case c.ElectionTimeout < 10*time.Millisecond:
		return bad("ElectionTimeout %v is below 10ms", c.ElectionTimeout)
	case c.ControlInterval < 0:
		return bad("ControlInterval %v is negative", c.ControlInterval)
	case c.GroupSilence < 0:
		return bad("GroupSilence %v is negative", c.GroupSilence)
	case c.GoneAfter < 0:
		return bad("GoneAfter %v is negative", c.GoneAfter)
	}
	if len(c.Bootstrap) > 0 && !slices.ContainsFunc(c.Bootstrap, func(s raft.Server) bool { return s.ID == raft.ServerID(c.NodeID) }) {
		return bad("Bootstrap does not list this member (%s)", c.NodeID)
	}
	return nil
}
