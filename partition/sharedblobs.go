package partition

import (
	"encoding/binary"
	"fmt"

	"github.com/quorumbus/quorumbus/partition/store"
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
//	0x02 topic eid(8) part(4) 0x1e blob(16)               copies naming the blob(8)
//	0x02 sub eid(8) part(4) 0x1f topic eid(8) blob(16)    copies of this subscription naming it(8)
//
// Invariants:
//   - a shared blob's chunks exist while its count does, and the count is
//     the sum of the subscriptions' counts, which is the number of their
//     messages that name it; the last copy removed deletes the blob;
//   - deleting a topic partition leaves its shared blobs and their counts
//     (its subscriptions' partitions, deleted by their own commands, may
//     still hold copies), and deletes everything else it holds.

// addCount adds delta to the count at key (absent: 0) and returns the new
// count; a count of 0 is deleted.
func (a *applier) addCount(key []byte, delta int64) (uint64, error) {
	p, found, err := store.Get(a.b, key)
	if err != nil {
		return 0, err
	}
	var n uint64
	if found {
		if len(p) != 8 {
			return 0, fmt.Errorf("%w: count %x of %d bytes", ErrCorrupt, key, len(p))
		}
		n = binary.BigEndian.Uint64(p)
	}
	if delta < 0 && n < uint64(-delta) {
		return 0, fmt.Errorf("%w: count %x of %d less %d", ErrCorrupt, key, n, -delta)
	}
	n = uint64(int64(n) + delta)
	if n == 0 {
		return 0, a.b.Delete(key, nil)
	}
	return n, a.b.Set(key, store.Seal(key, binary.BigEndian.AppendUint64(nil, n)), nil)
}

// shareBlob hands the staged blob of message nm, sent to topic partition
// t, to its copies (refs of them; addCopy made them name it), or deletes
// it when there are none.
func (a *applier) shareBlob(t *entity, nm *partitionpb.NewMessage, refs int) error {
	if refs == 0 {
		return a.dropBlob(t, nm.StagedBody)
	}
	if err := a.b.Delete(store.StagedKey(t.key, nm.StagedBody), nil); err != nil {
		return err
	}
	_, err := a.addCount(store.BlobRefsKey(t.key, nm.StagedBody), int64(refs))
	return err
}

// useSharedBlob makes copy m of subscription partition s name the staged
// blob of nm, sent to topic partition t.
func (a *applier) useSharedBlob(s, t *entity, nm *partitionpb.NewMessage, m *partitionpb.StoredMessage) error {
	m.BodyBlob, m.BodyBlobLength, m.BodyBlobCrc = nm.StagedBody, nm.StagedLength, nm.StagedCrc
	m.BodyBlobEntity = t.key.ID
	_, err := a.addCount(store.BlobUseKey(s.key, t.key.ID, nm.StagedBody), 1)
	return err
}

// releaseSharedBlob gives back n references of entity partition e to the
// blob of topic owner (same partition index), deleting the blob when they
// were the last. use says whether to count them off e's own count too (a
// deleted entity's go with it).
func (a *applier) releaseSharedBlob(e ekey, owner uint64, blob []byte, n int64, use bool) error {
	if use {
		if _, err := a.addCount(store.BlobUseKey(e, owner, blob), -n); err != nil {
			return err
		}
	}
	ok := ekey{ID: owner, Part: e.Part}
	left, err := a.addCount(store.BlobRefsKey(ok, blob), -n)
	if err != nil || left > 0 {
		return err
	}
	p := store.BlobPrefix(ok, blob)
	return a.b.DeleteRange(p, store.PrefixEnd(p), nil)
}

// releaseAllSharedBlobs gives back every reference entity partition e
// holds to shared blobs, before e is deleted.
func (a *applier) releaseAllSharedBlobs(e ekey) error {
	type use struct {
		owner uint64
		blob  []byte
		n     uint64
	}
	prefix := store.KindPrefix(e, store.KindBlobUse)
	it, err := store.PrefixIter(a.b, prefix)
	if err != nil {
		return err
	}
	var uses []use
	for valid := it.First(); valid; valid = it.Next() {
		v, err := store.IterValue(it)
		if err != nil {
			return store.CloseIter(it, err)
		}
		rest := it.Key()[len(prefix):]
		if len(rest) != 8+BlobIDBytes || len(v) != 8 {
			return store.CloseIter(it, fmt.Errorf("%w: shared blob use %x", ErrCorrupt, it.Key()))
		}
		uses = append(uses, use{binary.BigEndian.Uint64(rest), append([]byte(nil), rest[8:]...), binary.BigEndian.Uint64(v)})
	}
	if err := store.CloseIter(it, it.Error()); err != nil {
		return err
	}
	for _, u := range uses {
		if err := a.releaseSharedBlob(e, u.owner, u.blob, int64(u.n), false); err != nil {
			return err
		}
	}
	return nil
}

// deleteEntityData deletes everything entity partition e holds but the
// shared blobs its subscriptions' copies may still name, and gives back
// the references it holds to others'.
func (a *applier) deleteEntityData(e *entity) error {
	if err := a.releaseAllSharedBlobs(e.key); err != nil {
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
	prefix := store.KindPrefix(e.key, store.KindStaged)
	it, err := store.PrefixIter(a.b, prefix)
	if err != nil {
		return err
	}
	var blobs [][]byte
	for valid := it.First(); valid; valid = it.Next() {
		blobs = append(blobs, append([]byte(nil), it.Key()[len(prefix):]...))
	}
	if err := store.CloseIter(it, it.Error()); err != nil {
		return err
	}
	for _, b := range blobs {
		if err := a.dropBlob(e, b); err != nil {
			return err
		}
	}
	return nil
}
