package node

import (
	"testing"
	"time"
)

// TestProposerSharesSlotsBeyondFirst: a group's first entry in flight
// needs no slot of the node's pool, however busy the node's other groups
// are; each further one takes a shared slot, at most maxInFlight in all,
// and waits, gathering, while the pool is empty.
func TestProposerSharesSlotsBeyondFirst(t *testing.T) {
	n := &Node{sharedSlots: make(chan struct{}, sharedInFlight)}
	a := newProposer(&group{node: n, id: 1})
	b := newProposer(&group{node: n, id: 2})
	never := func() bool { return false }
	take := func(p *proposer) bool {
		shared, ok := p.awaitSlot(func(*proposal) { t.Fatal("nothing was queued") }, never)
		if !ok {
			t.Fatal("awaitSlot: stopped")
		}
		return shared
	}

	// Group a fills its slots: the first of its own, the rest shared.
	var aShared []bool
	for range maxInFlight {
		aShared = append(aShared, take(a))
	}
	if aShared[0] || !aShared[1] || !aShared[maxInFlight-1] {
		t.Fatalf("group a's slots shared: %v, want all but the first", aShared)
	}
	if got := len(n.sharedSlots); got != min(maxInFlight-1, sharedInFlight) {
		t.Fatalf("shared slots taken: %d", got)
	}
	// The pool is empty now: group b's first entry still goes out.
	if take(b) {
		t.Fatal("group b's first entry took a shared slot")
	}

	// b's second waits for the pool, and takes in what arrives meanwhile.
	got := make(chan bool, 1)
	gathered := make(chan *proposal, 1)
	go func() {
		shared, _ := b.awaitSlot(func(pr *proposal) { gathered <- pr }, never)
		got <- shared
	}()
	pr := &proposal{}
	b.in <- pr
	select {
	case g := <-gathered:
		if g != pr {
			t.Fatal("gathered another request")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a request sent while waiting for a slot was not gathered")
	}
	select {
	case <-got:
		t.Fatal("group b's second entry went out with the pool empty")
	case <-time.After(50 * time.Millisecond):
	}
	a.release(true) // one of a's shared entries is answered
	select {
	case shared := <-got:
		if !shared {
			t.Fatal("group b's second entry did not take the freed shared slot")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("group b's second entry did not go out once a shared slot was freed")
	}

	// A group at maxInFlight waits for its own entries, not the pool.
	a.release(true) // a at maxInFlight-2 now, one shared slot free
	if !take(a) {
		t.Fatal("group a's entry below maxInFlight did not take the free shared slot")
	}
	// When every one of a's entries is answered (its own and two
	// shared), its next is its first again.
	a.release(true)
	a.release(true)
	a.release(false)
	if take(a) {
		t.Fatal("group a's entry with none in flight took a shared slot")
	}

	// Stopping ends a wait (b at maxInFlight now).
	take(b)
	take(b)
	b.stop(ErrGroupClosed)
	if _, ok := b.awaitSlot(func(*proposal) {}, never); ok {
		t.Fatal("awaitSlot after stop: ok")
	}
	// A stopped group gives its shared slots back (raft may never answer
	// its entries), and an entry answered late gives back nothing more.
	held := len(n.sharedSlots)
	b.drain(nil)
	if got := len(n.sharedSlots); got != held-(maxInFlight-1) {
		t.Fatalf("shared slots taken after group b stopped: %d, want %d", got, held-(maxInFlight-1))
	}
	done := make(chan struct{})
	go func() { b.release(true); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("a late release of a stopped group blocked")
	}
	if got := len(n.sharedSlots); got != held-(maxInFlight-1) {
		t.Fatalf("shared slots taken after a late release: %d", got)
	}
}
