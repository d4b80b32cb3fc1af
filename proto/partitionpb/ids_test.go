package partitionpb

import "testing"

func TestIDs(t *testing.T) {
	seq := SequenceNumber(7, 1<<48+5) // the counter wraps within its bits
	if seq != 7<<48|5 || PartitionOfSequence(seq) != 7 {
		t.Fatalf("sequence number %#x", seq)
	}
	tok := LockToken(seq, []byte{1, 2, 3, 4, 5, 6, 7, 8})
	if s, ok := SequenceOfToken(tok); !ok || s != seq || PartitionOfToken(tok) != 7 {
		t.Fatalf("token %x: sequence %#x %v, partition %d", tok, s, ok, PartitionOfToken(tok))
	}
	if _, ok := SequenceOfToken(tok[:15]); ok {
		t.Fatal("a short token read as one")
	}
	if PartitionOfToken(nil) != 0 {
		t.Fatal("an empty token has a partition")
	}
	// The hash is part of the contract: these must never change.
	for key, want := range map[string]uint32{"": 5, "order-1": 13, "session-a": 13} {
		if got := PartitionForKey(key, 16); got != want {
			t.Errorf("PartitionForKey(%q, 16) = %d, want %d", key, got, want)
		}
	}
	if PartitionForKey("x", 1) != 0 {
		t.Error("one partition: not 0")
	}
}
