package store

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"

	"github.com/cockroachdb/pebble/v2"

	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// Staged blobs: bare messages staged in chunks before the Enqueue that
// names them (partition's blobs.go has the rules), and the blobs a
// topic's copies share, counted (partition's sharedblobs.go). Chunks,
// staged records and counts all live under their entity partition's
// prefix (doc.go: kinds 0x09, 0x0a, 0x1e, 0x1f).

// BlobIDBytes is the length of a blob id.
const BlobIDBytes = 16

// Staged is a staged record: when its last chunk was applied, and how
// many bytes the blob's chunks hold.
type Staged struct {
	At       int64
	Received uint64
}

func (s Staged) encode() []byte {
	b := binary.BigEndian.AppendUint64(make([]byte, 0, 16), TimeBits(s.At))
	return binary.BigEndian.AppendUint64(b, s.Received)
}

func decodeStaged(key, p []byte) (Staged, error) {
	if len(p) != 16 {
		return Staged{}, fmt.Errorf("%w: staged record %x of %d bytes", ErrCorrupt, key, len(p))
	}
	return Staged{TimeFromBits(binary.BigEndian.Uint64(p)), binary.BigEndian.Uint64(p[8:])}, nil
}

// Staged returns the staged record of blob; found is false when there is
// none (never staged, taken over by a message, or deleted).
func (b *Batch) Staged(k EntityKey, blob []byte) (s Staged, found bool, err error) {
	key := StagedKey(k, blob)
	p, found, err := Get(b.pb, key)
	if err != nil || !found {
		return Staged{}, false, err
	}
	s, err = decodeStaged(key, p)
	return s, err == nil, err
}

// PutStaged writes the staged record of blob.
func (b *Batch) PutStaged(k EntityKey, blob []byte, s Staged) error {
	key := StagedKey(k, blob)
	return b.pb.Set(key, Seal(key, s.encode()), nil)
}

// DeleteStaged deletes the staged record of blob (a message took it over).
func (b *Batch) DeleteStaged(k EntityKey, blob []byte) error {
	return b.pb.Delete(StagedKey(k, blob), nil)
}

// HasChunk reports whether blob has a chunk at offset.
func (b *Batch) HasChunk(k EntityKey, blob []byte, offset uint64) (bool, error) {
	_, found, err := Get(b.pb, BlobChunkKey(k, blob, offset))
	return found, err
}

// PutChunk writes the chunk of blob at offset.
func (b *Batch) PutChunk(k EntityKey, blob []byte, offset uint64, data []byte) error {
	return SetSealed(b.pb, BlobChunkKey(k, blob, offset), data)
}

// StaleStaged returns up to max blobs of k, other than keep, whose last
// chunk came more than window ms before now, in key order.
func (b *Batch) StaleStaged(k EntityKey, keep []byte, now, window int64, max int) ([][]byte, error) {
	p := KindPrefix(k, KindStaged)
	it, err := PrefixIter(b.pb, p)
	if err != nil {
		return nil, err
	}
	var stale [][]byte
	for valid := it.First(); valid && len(stale) < max; valid = it.Next() {
		v, err := IterValue(it)
		if err != nil {
			return nil, CloseIter(it, err)
		}
		s, err := decodeStaged(it.Key(), v)
		if err != nil {
			return nil, CloseIter(it, err)
		}
		blob := it.Key()[len(p):]
		if now-s.At > window && !bytes.Equal(blob, keep) {
			stale = append(stale, append([]byte(nil), blob...))
		}
	}
	return stale, CloseIter(it, it.Error())
}

// StagedBlobs returns every blob of k that has a staged record.
func (b *Batch) StagedBlobs(k EntityKey) ([][]byte, error) {
	prefix := KindPrefix(k, KindStaged)
	it, err := PrefixIter(b.pb, prefix)
	if err != nil {
		return nil, err
	}
	var blobs [][]byte
	for valid := it.First(); valid; valid = it.Next() {
		blobs = append(blobs, append([]byte(nil), it.Key()[len(prefix):]...))
	}
	return blobs, CloseIter(it, it.Error())
}

