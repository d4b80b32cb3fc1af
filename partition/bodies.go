package partition

import (
	"github.com/quorumbus/quorumbus/partition/store"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// Where a message's body is: in the Raft log (logbodies.go), in its body
// record, and for a staged bare message in a blob (blobs.go).

// readBody fills in the sections of a message read from its state record
// (store.ReadState, a cursor), from wherever they are.
func readBody(r store.Reader, logs *logReader, k ekey, m *partitionpb.StoredMessage) error {
	if m.BodyIndex != 0 {
		return logs.sections(m)
	}
	if err := store.ReadBodyRecord(r, k, m); err != nil || len(m.BodyBlob) == 0 {
		return err
	}
	return readBlob(r, k, m)
}

// getMessage reads a whole message, state and body; nil if absent.
func getMessage(r store.Reader, logs *logReader, k ekey, sub partitionpb.SubQueue, seq uint64) (*partitionpb.StoredMessage, error) {
	m, err := store.ReadState(r, k, sub, seq)
	if err != nil || m == nil {
		return nil, err
	}
	if err := readBody(r, logs, k, m); err != nil {
		return nil, err
	}
	return m, nil
}
