package client

import (
	"errors"
	"fmt"
	"net/http"
	"syscall"
)

// APIError is a non-2xx answer of the server.
type APIError struct {
	// Status is the HTTP status code.
	Status int
	// Code is the server's machine-readable kind (api.Error.Code):
	// bad_request, not_found, conflict, too_large, unavailable,
	// etcd_unreachable (the leader cannot reach etcd: nothing was changed,
	// unless the message says the change may have been written), internal;
	// "" when the answer was not an API error body (e.g. from a proxy).
	Code string
	// Message is the server's explanation.
	Message string
}

// Error returns the server's message.
func (e *APIError) Error() string { return e.Message }

// IsNotFound reports whether err is the server saying a thing does not exist.
func IsNotFound(err error) bool {
	var e *APIError
	return errors.As(err, &e) && (e.Code == "not_found" || e.Code == "" && e.Status == http.StatusNotFound)
}

// IsConflict reports whether err is the server refusing a change that
// contradicts the cluster's state, such as a different file for an existing unit.
func IsConflict(err error) bool {
	var e *APIError
	return errors.As(err, &e) && (e.Code == "conflict" || e.Code == "" && e.Status == http.StatusConflict)
}

// IsUnavailable reports whether err may go away by itself: the server could
// not be reached, or it said it cannot answer now (e.g. no leader).
func IsUnavailable(err error) bool {
	var u *UnreachableError
	if errors.As(err, &u) {
		return true
	}
	var e *APIError
	return errors.As(err, &e) && (e.Code == "unavailable" || e.Status == http.StatusServiceUnavailable ||
		e.Status == http.StatusBadGateway || e.Status == http.StatusGatewayTimeout)
}

// UnreachableError is returned when nothing listens at the endpoint.
type UnreachableError struct {
	Endpoint string // the API URL the client was made for
	Err      error  // the dial or transport error
}

// Error says that the endpoint cannot be reached, why, and what to check.
func (e *UnreachableError) Error() string {
	why := e.Err.Error()
	if errors.Is(e.Err, syscall.ECONNREFUSED) {
		why = "connection refused"
	}
	if errors.Is(e.Err, syscall.ENOENT) {
		why = "no such socket"
	}
	return fmt.Sprintf("cannot reach flotilla at %s: %s; is it running? (for a local cluster, start `flotilla dev`)", e.Endpoint, why)
}

// Unwrap returns the dial or transport error.
func (e *UnreachableError) Unwrap() error { return e.Err }
