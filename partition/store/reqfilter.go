package store

import (
	"hash/maphash"
	"math"
)

// RequestFilter spares most request ids a read of the store.
//
// Every send and settle carries a request id, and applying one first looks
// the id up (partition's requestResult). The id is nearly always new, and a miss read
// the memtables and, in every level, an index and a data block of the
// table whose range held the random id, for every command on every
// replica. The filter holds every id recorded since the machine
// opened, in Bloom filters, so that an id it has not seen is known to be
// absent without a read.
//
// It answers "absent" only when that is certain:
//   - records written before the machine opened (or restored a snapshot)
//     are not in it, so it answers nothing until the store's oldest
//     request record is younger than the youngest of those (partition's reqFloor,
//     which pruning keeps, against preOpen);
//   - a generation is dropped only once every record it covers has been
//     pruned from the store, not merely expired: an expired record that
//     is still there must be found, so that PutRequestResult replaces it.
//
// A false positive costs the read it would have cost anyway. The filter
// is this replica's own: results and writes are the same with or without
// it.
type RequestFilter struct {
	seed    maphash.Seed
	preOpen int64 // youngest request record at open; MinInt64 if none
	gens    []*requestGen
}

// requestGen is one Bloom filter of up to genIDs ids; last is the latest
// time an id in it was recorded.
type requestGen struct {
	bits [genBits / 64]uint64
	n    int
	last int64
}

const (
	genIDs    = 1 << 15
	genBits   = 1 << 19 // 16 bits per id, 64 KiB per generation
	genProbes = 5       // about 0.14% false positives when full
)

// NewRequestFilter starts a filter for the store r as it is now.
func NewRequestFilter(r Reader) (*RequestFilter, error) {
	f := &RequestFilter{seed: maphash.MakeSeed(), preOpen: math.MinInt64}
	at, found, err := LatestRequest(r)
	if err != nil {
		return nil, err
	}
	if found {
		f.preOpen = at
	}
	return f, nil
}

func (f *RequestFilter) probes(id []byte) (h1, h2 uint32) {
	h := maphash.Bytes(f.seed, id)
	return uint32(h), uint32(h>>32) | 1
}

// Add notes id, recorded at time at.
func (f *RequestFilter) Add(id []byte, at int64) {
	if len(f.gens) == 0 || f.gens[len(f.gens)-1].n == genIDs {
		f.gens = append(f.gens, &requestGen{last: math.MinInt64})
	}
	g := f.gens[len(f.gens)-1]
	h1, h2 := f.probes(id)
	for i := range uint32(genProbes) {
		b := (h1 + i*h2) % genBits
		g.bits[b/64] |= 1 << (b % 64)
	}
	g.n++
	g.last = max(g.last, at)
}

// Absent reports whether id is certainly not recorded in the store, whose
// oldest request record is no older than floor. It also drops the
// generations whose records are all gone.
func (f *RequestFilter) Absent(id []byte, floor int64) bool {
	if floor <= f.preOpen {
		return false // records from before the filter may remain
	}
	kept := f.gens[:0]
	for _, g := range f.gens {
		if g.last >= floor { // else every record it covers is pruned
			kept = append(kept, g)
		}
	}
	clear(f.gens[len(kept):])
	f.gens = kept
	h1, h2 := f.probes(id)
gens:
	for _, g := range f.gens {
		for i := range uint32(genProbes) {
			b := (h1 + i*h2) % genBits
			if g.bits[b/64]&(1<<(b%64)) == 0 {
				continue gens
			}
		}
		return false // maybe in this generation
	}
	return true
}
