package frontend

import (
	"testing"
	"time"
)

// TestAcceptWait: an accept-next answers a second before its client's
// timeout, and never waits less than half of it.
func TestAcceptWait(t *testing.T) {
	for _, c := range []struct{ timeout, wait time.Duration }{
		{60 * time.Second, 59 * time.Second},
		{10 * time.Second, 9 * time.Second},
		{5 * time.Second, 4 * time.Second},
		{3 * time.Second, 2 * time.Second},
		{2 * time.Second, time.Second},
		{1500 * time.Millisecond, 750 * time.Millisecond},
		{time.Second, 500 * time.Millisecond},
		{100 * time.Millisecond, 50 * time.Millisecond},
		{0, 0},
	} {
		if got := acceptWait(c.timeout); got != c.wait {
			t.Errorf("acceptWait(%v) = %v, want %v", c.timeout, got, c.wait)
		}
	}
}
