package gateway

import (
	"errors"
	"fmt"
	"net/http"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestHTTPStatus(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want int
	}{
		{status.Error(codes.NotFound, "catalog: entity not found"), http.StatusNotFound},
		{status.Error(codes.AlreadyExists, "taken"), http.StatusConflict},
		{status.Error(codes.InvalidArgument, "bad name"), http.StatusBadRequest},
		{status.Error(codes.ResourceExhausted, "too many entities"), http.StatusForbidden},
		{status.Error(codes.Unavailable, "no meta leader"), http.StatusServiceUnavailable},
		{status.Error(codes.FailedPrecondition, "not the leader"), http.StatusServiceUnavailable},
		{fmt.Errorf("wrapped: %w", status.Error(codes.Aborted, "conflict")), http.StatusServiceUnavailable},
		{status.Error(codes.Internal, "bug"), http.StatusInternalServerError},
		{fmt.Errorf("%w: x", ErrBadProperty), http.StatusBadRequest},
		{fmt.Errorf("%w: x", ErrBadXML), http.StatusBadRequest},
		{fmt.Errorf("%w: topics", ErrNotImplemented), http.StatusNotImplemented},
		{errors.New("anything else"), http.StatusInternalServerError},
	} {
		if got := httpStatus(tc.err); got != tc.want {
			t.Errorf("httpStatus(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}