// DeleteBlob deletes a blob's chunks and its staged record, if any.
func (b *Batch) DeleteBlob(k EntityKey, blob []byte) error {
	p := BlobPrefix(k, blob)
	if err := b.pb.DeleteRange(p, PrefixEnd(p), nil); err != nil {
		return err
	}
	return b.pb.Delete(StagedKey(k, blob), nil)
}

// ReadBlob reads m's blob into m.Bare, checking its length and CRC. The
// blob is k's, or, for a copy of a topic's message (m.BodyBlobEntity),
// the topic partition's of the same index.
func ReadBlob(r pebble.Reader, k EntityKey, m *partitionpb.StoredMessage) error {
	if m.BodyBlobEntity != 0 { // a topic's, shared
		k = EntityKey{ID: m.BodyBlobEntity, Part: k.Part}
	}
	p := BlobPrefix(k, m.BodyBlob)
	it, err := PrefixIter(r, p)
	if err != nil {
		return err
	}
	bare := make([]byte, 0, m.BodyBlobLength)
	for valid := it.First(); valid; valid = it.Next() {
		v, err := IterValue(it)
		if err != nil {
			return CloseIter(it, err)
		}
		if off := binary.BigEndian.Uint64(it.Key()[len(p):]); off != uint64(len(bare)) || uint64(len(bare)+len(v)) > m.BodyBlobLength {
			return CloseIter(it, fmt.Errorf("%w: blob %x of message %d of %s: chunk at %d after %d bytes", ErrCorrupt, m.BodyBlob, m.SequenceNumber, k, off, len(bare)))
		}
		bare = append(bare, v...)
	}
	if err := CloseIter(it, it.Error()); err != nil {
		return err
	}
	if uint64(len(bare)) != m.BodyBlobLength || crc32.Checksum(bare, castagnoli) != m.BodyBlobCrc {
		return fmt.Errorf("%w: blob %x of message %d of %s: %d bytes of %d, or its CRC differs", ErrCorrupt, m.BodyBlob, m.SequenceNumber, k, len(bare), m.BodyBlobLength)
	}
	m.Bare = bare
	return nil
}

// ReadBlobPrefix reads the first n bytes of m's blob (all of it when it
// is shorter) into m.Bare, from the chunks that hold them, for a preview
// (a peek's body_prefix_bytes) of a message of up to 100 MB. The chunks
// read must tile the prefix; the CRC covers the whole blob and is checked
// only by ReadBlob.
func ReadBlobPrefix(r pebble.Reader, k EntityKey, m *partitionpb.StoredMessage, n uint64) error {
	if n >= m.BodyBlobLength {
		return ReadBlob(r, k, m)
	}
	if m.BodyBlobEntity != 0 { // a topic's, shared
		k = EntityKey{ID: m.BodyBlobEntity, Part: k.Part}
	}
	p := BlobPrefix(k, m.BodyBlob)
	it, err := PrefixIter(r, p)
	if err != nil {
		return err
	}
	bare := make([]byte, 0, n)
	for valid := it.First(); valid && uint64(len(bare)) < n; valid = it.Next() {
		v, err := IterValue(it)
		if err != nil {
			return CloseIter(it, err)
		}
		if off := binary.BigEndian.Uint64(it.Key()[len(p):]); off != uint64(len(bare)) || uint64(len(bare)+len(v)) > m.BodyBlobLength {
			return CloseIter(it, fmt.Errorf("%w: blob %x of message %d of %s: chunk at %d after %d bytes", ErrCorrupt, m.BodyBlob, m.SequenceNumber, k, off, len(bare)))
		}
		bare = append(bare, v[:min(uint64(len(v)), n-uint64(len(bare)))]...)
	}
	if err := CloseIter(it, it.Error()); err != nil {
		return err
	}
	if uint64(len(bare)) != n {
		return fmt.Errorf("%w: blob %x of message %d of %s: %d bytes of %d", ErrCorrupt, m.BodyBlob, m.SequenceNumber, k, len(bare), m.BodyBlobLength)
	}
	m.Bare = bare
	return nil
}

