package node

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/quorumbus/quorumbus/partition"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// Hooks for the package's external tests.

// simHost is the machine of the package's tests (Config.host): a
// boot id of its own, a skewed clock, a disk that can look full, logs
// whose unsynced writes a crash loses, syncers held on request.
type simHost struct {
	boot      string        // "": the kernel's
	offset    time.Duration // added to the wall clock
	track     bool          // logs remember unsynced writes (CrashMachine loses them)
	full      atomic.Bool   // the disk looks full
	lostCount atomic.Int64  // writes crashes took away

	mu    sync.Mutex
	holds map[*aheadLog]syncHold
}

// syncHold stops a log's syncer before it fsyncs until hold is closed;
// the syncer then sends on holding, if not nil and free.
type syncHold struct{ hold, holding chan struct{} }

var _ host = (*simHost)(nil)

func (m *simHost) now() time.Time { return time.Now().Add(m.offset) }

func (m *simHost) bootID() string {
	if m.boot == "" {
		return readBootID()
	}
	return m.boot
}

func (m *simHost) diskFull() bool       { return m.full.Load() }
func (m *simHost) tracksUnsynced() bool { return m.track }
func (m *simHost) lost(writes int64)    { m.lostCount.Add(writes) }

func (m *simHost) awaitSync(l *aheadLog, stop <-chan struct{}) bool {
	m.mu.Lock()
	h := m.holds[l]
	m.mu.Unlock()
	if h.hold == nil {
		return true
	}
	if h.holding != nil {
		select {
		case h.holding <- struct{}{}:
		default:
		}
	}
	select {
	case <-h.hold:
		return true
	case <-stop:
		return false
	}
}

// holdSync stops l's syncer before its next fsync until hold is closed; it
// then sends on holding, if not nil and free.
func (m *simHost) holdSync(l *aheadLog, hold, holding chan struct{}) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.holds == nil {
		m.holds = map[*aheadLog]syncHold{}
	}
	m.holds[l] = syncHold{hold, holding}
}

// simulated returns the simulated machine a node built from cfg runs on,
// giving cfg one if it has none yet.
func simulated(cfg *Config) *simHost {
	if m, ok := cfg.host.(*simHost); ok {
		return m
	}
	m := &simHost{}
	cfg.host = m
	return m
}

// SimulateMachine makes a node built from cfg behave as if it ran on its
// own machine with the given boot id, and lets CrashMachine lose what its
// logs have not fsynced.
func SimulateMachine(cfg *Config, bootID string) {
	m := simulated(cfg)
	m.boot = bootID
	m.track = true
}

// CrashMachine stops n as a crash of its machine would: every group's log
// loses what was written ahead of fsync and not yet synced, and nothing
// is cleaned up.
func CrashMachine(n *Node) error { return n.shut(crashMachine) }

// CrashProcess stops n as a crash of its process would: what its logs
// wrote ahead of fsync stays in the page cache, unsynced, and nothing is
// cleaned up.
func CrashProcess(n *Node) error { return n.shut(crashProcess) }

// HoldLogSync stops the syncer of group id's log on n (it fsyncs what is
// written ahead) until release is called. The node must simulate a
// machine.
func HoldLogSync(n *Node, id uint64) (release func()) {
	n.mu.RLock()
	g := n.groups[id]
	n.mu.RUnlock()
	h := make(chan struct{})
	n.cfg.host.(*simHost).holdSync(g.ahead, h, nil)
	return func() { close(h) }
}

// LostWrites is how many log writes crashes of n's simulated machine
// (CrashMachine) have taken away.
func LostWrites(n *Node) int64 {
	if m, ok := n.cfg.host.(*simHost); ok {
		return m.lostCount.Load()
	}
	return 0
}

// LogBytes returns the size of the largest entry in group id's log on n
// and of all of them, reading the log from its first index to its last.
func LogBytes(n *Node, id uint64) (largest, total int, err error) {
	n.mu.RLock()
	g := n.groups[id]
	n.mu.RUnlock()
	if g == nil {
		return 0, 0, ErrGroupNotFound
	}
	first, err := g.cache.FirstIndex()
	if err != nil {
		return 0, 0, err
	}
	last, err := g.cache.LastIndex()
	if err != nil {
		return 0, 0, err
	}
	for i := first; i <= last && i > 0; i++ {
		var l raft.Log
		if err := g.cache.store.GetLog(i, &l); err != nil {
			return 0, 0, err
		}
		largest = max(largest, len(l.Data))
		total += len(l.Data)
	}
	return largest, total, nil
}

// MaxEntryBytes is the bound on an entry (propose.go).
const MaxEntryBytes = maxEntryBytes

// RaceOn: the tests run under the race detector.
const RaceOn = raceOn

// SkewClock makes a node built from cfg read its wall clock offset by d
// (as node.ChaosSkewClock does in the chaos suite's build).
func SkewClock(cfg *Config, d time.Duration) { simulated(cfg).offset = d }

// LogBatches decodes the command entries of group id's log on n, from its
// first index to its last.
func LogBatches(n *Node, id uint64) ([]*partitionpb.Batch, error) {
	n.mu.RLock()
	g := n.groups[id]
	n.mu.RUnlock()
	if g == nil {
		return nil, ErrGroupNotFound
	}
	first, err := g.cache.FirstIndex()
	if err != nil {
		return nil, err
	}
	last, err := g.cache.LastIndex()
	if err != nil {
		return nil, err
	}
	var out []*partitionpb.Batch
	for i := first; i <= last && i > 0; i++ {
		var l raft.Log
		if err := g.cache.store.GetLog(i, &l); err != nil {
			return nil, err
		}
		if l.Type != raft.LogCommand {
			continue
		}
		b, err := partition.DecodeBatch(l.Data)
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, nil
}
