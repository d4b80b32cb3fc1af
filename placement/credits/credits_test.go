package credits

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// The front-end's tests (frontend/throttle_test.go) check the budget as
// it serves AMQP; these check what the front-end and the gateway share.
// Inside a synctest bubble time.Now is virtual and starts on a whole
// second, so the tests sleep across second boundaries exactly.

// TestBucket: a second's share is spent and refused past it, counted
// per entity; an operation costing more than is left passes once and is
// paid back; idle seconds pile nothing up; the share follows Share.
func TestBucket(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		share := 1.0
		b := New(Config{Budget: 100, Share: func() float64 { return share }})
		for i := range 10 {
			if !b.Take("q", Management) {
				t.Fatalf("management operation %d of the first 10 refused", i)
			}
		}
		if b.Take("q", Message) || b.Take("t", Management) {
			t.Fatal("past the budget, not refused")
		}
		time.Sleep(time.Second)
		if !b.Take("q", 250) {
			t.Fatal("an operation larger than the budget never passes")
		}
		time.Sleep(time.Second)
		if b.Take("q", Message) { // 100 - 250 + 100 = -50
			t.Fatal("the debt was not paid back")
		}
		time.Sleep(time.Hour)
		if !b.Take("q", 100) || b.Take("q", Message) {
			t.Fatal("an idle hour piled credits up")
		}
		share = 0.25
		time.Sleep(time.Second)
		if got := b.PerSecond(); got != 25 {
			t.Fatalf("a share of 4 spends %d a second, want 25", got)
		}
		passed := 0
		for b.Take("q", Management) {
			passed++
		}
		if passed != 3 { // 25 credits: 10, 10, 10 (the last one in debt)
			t.Fatalf("a quarter of 100 credits passed %d management operations, want 3", passed)
		}
		b.Count("q") // refused for a reason of the caller's
		if got := b.Throttled(); got["q"] != 5 || got["t"] != 1 || len(got) != 2 {
			t.Fatalf("throttled counts %v, want q: 5, t: 1", got)
		}
	})
}

// TestBucketWait: a wait past the budget ends when the next second's
// credits arrive, counted once; a wait its context ends returns the
// context's error.
func TestBucketWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := New(Config{Budget: 10})
		time.Sleep(300 * time.Millisecond)
		b.Charge(10)
		start := time.Now()
		if err := b.Wait(t.Context(), "q"); err != nil {
			t.Fatal(err)
		}
		if waited := time.Since(start); waited != 700*time.Millisecond {
			t.Fatalf("waited %v for the next second, want 700ms", waited)
		}
		b.Charge(10)
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		defer cancel()
		if err := b.Wait(ctx, "q"); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("a wait its context ended: %v", err)
		}
		if got := b.Throttled()["q"]; got != 2 {
			t.Fatalf("%d waits counted, want 2", got)
		}
	})
}

// TestBucketClock: the bucket counts seconds by the clock it is given,
// not the process's: a clock that stands still refills nothing, one
// that moves a second refills a second's share, one that steps back
// starts a fresh second instead of running the budget into debt.
func TestBucketClock(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	b := New(Config{Budget: 20, Now: func() time.Time { return now }})
	passed := 0
	for b.Take("q", Management) {
		passed++
	}
	if passed != 2 {
		t.Fatalf("20 credits passed %d management operations, want 2", passed)
	}
	now = now.Add(999 * time.Millisecond)
	if b.Take("q", Management) {
		t.Fatal("credits refilled within the second")
	}
	now = now.Add(time.Millisecond)
	if !b.Take("q", Management) {
		t.Fatal("the next second refilled nothing")
	}
	b.Charge(100)
	now = now.Add(-time.Hour)
	if !b.Take("q", Management) {
		t.Fatal("a clock that stepped back left the budget in debt")
	}
}

// TestBucketOff: without credits (or without a bucket) nothing is
// throttled, and refusals of the caller's own are still counted.
func TestBucketOff(t *testing.T) {
	for _, b := range []*Bucket{New(Config{}), New(Config{Budget: -1})} {
		if b.Limited() || b.PerSecond() != 0 || !b.Take("q", 1e9) || b.Wait(t.Context(), "q") != nil {
			t.Fatal("a budget of 0 or less throttles")
		}
		b.Charge(1e9)
		b.Count("q")
		if got := b.Throttled(); got["q"] != 1 || len(got) != 1 {
			t.Fatalf("counts %v without credits, want q: 1", got)
		}
	}
	var none *Bucket
	none.Count("q")
	none.Charge(1)
	if none.Limited() || !none.Take("q", 1e9) || none.Wait(t.Context(), "q") != nil || len(none.Throttled()) != 0 {
		t.Fatal("a nil bucket throttles or counts")
	}
}

// TestBucketCountsBounded: past MaxCounted entities, throttled requests
// of new names are counted as Other, so that requests for made-up names
// cannot grow the counts (and a metric's labels) without bound.
func TestBucketCountsBounded(t *testing.T) {
	b := New(Config{})
	for i := range MaxCounted {
		b.Count(fmt.Sprint("e", i))
	}
	b.Count("new")
	b.Count("another")
	b.Count("e7")
	got := b.Throttled()
	if len(got) != MaxCounted+1 || got[Other] != 2 || got["e7"] != 2 || got["new"] != 0 {
		t.Fatalf("%d entities counted, %s: %d, e7: %d, new: %d; want %d, 2, 2, 0",
			len(got), Other, got[Other], got["e7"], got["new"], MaxCounted+1)
	}
}

// TestBucketConcurrent: parts of a process spending one bucket at once
// (dev mode's front-end and gateway) pass exactly a second's budget
// between them.
func TestBucketConcurrent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := New(Config{Budget: 1000})
		var mu sync.Mutex
		passed := 0
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for b.Take("q", Management) {
					mu.Lock()
					passed++
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if passed != 100 {
			t.Fatalf("%d management operations passed on 1000 credits, want 100", passed)
		}
	})
}
