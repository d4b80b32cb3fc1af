package store

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/quorumbus/quorumbus/proto/partitionpb"
)

// TestSortEntries: Commit's order is by key, and writes to one key
// keep their batch order, whatever the mix of buckets and orders.
func TestSortEntries(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var s SortedCommit
	for round := range 200 {
		s.entries = s.entries[:0]
		for i := range rng.IntN(300) {
			var key []byte
			switch rng.IntN(4) {
			case 0: // a short key of its own
				key = []byte{byte(rng.IntN(3))}
			default:
				k := EntityKey{ID: uint64(rng.IntN(2)), Part: uint32(rng.IntN(2))}
				key = AppendSeqKey(nil, k, byte(1+rng.IntN(4)), partitionpb.SubQueue(rng.IntN(2)), uint64(rng.IntN(20)))
			}
			s.entries = append(s.entries, batchEntry{key: key, value: binary.BigEndian.AppendUint64(nil, uint64(i))})
		}
		s.sortEntries()
		if len(s.order) != len(s.entries) {
			t.Fatalf("round %d: %d in order, %d entries", round, len(s.order), len(s.entries))
		}
		seen := make([]bool, len(s.entries))
		for k, i := range s.order {
			if seen[i] {
				t.Fatalf("round %d: entry %d twice", round, i)
			}
			seen[i] = true
			if k == 0 {
				continue
			}
			prev, cur := s.entries[s.order[k-1]], s.entries[i]
			switch c := bytes.Compare(prev.key, cur.key); {
			case c > 0:
				t.Fatalf("round %d: %x before %x", round, prev.key, cur.key)
			case c == 0 && bytes.Compare(prev.value, cur.value) > 0:
				t.Fatalf("round %d: writes to %x out of batch order", round, cur.key)
			}
		}
	}
}

// BenchmarkSortEntries sorts batches of the two shapes a topic gives
// Commit: a send's copies, which go to ten subscriptions in turn (one
// bucket after another), and a drain's locks or settles, runs of a few
// dozen writes to one subscription's state records (the same bucket as the
// write before), each with its lock grant and request records.
func BenchmarkSortEntries(b *testing.B) {
	const subs = 10
	shapes := map[string]func(s *SortedCommit){
		"fanout": func(s *SortedCommit) {
			for seq := range uint64(100) {
				for sub := range uint64(subs) {
					key := AppendSeqKey(nil, EntityKey{ID: 2 + sub}, KindMessage, partitionpb.SubQueue_SUB_QUEUE_MAIN, seq)
					s.entries = append(s.entries, batchEntry{key: key})
				}
			}
		},
		"drain": func(s *SortedCommit) {
			for sub := range uint64(subs) {
				k := EntityKey{ID: 2 + sub}
				for seq := range uint64(50) { // a lock's rewrites or a settle's deletes
					s.entries = append(s.entries, batchEntry{key: AppendSeqKey(nil, k, KindMessage, partitionpb.SubQueue_SUB_QUEUE_MAIN, seq)})
				}
				s.entries = append(s.entries, batchEntry{key: AppendSeqKey(nil, k, KindLock, partitionpb.SubQueue_SUB_QUEUE_MAIN, 0)},
					batchEntry{key: []byte{0x03, byte(sub)}}, batchEntry{key: []byte{0x04, byte(sub)}})
			}
		},
	}
	for name, fill := range shapes {
		b.Run(name, func(b *testing.B) {
			var s SortedCommit
			fill(&s)
			b.ReportAllocs()
			for b.Loop() {
				s.sortEntries()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(s.entries)), "ns/entry")
		})
	}
}
