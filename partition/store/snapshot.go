package store

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"

	"github.com/cockroachdb/pebble/v2"
)

// A snapshot stream is the store, key by key in order:
//
//	magic    "qbsnap" 0x00 0x01
//	record*  uvarint(len key) uvarint(len value) key value crc32c(all before, of this record)
//	trailer  0x00 applied(8) records(8) crc32c(the trailer before it)
//
// Values are the stored (sealed) values, so Restore checks each twice: the
// record's checksum covers the transfer, the value's own the store. Keys are
// never empty, so a zero key length starts the trailer.
var snapshotMagic = []byte("qbsnap\x00\x01")

const (
	maxSnapshotKey   = 1 << 10
	maxSnapshotValue = 1 << 30
	// BatchBytes bounds the batches that write many records at once
	// (LoadSnapshot, RewriteMessages).
	BatchBytes = 4 << 20
)

// ErrBadSnapshot is a snapshot stream that does not decode or check.
// partition.ErrBadSnapshot is this error.
var ErrBadSnapshot = errors.New("partition: bad snapshot")

// WriteSnapshot streams snap, the store as of applied index applied, to
// w. It verifies every stored record on the way and fails on a mismatch
// rather than pass corruption on.
func WriteSnapshot(snap *Snapshot, applied uint64, w io.Writer) (int64, error) {
	cw := &countWriter{w: w}
	bw := bufio.NewWriterSize(cw, 256<<10)
	bw.Write(snapshotMagic) // errors surface at Flush
	it, err := snap.s.NewIter(nil)
	if err != nil {
		return 0, fmt.Errorf("partition: snapshot iterator: %w", err)
	}
	var records uint64
	var hdr []byte
	for valid := it.First(); valid; valid = it.Next() {
		k := it.Key()
		v, err := it.ValueAndErr()
		if err != nil {
			return cw.n, CloseIter(it, fmt.Errorf("partition: snapshot read %x: %w", k, err))
		}
		if _, err := Unseal(k, v); err != nil {
			return cw.n, CloseIter(it, err)
		}
		hdr = binary.AppendUvarint(hdr[:0], uint64(len(k)))
		hdr = binary.AppendUvarint(hdr, uint64(len(v)))
		crc := crc32.Update(crc32.Update(crc32.Checksum(hdr, castagnoli), castagnoli, k), castagnoli, v)
		bw.Write(hdr)
		bw.Write(k)
		bw.Write(v)
		if _, err := bw.Write(binary.BigEndian.AppendUint32(hdr[:0], crc)); err != nil {
			return cw.n, CloseIter(it, fmt.Errorf("partition: write snapshot: %w", err))
		}
		records++
	}
	if err := CloseIter(it, it.Error()); err != nil {
		return cw.n, err
	}
	bw.Write(trailer(applied, records))
	if err := bw.Flush(); err != nil {
		return cw.n, fmt.Errorf("partition: write snapshot: %w", err)
	}
	return cw.n, nil
}

func trailer(applied, records uint64) []byte {
	t := []byte{0}
	t = binary.BigEndian.AppendUint64(t, applied)
	t = binary.BigEndian.AppendUint64(t, records)
	return binary.BigEndian.AppendUint32(t, crc32.Checksum(t, castagnoli))
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// LoadSnapshot writes a snapshot stream into a new store, which open
// opens once the stream's magic is checked, and flushes it. It checks
// every record's checksum and its value's seal, the keys' order, the
// trailer, the store's format and that the applied index it holds is the
// trailer's; every error about the stream is ErrBadSnapshot.
func LoadSnapshot(open func() (*DB, error), r io.Reader) (err error) {
	sr, err := newSnapshotReader(r)
	if err != nil {
		return err
	}
	db, err := open()
	if err != nil {
		return err
	}
	defer func() {
		if cerr := db.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("partition: restore: close: %w", cerr)
		}
	}()
	b := db.pb.NewBatch()
	defer func() { b.Close() }()
	for {
		k, v, more, err := sr.next()
		if err != nil {
			return err
		}
		if !more {
			break
		}
		if err := b.Set(k, v, nil); err != nil {
			return fmt.Errorf("partition: restore: %w", err)
		}
		if b.Len() >= BatchBytes {
			if err := b.Commit(pebble.NoSync); err != nil {
				return fmt.Errorf("partition: restore: %w", err)
			}
			b.Close()
			b = db.pb.NewBatch()
		}
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		return fmt.Errorf("partition: restore: %w", err)
	}
	if err := CheckFormat(db); err != nil {
		return fmt.Errorf("%w: %w", ErrBadSnapshot, err)
	}
	stored, err := ReadApplied(db)
	if err != nil {
		return err
	}
	if stored != sr.applied {
		return fmt.Errorf("%w: store applied index %d, trailer %d", ErrBadSnapshot, stored, sr.applied)
	}
	if err := db.Flush(); err != nil {
		return fmt.Errorf("partition: restore: flush: %w", err)
	}
	return nil
}

