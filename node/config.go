package node

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"google.golang.org/grpc"

	"github.com/quorumbus/quorumbus/proto/rpcnet"
)

// Log stores a group can keep its Raft log in (Config.LogStore).
const (
	LogStoreWAL    = "wal"    // hashicorp/raft-wal: append-only segments, one fsync per write
	LogStoreBoltDB = "boltdb" // hashicorp/raft-boltdb/v2 (bbolt)
)

// idleCommitTimeout is how long a leader with nothing new to replicate
// waits before it tells its followers the commit index anyway
// (raft.Config.CommitTimeout). Raft's 50 ms made an idle dev cluster (four
// groups, two followers each) spend a seventh of a core on empty
// AppendEntries; entries in flight carry the commit index without waiting
// for it, so only followers' applying of the last entries of a burst
// waits longer.
const idleCommitTimeout = 250 * time.Millisecond

// Defaults of Config.
const (
	DefaultElectionTimeout   = time.Second
	DefaultSnapshotThreshold = 65536
	DefaultSnapshotInterval  = 2 * time.Minute
	DefaultTrailingLogs      = 4096
	DefaultLogCacheBytes     = 8 << 20
	// DefaultMaxQueuedSendBytes: 128 batches of maxBatchBytes, about a
	// second of a group's sends on the reference machine; a send waits at
	// most that long in the queue before it is refused instead.
	DefaultMaxQueuedSendBytes = 64 << 20
	DefaultSnapshotLogBytes   = 1 << 30
	DefaultTrailingLogBytes   = 256 << 20
	// DefaultWALSegmentBytes is the size raft-wal preallocates for each
	// segment of a group's log: an idle group takes this much disk. A
	// segment takes a write that does not fit whole, then seals, so it
	// bounds no entry; a smaller one only rotates more often.
	DefaultWALSegmentBytes = 16 << 20
)

// defaultDiskReserve is Config.DiskReserveBytes by default: room for two
// segments of every log to rotate into, and the rest of the writes that
// settles cause (the state machine's store) on top.
func defaultDiskReserve(segment int) int64 { return 2*int64(segment) + 64<<20 }

// Config configures a Node. Only ID and DataDir are required.
type Config struct {
	// ID names the node in every group's Raft configuration. It must stay
	// the same across restarts.
	ID string
	// DataDir holds the node's groups, one directory each under groups/.
	DataDir string

	// Listener is the node's one gRPC port (Raft traffic of all groups and
	// PartitionService). If nil, New listens on Addr.
	Listener net.Listener
	Addr     string
	// AdvertiseAddr is the address peers and clients dial. Default: the
	// listener's address.
	AdvertiseAddr string

	// LogStore is LogStoreWAL (default) or LogStoreBoltDB. Either syncs
	// every write.
	LogStore string

	// LeaderSyncFirst makes a group's leader fsync each log write before
	// it replicates it, as hashicorp/raft does by itself. By default a
	// leader of a group of three or more voters fsyncs while its followers
	// write (aheadlog.go says why that is safe, and what it costs in one
	// double fault). WAL log store only.
	LeaderSyncFirst bool

	// CacheBytes bounds the block cache of each group's message store
	// (partition.Options.CacheBytes); 0 means the partition default.
	CacheBytes int64
	// LogCacheBytes bounds the entry data each group keeps in memory from
	// the newest end of its Raft log (logcache.go); 0 means
	// DefaultLogCacheBytes.
	LogCacheBytes int64

	// WALSegmentBytes is the segment size of each group's raft-wal log
	// (WAL log store only). Default DefaultWALSegmentBytes.
	WALSegmentBytes int

	// DiskReserveBytes is the free space of DataDir's file system below
	// which the node refuses requests that add messages, with
	// ErrNoSpace, while it still commits settles, locks and expiries,
	// which free space. Default: two WAL segments and 64 MiB; negative
	// turns the check off.
	DiskReserveBytes int64

	// MaxQueuedSendBytes bounds the requests a group's leader holds
	// waiting for its proposer: a send that finds more queued is refused
	// with ErrBusy before anything is proposed (the front-end answers
	// server-busy, which the SDKs retry), while settles, locks and
	// expiries still queue, since they free what sends take. Default
	// DefaultMaxQueuedSendBytes; negative turns the bound off.
	MaxQueuedSendBytes int64

	// ElectionTimeout is Raft's heartbeat and election timeout; the leader
	// lease lasts as long. Default DefaultElectionTimeout.
	ElectionTimeout time.Duration
	// SnapshotThreshold, SnapshotInterval and TrailingLogs are passed to
	// raft.Config. A snapshot streams a group's whole store, so it is taken
	// rarely; TrailingLogs entries stay behind it for followers that lag.
	SnapshotThreshold uint64
	SnapshotInterval  time.Duration
	TrailingLogs      uint64
	// SnapshotLogBytes and TrailingLogBytes bound the log in bytes too
	// (logbytes.go): a replica snapshots once its log took
	// SnapshotLogBytes (or as much as its last snapshot holds, if more)
	// since its last snapshot, and keeps at most TrailingLogBytes of
	// entries behind it. Defaults DefaultSnapshotLogBytes and
	// DefaultTrailingLogBytes.
	SnapshotLogBytes int64
	TrailingLogBytes int64

	// ReachCheck is how often a node that leads groups asks their other
	// voters whether they reach it (reach.go); a leader that a majority of
	// them cannot reach for deafRounds checks in a row hands its
	// leadership over. Default DefaultReachCheck; negative: never.
	ReachCheck time.Duration

	// Logger receives the node's and Raft's logs; the caller names the
	// node in it (the processes of cmd add node=ID to every part they
	// run). Default slog.Default().
	Logger *slog.Logger

	// Creds is the cluster's mutual TLS: the gRPC listener admits only
	// clients with a certificate of the cluster CA, and the node dials its
	// peers with its own. nil: plain text (rpcnet.Creds).
	Creds *rpcnet.Creds

	// PeerDialOptions are added to the options the node dials its peers
	// with (Raft traffic). Tests route it through a network that they can
	// cut (nodetest.Net).
	PeerDialOptions []grpc.DialOption

	// host is the machine the node runs on (host.go): nil, the real
	// one. Only the package's tests (export_test.go) and the chaos
	// suite's build (chaos.go) simulate one.
	host host
}

