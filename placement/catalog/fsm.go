package catalog

import (
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"google.golang.org/protobuf/proto"

	pb "github.com/quorumbus/quorumbus/proto/placementpb"
)

// FSM is the catalog as the replicated state machine of the meta group:
// the committed commands of its log in (ApplyEntries), snapshots out
// (Snapshot, Restore). It knows nothing of Raft; placement adapts it to
// hashicorp/raft. It is safe for concurrent use: reads (Read, Table,
// Changed) run alongside the applies.
//
// When an entry cannot be applied (another format, undecodable bytes, an op
// this version does not know) the FSM stops: it keeps the catalog as it was,
// answers every later entry with ErrStopped, and closes Stopped. The owner
// then shuts the meta group down on this member; the other members, and the
// process, carry on.
type FSM struct {
	mu      sync.RWMutex
	state   *State
	err     error         // why the FSM stopped; nil while it runs
	stopped chan struct{} // closed when err is set
	changed chan struct{} // closed and replaced whenever the catalog changes
	// table caches the routing table of the latest version asked for; it
	// is stored under the read lock (Table), and cleared under the write
	// lock (Restore).
	table atomic.Pointer[pb.RoutingTable]
}

// NewFSM returns a state machine holding an empty catalog.
func NewFSM() *FSM {
	return &FSM{state: New(), stopped: make(chan struct{}), changed: make(chan struct{})}
}

// Entry is a committed command of the meta group's log: its index and
// its bytes (Encode).
type Entry struct {
	Index uint64
	Data  []byte
}

// ApplyEntry applies one committed command.
func (f *FSM) ApplyEntry(index uint64, data []byte) Result {
	return f.ApplyEntries([]Entry{{Index: index, Data: data}})[0]
}

// ApplyEntries applies committed commands in order under one lock, and
// wakes the watchers once.
func (f *FSM) ApplyEntries(entries []Entry) []Result {
	out := make([]Result, len(entries))
	f.mu.Lock()
	defer f.mu.Unlock()
	before := f.state.Modified()
	for i, e := range entries {
		out[i] = f.applyLocked(e)
	}
	if f.state.Modified() != before {
		close(f.changed)
		f.changed = make(chan struct{})
	}
	return out
}

func (f *FSM) applyLocked(e Entry) Result {
	if f.err != nil {
		return Result{Index: e.Index, Err: f.err}
	}
	cmd, err := Decode(e.Data)
	var res Result
	if err == nil {
		res, err = f.state.Apply(e.Index, cmd)
	}
	if err != nil {
		f.err = fmt.Errorf("%w: entry %d: %w", ErrStopped, e.Index, err)
		close(f.stopped)
		return Result{Index: e.Index, Err: f.err}
	}
	return res
}

// Read calls fn with the catalog under a read lock. fn must not keep the
// State; what its read methods return are copies and may be kept.
func (f *FSM) Read(fn func(*State)) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	fn(f.state)
}

// Changed returns a channel that is closed at the next change of the
// catalog after the call.
func (f *FSM) Changed() <-chan struct{} {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.changed
}

// Table returns the current routing table. It is shared between callers
// and must not be changed. It is built under the read lock (State.Table
// only reads), so that building the namespace's table (23 ms at 10,000
// entities) never holds the applies back as the write lock did; two
// callers that find it stale at once may both build it, alike.
func (f *FSM) Table() *pb.RoutingTable {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if t := f.table.Load(); t != nil && t.Version == f.state.RoutesVersion() {
		return t
	}
	t := f.state.Table()
	f.table.Store(t)
	return t
}

// RoutesVersion is the version of the current routing table.
func (f *FSM) RoutesVersion() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.state.RoutesVersion()
}

// Born is the catalog's birth (State.Born).
func (f *FSM) Born() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.state.Born()
}

// ChangesSince returns what changed in the routing table after version
// from (State.ChangesSince); ok is false when the watcher needs the whole
// table. The change is the caller's but shares entity records with the
// catalog, and must not be changed.
func (f *FSM) ChangesSince(from uint64) (t *pb.RoutingTable, ok bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.state.ChangesSince(from)
}

// Err says why the FSM stopped; nil while it runs.
func (f *FSM) Err() error {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.err
}

// Stopped is closed when the FSM stops.
func (f *FSM) Stopped() <-chan struct{} { return f.stopped }

// Snapshot captures the catalog: a message that shares the entity records
// (never changed in place) and holds copies of the rest, so that WriteTo,
// which Raft runs apart from the applies, encodes it without the lock.
// Encoded under the lock, a snapshot of 10,000 entities held every apply
// back for about 40 ms.
func (f *FSM) Snapshot() (*Snapshot, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.err != nil {
		return nil, f.err
	}
	return &Snapshot{f.state.Snapshot()}, nil
}

// Restore replaces the catalog with the one in a snapshot that
// Snapshot.WriteTo wrote.
func (f *FSM) Restore(r io.Reader) error {
	data, err := io.ReadAll(r)
	if err != nil {
		return fmt.Errorf("catalog: reading snapshot: %w", err)
	}
	snap, err := DecodeSnapshot(data)
	if err != nil {
		return err
	}
	s, err := FromSnapshot(snap)
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return f.err
	}
	f.state = s
	f.table.Store(nil)
	close(f.changed)
	f.changed = make(chan struct{})
	return nil
}

// EncodeSnapshot writes a snapshot: the format byte, then protobuf.
func EncodeSnapshot(snap *pb.CatalogSnapshot) ([]byte, error) {
	return proto.MarshalOptions{Deterministic: true}.MarshalAppend([]byte{FormatV1}, snap)
}

// DecodeSnapshot reads what EncodeSnapshot wrote.
func DecodeSnapshot(data []byte) (*pb.CatalogSnapshot, error) {
	if len(data) == 0 {
		return nil, fmt.Errorf("%w: empty snapshot", ErrCorrupt)
	}
	if data[0] != FormatV1 {
		return nil, fmt.Errorf("%w: snapshot format %d", ErrUnknownFormat, data[0])
	}
	snap := &pb.CatalogSnapshot{}
	if err := proto.Unmarshal(data[1:], snap); err != nil {
		return nil, fmt.Errorf("%w: snapshot: %v", ErrCorrupt, err)
	}
	return snap, nil
}

// Snapshot is the catalog as FSM.Snapshot captured it.
type Snapshot struct{ snap *pb.CatalogSnapshot }

// WriteTo writes the snapshot as EncodeSnapshot encodes it, in one Write.
func (s *Snapshot) WriteTo(w io.Writer) (int64, error) {
	data, err := EncodeSnapshot(s.snap)
	if err != nil {
		return 0, fmt.Errorf("catalog: encoding snapshot: %w", err)
	}
	n, err := w.Write(data)
	if err != nil {
		return int64(n), fmt.Errorf("catalog: writing snapshot: %w", err)
	}
	return int64(n), nil
}