// ReadSnapshot decodes a snapshot stream without a store and returns its
// record count and applied index.
func ReadSnapshot(r io.Reader) (records int, applied uint64, err error) {
	sr, err := newSnapshotReader(r)
	if err != nil {
		return 0, 0, err
	}
	for {
		_, _, more, err := sr.next()
		if err != nil {
			return records, 0, err
		}
		if !more {
			return records, sr.applied, nil
		}
		records++
	}
}

// snapshotReader decodes a snapshot stream and checks all it can without
// a store: checksums of records and values, key order, the trailer. Every
// error it returns is ErrBadSnapshot.
type snapshotReader struct {
	br      *bufio.Reader
	records uint64
	prev    []byte
	buf     bytes.Buffer
	applied uint64 // from the trailer, once next said there is no more
}

func newSnapshotReader(r io.Reader) (*snapshotReader, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	magic := make([]byte, len(snapshotMagic))
	if _, err := io.ReadFull(br, magic); err != nil || !bytes.Equal(magic, snapshotMagic) {
		return nil, fmt.Errorf("%w: not a snapshot (magic %x)", ErrBadSnapshot, magic)
	}
	return &snapshotReader{br: br}, nil
}

// next returns the next record, which stays valid until the next call, or
// more == false after a good trailer at the end of the stream.
func (s *snapshotReader) next() (k, v []byte, more bool, err error) {
	rec := recordReader{r: s.br}
	klen := rec.uvarint()
	if rec.err == nil && klen == 0 {
		return nil, nil, false, s.trailer()
	}
	vlen := rec.uvarint()
	if rec.err == nil && (klen > maxSnapshotKey || vlen > maxSnapshotValue) {
		return nil, nil, false, fmt.Errorf("%w: record %d: key of %d bytes, value of %d", ErrBadSnapshot, s.records, klen, vlen)
	}
	kv := rec.read(&s.buf, klen+vlen)
	crc := rec.crc
	var sum [CRCLen]byte
	if rec.err == nil {
		_, err := io.ReadFull(s.br, sum[:])
		rec.err = noEOF(err)
	}
	if rec.err != nil {
		return nil, nil, false, fmt.Errorf("%w: record %d: %v", ErrBadSnapshot, s.records, rec.err)
	}
	if binary.BigEndian.Uint32(sum[:]) != crc {
		return nil, nil, false, fmt.Errorf("%w: record %d: %w", ErrBadSnapshot, s.records, ErrCorrupt)
	}
	k, v = kv[:klen], kv[klen:]
	if _, err := Unseal(k, v); err != nil {
		return nil, nil, false, fmt.Errorf("%w: record %d: %w", ErrBadSnapshot, s.records, err)
	}
	if s.records > 0 && bytes.Compare(s.prev, k) >= 0 {
		return nil, nil, false, fmt.Errorf("%w: record %d: keys out of order", ErrBadSnapshot, s.records)
	}
	s.prev = append(s.prev[:0], k...)
	s.records++
	return k, v, true, nil
}

// trailer reads and checks the trailer after its first byte.
func (s *snapshotReader) trailer() error {
	t := make([]byte, 8+8+CRCLen)
	if _, err := io.ReadFull(s.br, t); err != nil {
		return fmt.Errorf("%w: trailer: %v", ErrBadSnapshot, err)
	}
	applied, n := binary.BigEndian.Uint64(t), binary.BigEndian.Uint64(t[8:])
	if !bytes.Equal(trailer(applied, n), append([]byte{0}, t...)) {
		return fmt.Errorf("%w: trailer: %w", ErrBadSnapshot, ErrCorrupt)
	}
	if n != s.records {
		return fmt.Errorf("%w: %d records, the trailer says %d", ErrBadSnapshot, s.records, n)
	}
	if _, err := s.br.ReadByte(); err != io.EOF {
		return fmt.Errorf("%w: data after the trailer", ErrBadSnapshot)
	}
	s.applied = applied
	return nil
}

// recordReader reads one record, keeping its running checksum and the
// first error.
type recordReader struct {
	r   *bufio.Reader
	crc uint32
	err error
}

var errTooLong = errors.New("varint too long")

func (rr *recordReader) uvarint() uint64 {
	if rr.err != nil {
		return 0
	}
	var b [binary.MaxVarintLen64]byte
	for i := range b {
		c, err := rr.r.ReadByte()
		if err != nil {
			rr.err = noEOF(err)
			return 0
		}
		b[i] = c
		if c < 0x80 {
			rr.crc = crc32.Update(rr.crc, castagnoli, b[:i+1])
			v, n := binary.Uvarint(b[:i+1])
			if n <= 0 {
				rr.err = errTooLong
				return 0
			}
			return v
		}
	}
	rr.err = errTooLong
	return 0
}

// read reads n bytes into buf, which grows with what actually arrives (a
// corrupt length must not allocate what it claims), and returns them.
func (rr *recordReader) read(buf *bytes.Buffer, n uint64) []byte {
	buf.Reset()
	if rr.err != nil {
		return nil
	}
	if _, err := io.CopyN(buf, rr.r, int64(n)); err != nil {
		rr.err = noEOF(err)
		return nil
	}
	rr.crc = crc32.Update(rr.crc, castagnoli, buf.Bytes())
	return buf.Bytes()
}

func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