// Shared blobs. Invariants:
//   - a shared blob's chunks exist while its count does, and the count is
//     the sum of the subscriptions' counts, which is the number of their
//     messages that name it; the last copy removed deletes the blob;
//   - deleting a topic partition leaves its shared blobs and their counts
//     (DeleteEntityData with shared), and deletes everything else it holds.

// addCount adds delta to the count at key (absent: 0) and returns the new
// count; a count of 0 is deleted.
func (b *Batch) addCount(key []byte, delta int64) (uint64, error) {
	p, found, err := Get(b.pb, key)
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
		return 0, b.pb.Delete(key, nil)
	}
	return n, b.pb.Set(key, Seal(key, binary.BigEndian.AppendUint64(nil, n)), nil)
}

// ShareBlob hands the staged blob of topic partition t to refs copies of
// its message (which name it), or deletes it when there are none.
func (b *Batch) ShareBlob(t EntityKey, blob []byte, refs int) error {
	if refs == 0 {
		return b.DeleteBlob(t, blob)
	}
	if err := b.DeleteStaged(t, blob); err != nil {
		return err
	}
	_, err := b.addCount(BlobRefsKey(t, blob), int64(refs))
	return err
}

// ShareBody keeps bare, the bare message of a message sent to topic
// partition t, once for its refs copies, as blob blob of t (one chunk),
// counted as ShareBlob counts a staged blob; each copy counts itself with
// UseSharedBlob. RewriteMessages writes the same records when copies'
// bodies leave the Raft log.
func (b *Batch) ShareBody(t EntityKey, blob, bare []byte, refs int) error {
	if err := b.PutChunk(t, blob, 0, bare); err != nil {
		return err
	}
	_, err := b.addCount(BlobRefsKey(t, blob), int64(refs))
	return err
}

// UseSharedBlob counts one more copy of subscription partition s naming
// the blob of topic (same partition index).
func (b *Batch) UseSharedBlob(s EntityKey, topic uint64, blob []byte) error {
	_, err := b.addCount(BlobUseKey(s, topic, blob), 1)
	return err
}

// ReleaseSharedBlob gives back n references of entity partition e to the
// blob of topic owner (same partition index), deleting the blob when they
// were the last. use says whether to count them off e's own count too (a
// deleted entity's go with it).
func (b *Batch) ReleaseSharedBlob(e EntityKey, owner uint64, blob []byte, n int64, use bool) error {
	if use {
		if _, err := b.addCount(BlobUseKey(e, owner, blob), -n); err != nil {
			return err
		}
	}
	ok := EntityKey{ID: owner, Part: e.Part}
	left, err := b.addCount(BlobRefsKey(ok, blob), -n)
	if err != nil || left > 0 {
		return err
	}
	p := BlobPrefix(ok, blob)
	return b.pb.DeleteRange(p, PrefixEnd(p), nil)
}

// ReleaseAllSharedBlobs gives back every reference entity partition e
// holds to shared blobs, before e is deleted.
func (b *Batch) ReleaseAllSharedBlobs(e EntityKey) error {
	type use struct {
		owner uint64
		blob  []byte
		n     uint64
	}
	prefix := KindPrefix(e, KindBlobUse)
	it, err := PrefixIter(b.pb, prefix)
	if err != nil {
		return err
	}
	var uses []use
	for valid := it.First(); valid; valid = it.Next() {
		v, err := IterValue(it)
		if err != nil {
			return CloseIter(it, err)
		}
		rest := it.Key()[len(prefix):]
		if len(rest) != 8+BlobIDBytes || len(v) != 8 {
			return CloseIter(it, fmt.Errorf("%w: shared blob use %x", ErrCorrupt, it.Key()))
		}
		uses = append(uses, use{binary.BigEndian.Uint64(rest), append([]byte(nil), rest[8:]...), binary.BigEndian.Uint64(v)})
	}
	if err := CloseIter(it, it.Error()); err != nil {
		return err
	}
	for _, u := range uses {
		if err := b.ReleaseSharedBlob(e, u.owner, u.blob, int64(u.n), false); err != nil {
			return err
		}
	}
	return nil
}