func (c *Config) setDefaults() {
	if c.LogStore == "" {
		c.LogStore = LogStoreWAL
	}
	if c.ElectionTimeout == 0 {
		c.ElectionTimeout = DefaultElectionTimeout
	}
	if c.ReachCheck == 0 {
		c.ReachCheck = DefaultReachCheck
	}
	if c.LogCacheBytes == 0 {
		c.LogCacheBytes = DefaultLogCacheBytes
	}
	if c.SnapshotLogBytes == 0 {
		c.SnapshotLogBytes = DefaultSnapshotLogBytes
	}
	if c.TrailingLogBytes == 0 {
		c.TrailingLogBytes = DefaultTrailingLogBytes
	}
	if c.SnapshotThreshold == 0 {
		c.SnapshotThreshold = DefaultSnapshotThreshold
	}
	if c.SnapshotInterval == 0 {
		c.SnapshotInterval = DefaultSnapshotInterval
	}
	if c.WALSegmentBytes == 0 {
		c.WALSegmentBytes = DefaultWALSegmentBytes
	}
	if c.DiskReserveBytes == 0 {
		c.DiskReserveBytes = defaultDiskReserve(c.WALSegmentBytes)
	}
	if c.MaxQueuedSendBytes == 0 {
		c.MaxQueuedSendBytes = DefaultMaxQueuedSendBytes
	}
	if c.TrailingLogs == 0 {
		c.TrailingLogs = DefaultTrailingLogs
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.host == nil {
		c.host = realHost{}
	}
}

// Validate reports what makes the configuration unusable, after defaults.
func (c Config) Validate() error {
	c.setDefaults()
	var errs []error
	if c.ID == "" {
		errs = append(errs, errors.New("ID is empty"))
	}
	if c.DataDir == "" {
		errs = append(errs, errors.New("DataDir is empty"))
	}
	if c.Listener == nil && c.Addr == "" {
		errs = append(errs, errors.New("neither Listener nor Addr is set"))
	}
	if c.LogStore != LogStoreWAL && c.LogStore != LogStoreBoltDB {
		errs = append(errs, fmt.Errorf("LogStore %q is neither %q nor %q", c.LogStore, LogStoreWAL, LogStoreBoltDB))
	}
	if c.CacheBytes < 0 {
		errs = append(errs, fmt.Errorf("negative CacheBytes %d", c.CacheBytes))
	}
	if c.LogCacheBytes < 0 {
		errs = append(errs, fmt.Errorf("negative LogCacheBytes %d", c.LogCacheBytes))
	}
	if c.SnapshotLogBytes < 0 || c.TrailingLogBytes < 0 {
		errs = append(errs, fmt.Errorf("negative SnapshotLogBytes %d or TrailingLogBytes %d", c.SnapshotLogBytes, c.TrailingLogBytes))
	}
	if c.WALSegmentBytes < 64<<10 || c.WALSegmentBytes > 1<<30 {
		errs = append(errs, fmt.Errorf("WALSegmentBytes %d is not between 64 KiB and 1 GiB", c.WALSegmentBytes))
	}
	if c.ElectionTimeout < 10*time.Millisecond {
		errs = append(errs, fmt.Errorf("ElectionTimeout %v is below 10ms", c.ElectionTimeout))
	}
	if c.SnapshotInterval < 5*time.Millisecond {
		errs = append(errs, fmt.Errorf("SnapshotInterval %v is below 5ms", c.SnapshotInterval))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("node: config: %w", err)
	}
	return nil
}
