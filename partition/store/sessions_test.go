package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

// FuzzSessionRecord: a session record decodes without panicking, or is
// refused as corrupt; one that decodes encodes back to a record that
// decodes to the same.
func FuzzSessionRecord(f *testing.F) {
	token := func(n uint64) []byte { // as partitiontest.SessionToken makes them
		return binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, n), n)
	}
	record := func(token []byte, until, avail, held, parked int64, readySeq uint64, updated int64, state []byte) []byte {
		r := &Session{Token: token, Until: until, Avail: avail, Held: held, Parked: parked, Ready: readySeq != 0, ReadySeq: readySeq, Updated: updated, State: state}
		return r.Encode()
	}
	f.Add(record(nil, 0, 0, 0, 0, 0, 0, nil))
	f.Add(record(token(3), 1234, 5, 2, 0, 0, 0, []byte("state")))
	f.Add(record(nil, 0, 7, 0, 0, 99, 0, nil))
	f.Add(record(token(4), 99, 1, 1, 3, 7, 1700000000000, []byte("v2")))
	f.Add(record(nil, 0, 0, 0, 2, 0, 0, nil))
	f.Add([]byte{1})
	f.Add([]byte{2, 0})
	reencode := func(p []byte) ([]byte, error) {
		r, err := DecodeSession([]byte("key"), p)
		if err != nil {
			return nil, err
		}
		return r.Encode(), nil
	}
	f.Fuzz(func(t *testing.T, p []byte) {
		again, err := reencode(p)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("not a corruption: %v", err)
			}
			return
		}
		twice, err := reencode(again)
		if err != nil || !bytes.Equal(again, twice) {
			t.Fatalf("re-encoded record %x decodes to %x, %v", again, twice, err)
		}
	})
}
