package frontend

import (
	"testing"
)

func allServe(uint32) bool { return true }

// TestUnkeyedCursorRoundRobinAlone: a request that finds nothing of the
// front-end in flight at the cursor's partition goes to the next one, so
// that one synchronous sender goes round-robin, request by request, as
// before the cursor was shared.
func TestUnkeyedCursorRoundRobinAlone(t *testing.T) {
	const n = 16
	var c unkeyedCursor
	first := c.pick(n, 100, allServe)
	c.done(first, 100)
	seen := map[uint32]bool{first: true}
	prev := first
	for range n - 1 {
		p := c.pick(n, 100, allServe)
		c.done(p, 100)
		if want := (prev + 1) % n; p != want {
			t.Fatalf("a lone request after one to %d went to %d, want %d", prev, p, want)
		}
		seen[p], prev = true, p
	}
	if len(seen) != n {
		t.Fatalf("%d lone requests reached %d partitions, want %d", n, len(seen), n)
	}
}

// TestUnkeyedCursorConcurrentMeet: requests that find one of the
// front-end's in flight at the cursor's partition join it there, whatever
// link sends them, until the cursor stayed unkeyedStayBytes, and then
// the cursor moves on to the next partition.
func TestUnkeyedCursorConcurrentMeet(t *testing.T) {
	const n, size = 16, 64 << 10
	var c unkeyedCursor
	at := c.pick(n, size, allServe) // in flight throughout
	sent := size
	for sent < unkeyedStayBytes {
		p := c.pick(n, size, allServe)
		if p != at {
			t.Fatalf("after %d bytes at %d with a request in flight there, a request went to %d", sent, at, p)
		}
		c.done(p, size) // a request ends; the first one is still in flight
		sent += size
	}
	if p := c.pick(n, size, allServe); p != (at+1)%n {
		t.Fatalf("after %d bytes at %d, a request went to %d, want %d", sent, at, p, (at+1)%n)
	}
}

// TestUnkeyedCursorSpills: once the front-end has unkeyedSpillBytes in
// flight at the cursor's partition (more than its group's entries in
// flight carry), the next request goes to the next partition, and what
// ends at the old one is counted there.
func TestUnkeyedCursorSpills(t *testing.T) {
	const n, size = 8, 1 << 20
	var c unkeyedCursor
	at := c.pick(n, size, allServe)
	for inFlight := size; inFlight < unkeyedSpillBytes; inFlight += size {
		if p := c.pick(n, size, allServe); p != at {
			t.Fatalf("with %d bytes in flight at %d, a request went to %d", inFlight, at, p)
		}
	}
	next := c.pick(n, size, allServe)
	if next != (at+1)%n {
		t.Fatalf("with %d bytes in flight at %d, a request went to %d, want %d", unkeyedSpillBytes, at, next, (at+1)%n)
	}
	for range unkeyedSpillBytes / size {
		c.done(at, size)
	}
	if f := c.flight[at]; f != (unkeyedFlight{}) {
		t.Fatalf("partition %d has %+v in flight after its requests ended", at, f)
	}
	if p := c.pick(n, size, allServe); p != next {
		t.Fatalf("a request while one was in flight at %d went to %d", next, p)
	}
}

// TestUnkeyedCursorPassesOverPartitionsThatDoNotServe: the cursor leaves a
// partition whose group stopped serving even with requests in flight
// there, and skips those that do not serve, unless none does.
func TestUnkeyedCursorPassesOverPartitionsThatDoNotServe(t *testing.T) {
	const n = 4
	down := map[uint32]bool{}
	serving := func(p uint32) bool { return !down[p] }
	var c unkeyedCursor
	at := c.pick(n, 1, serving) // stays in flight
	down[at], down[(at+1)%n] = true, true
	if p := c.pick(n, 1, serving); p != (at+2)%n {
		t.Fatalf("with %d and %d down, a request went to %d, want %d", at, (at+1)%n, p, (at+2)%n)
	}
	for p := range uint32(n) {
		down[p] = true
	}
	if p := c.pick(n, 1, serving); p != (at+3)%n {
		t.Fatalf("with none serving, a request went to %d, want the next, %d", p, (at+3)%n)
	}
}

// TestUnkeyedCursorStartsAnywhere: cursors start at random partitions, so
// that front-ends sending to one entity are on different groups.
func TestUnkeyedCursorStartsAnywhere(t *testing.T) {
	starts := map[uint32]bool{}
	for range 64 {
		var c unkeyedCursor
		starts[c.pick(16, 1, allServe)] = true
	}
	if len(starts) < 4 {
		t.Fatalf("64 cursors started at %d partitions", len(starts))
	}
}

// TestUnkeyedCursorEntityMadeAnew: an entity deleted and made again with
// fewer partitions gets partitions of its own count, and requests of the
// old one that end are ignored.
func TestUnkeyedCursorEntityMadeAnew(t *testing.T) {
	var c unkeyedCursor
	for range 20 {
		c.pick(16, 1, allServe)
	}
	for range 20 {
		if p := c.pick(2, 1, allServe); p >= 2 {
			t.Fatalf("a request to an entity of 2 partitions went to %d", p)
		}
	}
	c.done(15, 1)
}
