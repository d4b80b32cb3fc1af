package frontend

import (
	"testing"
	"time"
)

// TestThrottleCredits: a second's share is spent and refused past it, a
// batch larger than what is left passes once and is paid back, idle
// seconds do not pile credits up, and the budget is shared between the
// live front-ends.
func TestThrottleCredits(t *testing.T) {
	clock := time.Unix(1_000_000, 0)
	fronts := 1
	th := newThrottle(100, func() int { return fronts }, 0)
	th.now = func() time.Time { return clock }

	for i := range 100 {
		if !th.take("q", 1) {
			t.Fatalf("send %d of the first 100 refused", i)
		}
	}
	if th.take("q", 1) || th.take("q", 10) {
		t.Fatal("past the budget, not refused")
	}
	clock = clock.Add(time.Second)
	if !th.take("q", 250) { // a batch of 250 with 100 left
		t.Fatal("a batch larger than the budget never passes")
	}
	clock = clock.Add(time.Second)
	if th.take("q", 1) { // 100 - 250 + 100 = -50
		t.Fatal("the batch's debt was not paid back")
	}
	clock = clock.Add(time.Hour)
	for range 100 {
		th.take("q", 1)
	}
	if th.take("other", 1) {
		t.Fatal("an idle hour piled credits up")
	}
	fronts = 4
	clock = clock.Add(time.Second)
	passed := 0
	for th.take("q", 1) {
		passed++
	}
	if passed != 25 {
		t.Fatalf("one of 4 front-ends passed %d a second, want 25", passed)
	}
	th.charge(1000)
	clock = clock.Add(time.Second)
	if th.take("q", 1) {
		t.Fatal("received messages were not charged")
	}
	if got := th.counts(); got["q"] != 5 || got["other"] != 1 {
		t.Fatalf("throttled counts %v", got)
	}
	for _, off := range []*throttle{newThrottle(0, nil, 0), newThrottle(-1, nil, -1)} {
		if !off.take("q", 1e9) || off.wait(t.Context(), "q") != nil || !off.admit("q", 1e9) {
			t.Fatal("a budget of 0 or less throttles")
		}
		off.busy("q")
		if got := off.counts(); got["q"] != 1 {
			t.Fatalf("busy refusals counted %v without credits, want q: 1", got)
		}
	}
	var off *throttle
	if !off.take("q", 1e9) || off.wait(t.Context(), "q") != nil || len(off.counts()) != 0 {
		t.Fatal("no throttle throttles")
	}
}
