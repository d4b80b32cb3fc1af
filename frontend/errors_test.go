package frontend

import (
	"fmt"
	"testing"
)

// TestCatalogUnavailableIsRetriable: an entity whose existence cannot be
// told yet must get a condition the SDKs retry in place, never
// amqp:not-found, which they take as final.
func TestCatalogUnavailableIsRetriable(t *testing.T) {
	f := errFailure(fmt.Errorf("%w: looking up orders: catching up", ErrCatalogUnavailable))
	if f.cond != condTimeout || !f.retriable || f.status != 503 {
		t.Fatalf("catalog unavailable maps to %+v, want %s, retriable, 503", f, condTimeout)
	}
	if nf := errFailure(fmt.Errorf("%w: orders", ErrEntityNotFound)); nf.cond == f.cond {
		t.Fatalf("not-found and catalog-unavailable map alike: %s", nf.cond)
	}
}
