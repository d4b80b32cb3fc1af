package placement

import (
	"io"

	"github.com/hashicorp/raft"

	"github.com/quorumbus/quorumbus/placement/catalog"
)

// raftFSM adapts the catalog's state machine (catalog.FSM, which knows
// nothing of Raft) to hashicorp/raft. Apply results are catalog.Result
// values; a configuration entry's is nil (Raft keeps the membership
// itself).
type raftFSM struct{ c *catalog.FSM }

var (
	_ raft.FSM         = raftFSM{}
	_ raft.BatchingFSM = raftFSM{}
)

// Apply applies one committed entry.
func (f raftFSM) Apply(l *raft.Log) any { return f.ApplyBatch([]*raft.Log{l})[0] }

// ApplyBatch applies the commands among committed entries in one call, so
// that the catalog applies them under one lock and wakes its watchers
// once.
func (f raftFSM) ApplyBatch(logs []*raft.Log) []any {
	out := make([]any, len(logs))
	entries := make([]catalog.Entry, 0, len(logs))
	for _, l := range logs {
		if l.Type == raft.LogCommand {
			entries = append(entries, catalog.Entry{Index: l.Index, Data: l.Data})
		}
	}
	results := f.c.ApplyEntries(entries)
	for i, l := range logs {
		if l.Type == raft.LogCommand {
			out[i], results = results[0], results[1:]
		}
	}
	return out
}

// Snapshot captures the catalog; Persist encodes it apart from the
// applies.
func (f raftFSM) Snapshot() (raft.FSMSnapshot, error) {
	s, err := f.c.Snapshot()
	if err != nil {
		return nil, err
	}
	return raftSnapshot{s}, nil
}

// Restore replaces the catalog with the one in a snapshot.
func (f raftFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	return f.c.Restore(rc)
}

type raftSnapshot struct{ s *catalog.Snapshot }

func (s raftSnapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := s.s.WriteTo(sink); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

func (raftSnapshot) Release() {}
