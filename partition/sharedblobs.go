package partition

import (
	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// Blobs shared by the copies of a message sent to a topic.
//
// A message over 1 MiB sent to a topic is staged in chunks under the
// topic partition (blobs.go), as one sent to a queue is under the queue.
// Its copies do not take the blob over one by one: it stays where it was
// written, stored once, and every copy names it (body_blob, and
// body_blob_entity for the topic: the copy's subscription partition has
// the topic partition's index). The topic counts the copies that name
// it; each subscription counts its own (a subscription may hold several
// copies of one message, one per matching rule), so that deleting a
// subscription gives its references back without reading its messages.
//
// The counts are the store's (store/blobs.go: ShareBlob, UseSharedBlob,
// ReleaseSharedBlob, kinds 0x1e and 0x1f).
//
// Invariants:
//   - a shared blob's chunks exist while its count does, and the count is
//     the sum of the subscriptions' counts, which is the number of their
//     messages that name it; the last copy removed deletes the blob;
//   - deleting a topic partition leaves its shared blobs and their counts
//     (its subscriptions' partitions, deleted by their own commands, may
//     still hold copies), and deletes everything else it holds.

// shareBlob hands the staged blob of message nm, sent to topic partition
// t, to its copies (refs of them; addCopy made them name it), or deletes
// it when there are none.
func (a *applier) shareBlob(t *entity, nm *partitionpb.NewMessage, refs int) error {
	return a.b.ShareBlob(t.key, nm.StagedBody, refs)
}

// useSharedBlob makes copy m of subscription partition s name the staged
// blob of nm, sent to topic partition t.
func (a *applier) useSharedBlob(s, t *entity, nm *partitionpb.NewMessage, m *partitionpb.StoredMessage) error {
	m.BodyBlob, m.BodyBlobLength, m.BodyBlobCrc = nm.StagedBody, nm.StagedLength, nm.StagedCrc
	m.BodyBlobEntity = t.key.ID
	return a.b.UseSharedBlob(s.key, t.key.ID, nm.StagedBody)
}

// deleteEntityData deletes everything entity partition e holds but the
// shared blobs its subscriptions' copies may still name, and gives back
// the references it holds to others'.
func (a *applier) deleteEntityData(e *entity) error {
	if err := a.b.ReleaseAllSharedBlobs(e.key); err != nil {
		return err
	}
	if !isTopic(e.cfg) {
		return a.b.DeleteEntityData(e.key, false)
	}
	// Blobs staged and not taken over go; the shared ones (and only they
	// are left under store.KindBlob then) stay with their counts.
	if err := a.dropAllStaged(e); err != nil {
		return err
	}
	return a.b.DeleteEntityData(e.key, true)
}

// dropAllStaged deletes the blobs of e that no message took over.
func (a *applier) dropAllStaged(e *entity) error {
	blobs, err := a.b.StagedBlobs(e.key)
	if err != nil {
		return err
	}
	for _, b := range blobs {
		if err := a.dropBlob(e, b); err != nil {
			return err
		}
	}
	return nil
}
