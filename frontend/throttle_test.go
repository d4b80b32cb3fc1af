package frontend

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// The throttle reads the time package's clock, which testing/synctest
// makes virtual inside a bubble: a bubble starts on a whole second
// (2000-01-01 UTC) and its clock moves only when every goroutine in it
// waits, by exactly as much as the earliest timer asks. So these tests
// sleep across second boundaries and check waits exactly, without
// waiting in real time and without a clock field for tests.

// TestThrottleCredits: a second's share is spent and refused past it, a
// batch larger than what is left passes once and is paid back, idle
// seconds do not pile credits up, and the budget is shared between the
// live front-ends.
func TestThrottleCredits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		share := 1.0
		th := newThrottle(100, func() float64 { return share }, 0)

		for i := range 100 {
			if !th.take("q", 1) {
				t.Fatalf("send %d of the first 100 refused", i)
			}
		}
		if th.take("q", 1) || th.take("q", 10) {
			t.Fatal("past the budget, not refused")
		}
		time.Sleep(time.Second)
		if !th.take("q", 250) { // a batch of 250 with 100 left
			t.Fatal("a batch larger than the budget never passes")
		}
		time.Sleep(time.Second)
		if th.take("q", 1) { // 100 - 250 + 100 = -50
			t.Fatal("the batch's debt was not paid back")
		}
		time.Sleep(time.Hour)
		for range 100 {
			th.take("q", 1)
		}
		if th.take("other", 1) {
			t.Fatal("an idle hour piled credits up")
		}
		share = 0.25 // one of 4 front-ends
		time.Sleep(time.Second)
		passed := 0
		for th.take("q", 1) {
			passed++
		}
		if passed != 25 {
			t.Fatalf("one of 4 front-ends passed %d a second, want 25", passed)
		}
		th.charge(1000)
		time.Sleep(time.Second)
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
			off.refused("q")
			if got := off.counts(); got["q"] != 1 {
				t.Fatalf("busy refusals counted %v without credits, want q: 1", got)
			}
		}
		var off *throttle
		if !off.take("q", 1e9) || off.wait(t.Context(), "q") != nil || len(off.counts()) != 0 {
			t.Fatal("no throttle throttles")
		}
	})
}

// TestThrottleWait: a wait past the budget ends when the next second's
// credits arrive, not before and not a tick later, and counts once
// against the entity however long it lasts; a wait its context ends
// returns the context's error.
func TestThrottleWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		th := newThrottle(10, nil, 0)
		time.Sleep(300 * time.Millisecond)
		if !th.take("q", 10) {
			t.Fatal("the first second's credits refused")
		}
		start := time.Now()
		if err := th.wait(t.Context(), "q"); err != nil {
			t.Fatal(err)
		}
		if waited := time.Since(start); waited != 700*time.Millisecond {
			t.Fatalf("waited %v for the next second's credits, want 700ms", waited)
		}
		if !th.take("q", 10) {
			t.Fatal("the next second's credits refused after the wait")
		}

		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		defer cancel()
		if err := th.wait(ctx, "q"); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("a wait its context ended: %v", err)
		}
		if got := th.counts()["q"]; got != 2 {
			t.Fatalf("%d waits counted, want 2", got)
		}
	})
}

// TestManagementCosts: what each $management operation costs up front
// (seed 003: data operations 1 a message, management operations 10).
// Peeks and receives by sequence number pay afterwards, 1 a message
// returned (TestSDKManagementCosts).
func TestManagementCosts(t *testing.T) {
	s := &Server{cfg: Config{Backend: topicFilters{filters: 3}}}
	queue := &placementpb.Entity{Name: "q", Kind: placementpb.EntityKind_ENTITY_KIND_QUEUE}
	topic := &placementpb.Entity{Name: "t", Kind: placementpb.EntityKind_ENTITY_KIND_TOPIC}
	for _, tc := range []struct {
		e        *placementpb.Entity
		op       string
		messages int
		want     int64
	}{
		{queue, "com.microsoft:peek-message", 0, 0},
		{queue, "com.microsoft:receive-by-sequence-number", 0, 0},
		{queue, "com.microsoft:schedule-message", 1, 1},
		{queue, "com.microsoft:schedule-message", 7, 7},
		{topic, "com.microsoft:schedule-message", 2, 2 + 2*3}, // and the filters each is evaluated against
		{queue, "com.microsoft:cancel-scheduled-message", 0, 1},
		{queue, "com.microsoft:update-disposition", 0, 1},
		{queue, "com.microsoft:renew-lock", 0, 1},
		{queue, "com.microsoft:renew-session-lock", 0, 1},
		{queue, "com.microsoft:get-session-state", 0, 1},
		{queue, "com.microsoft:set-session-state", 0, 1},
		{queue, "com.microsoft:get-message-sessions", 0, 1},
		{topic, "com.microsoft:add-rule", 0, 10},
		{topic, "com.microsoft:remove-rule", 0, 10},
		{topic, "com.microsoft:enumerate-rules", 0, 10},
	} {
		if got := s.managementCost(tc.e, tc.op, tc.messages); got != tc.want {
			t.Errorf("%s of %d messages on %s costs %d, want %d", tc.op, tc.messages, tc.e.Name, got, tc.want)
		}
	}
}

// topicFilters is a Backend (its other methods unused) whose topics
// have a number of filters.
type topicFilters struct {
	Backend
	filters int
}

func (f topicFilters) Filters(string) int { return f.filters }
