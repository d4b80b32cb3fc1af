package store

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

func filterID(i int) []byte { return binary.BigEndian.AppendUint64([]byte("req-"), uint64(i)) }

// The filter says "absent" only when the store certainly has no record of
// the id: never for an id it was given while a record of it may remain,
// never while records from before it started may remain, and for nearly
// every other id once those are gone.
func TestRequestFilter(t *testing.T) {
	db, err := pebble.Open("", &pebble.Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// A record from before the filter, applied at 500.
	if err := db.Set(RequestTimeKey(500, filterID(-1)), nil, nil); err != nil {
		t.Fatal(err)
	}
	f, err := NewRequestFilter(db)
	if err != nil {
		t.Fatal(err)
	}
	if f.preOpen != 500 {
		t.Fatalf("preOpen %d, want 500", f.preOpen)
	}
	for _, floor := range []int64{math.MinInt64, 400, 500} {
		if f.Absent(filterID(-1), floor) || f.Absent(filterID(7), floor) {
			t.Fatalf("absent with the store's oldest record at %d, at or before one from before the filter", floor)
		}
	}
	// Ids recorded at 1000-1999, in several generations.
	const n = 3 * genIDs
	for i := range n {
		f.Add(filterID(i), 1000+int64(i)*1000/n)
	}
	if len(f.gens) != 3 {
		t.Fatalf("%d generations, want 3", len(f.gens))
	}
	for i := range n {
		if f.Absent(filterID(i), 1000) {
			t.Fatalf("id %d recorded, but absent", i)
		}
	}
	miss := 0
	for i := n; i < 2*n; i++ {
		if !f.Absent(filterID(i), 1000) {
			miss++
		}
	}
	if miss > n/100 {
		t.Fatalf("%d of %d new ids read the store", miss, n)
	}
	// Pruned up to 1500: the first generation (1000-1333) goes, the ids of
	// the others stay present.
	f.Absent(filterID(0), 1500)
	if len(f.gens) != 2 {
		t.Fatalf("%d generations after pruning to 1500, want 2", len(f.gens))
	}
	for i := genIDs; i < n; i++ {
		if f.Absent(filterID(i), 1500) {
			t.Fatalf("id %d recorded in a kept generation, but absent", i)
		}
	}
	// Nothing left in the store.
	if !f.Absent(filterID(n-1), math.MaxInt64) || len(f.gens) != 0 {
		t.Fatalf("with no records left, %d generations remain", len(f.gens))
	}
}
