package frontend

import (
	"fmt"
	"testing"

	"github.com/quorumbus/quorumbus/frontend/amqp"
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

// TestStorageFullCondition: a partition out of disk reaches clients as
// amqp:resource-limit-exceeded, which they may retry later.
func TestStorageFullCondition(t *testing.T) {
	f := errFailure(fmt.Errorf("%w: group 7", ErrStorageFull))
	if f.cond != amqp.ErrCondResourceLimitExceeded || !f.retriable {
		t.Errorf("storage full maps to %+v, want a retriable %s", f, amqp.ErrCondResourceLimitExceeded)
	}
}
