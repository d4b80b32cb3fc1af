package gateway

import (
	"errors"
	"net/http"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// httpErrors is the one table from the gateway's own errors to HTTP
// statuses; the first match wins.
var httpErrors = []struct {
	err  error
	code int
}{
	{ErrForwardAuth, http.StatusUnauthorized},
	{ErrBadXML, http.StatusBadRequest},
	{ErrBadProperty, http.StatusBadRequest},
	{ErrNotImplemented, http.StatusNotImplemented},
	{ErrNotFound, http.StatusNotFound},
	{errRejected, http.StatusConflict},
}

// ErrNotFound: the path names no entity of its kind, or no rule; answered
// 404 (the SDKs return nil).
var ErrNotFound = errors.New("gateway: not found")

// grpcStatuses maps the catalog's and the partitions' gRPC codes to what
// Service Bus answers: 404 for a missing entity (the SDKs turn it into
// nil), 409 for one that exists, 400 for invalid names and properties,
// 403 for a namespace quota, and 503 for whatever a retry can mend (no
// meta leader yet, a leader change, a partition electing), which the SDKs
// retry.
var grpcStatuses = map[codes.Code]int{
	codes.NotFound:           http.StatusNotFound,
	codes.AlreadyExists:      http.StatusConflict,
	codes.InvalidArgument:    http.StatusBadRequest,
	codes.ResourceExhausted:  http.StatusForbidden,
	codes.FailedPrecondition: http.StatusServiceUnavailable,
	codes.Unavailable:        http.StatusServiceUnavailable,
	codes.Aborted:            http.StatusServiceUnavailable,
	codes.DeadlineExceeded:   http.StatusServiceUnavailable,
	codes.Unimplemented:      http.StatusNotImplemented,
	codes.Canceled:           499, // the client went away; nobody reads it
}

func httpStatus(err error) int {
	for _, e := range httpErrors {
		if errors.Is(err, e.err) {
			return e.code
		}
	}
	if st, ok := status.FromError(err); ok {
		if code, ok := grpcStatuses[st.Code()]; ok {
			return code
		}
	}
	return http.StatusInternalServerError
}
