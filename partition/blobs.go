package partition

import (
	"fmt"

	"github.com/quorumbus/quorumbus/partition/store"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// Staged bodies: bare messages larger than a Raft entry may be.
//
// Every Raft entry must stay below what the log store can read back
// (node bounds entries well under raft-wal's 64 MiB), but Service Bus
// entities may take messages of up to 100 MB. The leader therefore writes
// such a bare message first as a blob of StageBody chunks, each in an
// entry of its own, and then proposes the Enqueue with the blob's id in
// place of the bytes (NewMessage.staged_body). The blob stays where the
// chunks were written; the message's state record names it (body_blob),
// so a message that moves (dead-letter, activation under a new sequence
// number) keeps it, and removing the message deletes it.
//
// Invariants:
//   - a staged record exists while a blob is being written and no Enqueue
//     has taken it over; it holds when the last chunk arrived and how many
//     bytes the chunks hold, so an Enqueue can check that the blob is whole
//     without reading it;
//   - chunks may arrive in any order (the leader proposes several at once,
//     and concurrent proposals may reach the log in any order), but never
//     twice at one offset: a second chunk at an offset is refused. Whether
//     they tile the blob exactly is checked, with its CRC, when it is read;
//   - a blob is referenced by at most one message: Enqueue deletes the
//     staged record as it takes the blob over, and a blob whose Enqueue is
//     refused, repeated or dropped as a duplicate is deleted (at once, or
//     by the pruning of stale staged records below);
//   - blobs live under their entity partition's prefix, so deleting the
//     entity deletes them.
//
// A blob whose Enqueue never came (the leader lost its term midway, the
// request failed) is deleted by a later StageBody of the same entity
// partition once stagingWindowMs have passed since its last chunk.

const (
	// BlobIDBytes is the length of a blob id.
	BlobIDBytes = store.BlobIDBytes
	// MaxStageChunk bounds the data of one StageBody.
	MaxStageChunk = 4 << 20
	// stagingWindowMs is how long a staged blob waits for its Enqueue.
	stagingWindowMs = 10 * 60 * 1000
	// stagedPrune bounds the stale blobs one StageBody deletes.
	stagedPrune = 4
)

// stageBody applies a StageBody: one more chunk of a blob.
func (a *applier) stageBody(c *partitionpb.StageBody) (*partitionpb.Result, error) {
	e, err := a.entity(c.EntityId, c.Partition)
	if err != nil {
		return nil, err
	}
	switch {
	case len(c.Blob) != BlobIDBytes:
		return nil, fmt.Errorf("%w: blob id of %d bytes, want %d", ErrInvalid, len(c.Blob), BlobIDBytes)
	case len(c.Data) == 0 || len(c.Data) > MaxStageChunk:
		return nil, fmt.Errorf("%w: chunk of %d bytes, want 1 to %d", ErrInvalid, len(c.Data), MaxStageChunk)
	}
	s, _, err := a.b.Staged(e.key, c.Blob)
	if err != nil {
		return nil, err
	}
	if found, err := a.b.HasChunk(e.key, c.Blob, c.Offset); err != nil || found {
		if err == nil {
			err = fmt.Errorf("%w: a second chunk at %d of blob %x", ErrInvalid, c.Offset, c.Blob)
		}
		return nil, err
	}
	if err := a.pruneStaged(e, c.Blob); err != nil {
		return nil, err
	}
	if err := a.b.PutChunk(e.key, c.Blob, c.Offset, c.Data); err != nil {
		return nil, err
	}
	// A blob id is never reused: a chunk of a blob an Enqueue took over
	// would start a new staged record, pruned in time.
	s.At, s.Received = a.now, s.Received+uint64(len(c.Data))
	return okResult(), a.b.PutStaged(e.key, c.Blob, s)
}

// pruneStaged deletes up to stagedPrune blobs of e, other than keep, whose
// last chunk is older than the staging window.
func (a *applier) pruneStaged(e *entity, keep []byte) error {
	stale, err := a.b.StaleStaged(e.key, keep, a.now, stagingWindowMs, stagedPrune)
	if err != nil {
		return err
	}
	for _, blob := range stale {
		if err := a.dropBlob(e, blob); err != nil {
			return err
		}
	}
	return nil
}

// dropBlob deletes a blob and its staged record, if any.
func (a *applier) dropBlob(e *entity, blob []byte) error { return a.b.DeleteBlob(e.key, blob) }

// checkStaged refuses a new message whose staged blob is not whole.
func (a *applier) checkStaged(e *entity, i int, nm *partitionpb.NewMessage) error {
	if len(nm.StagedBody) == 0 {
		return nil
	}
	if len(nm.Bare) > 0 {
		return fmt.Errorf("%w: message %d has both a bare message and a staged body", ErrInvalid, i)
	}
	s, found, err := a.b.Staged(e.key, nm.StagedBody)
	if err != nil {
		return err
	}
	if !found || s.Received != nm.StagedLength {
		return fmt.Errorf("%w: message %d: staged body %x holds %d bytes of %d", ErrInvalid, i, nm.StagedBody, s.Received, nm.StagedLength)
	}
	return nil
}

// takeBlob hands the staged blob of nm to m.
func (a *applier) takeBlob(e *entity, nm *partitionpb.NewMessage, m *partitionpb.StoredMessage) error {
	m.BodyBlob, m.BodyBlobLength, m.BodyBlobCrc = nm.StagedBody, nm.StagedLength, nm.StagedCrc
	return a.b.DeleteStaged(e.key, nm.StagedBody)
}

// dropStaged deletes the staged blobs an Enqueue names but will not take
// over (it repeats a request already applied). Only blobs still staged
// go: one the first apply took over (the same entry proposed again) is a
// message's, or its topic's copies'.
func (a *applier) dropStaged(c *partitionpb.Enqueue) error {
	e, ok := a.entities[ekey{ID: c.EntityId, Part: c.Partition}]
	if !ok {
		return nil
	}
	for _, nm := range c.Messages {
		if len(nm.StagedBody) == BlobIDBytes {
			_, staged, err := a.b.Staged(e.key, nm.StagedBody)
			if err != nil {
				return err
			}
			if !staged {
				continue
			}
			if err := a.dropBlob(e, nm.StagedBody); err != nil {
				return err
			}
		}
	}
	return nil
}

// readBlob reads m's blob into m.Bare, checking its length and CRC.
func readBlob(r store.Reader, k ekey, m *partitionpb.StoredMessage) error {
	return store.ReadBlob(r, k, m)
}
