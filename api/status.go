package api

import (
	"net/http"

	"ragtime"
)

// StatusClientClosedRequest is the status of a request whose client went
// away before its answer (nginx's 499): logged, never received.
const StatusClientClosedRequest = 499

// kindStatus is the HTTP status a failure of each kind is answered with:
// the one place that decides it. A failure of a service ragtime calls is
// a bad gateway whatever the service said (a provider refusing the
// server's key is not the client's 401), except a rate limit (429: the
// client should slow down) and a timeout (504). A test fails when a kind
// has no row.
var kindStatus = map[ragtime.Kind]int{
	ragtime.KindInternal:          http.StatusInternalServerError,
	ragtime.KindInvalid:           http.StatusBadRequest,
	ragtime.KindUnauthorized:      http.StatusUnauthorized,
	ragtime.KindForbidden:         http.StatusForbidden,
	ragtime.KindNotFound:          http.StatusNotFound,
	ragtime.KindRateLimited:       http.StatusTooManyRequests,
	ragtime.KindTimeout:           http.StatusGatewayTimeout,
	ragtime.KindUnavailable:       http.StatusServiceUnavailable,
	ragtime.KindCancelled:         StatusClientClosedRequest,
	ragtime.KindUpstream:          http.StatusBadGateway,
	ragtime.KindUpstreamAuth:      http.StatusBadGateway,
	ragtime.KindUpstreamNotFound:  http.StatusBadGateway,
	ragtime.KindUpstreamRejected:  http.StatusBadGateway,
	ragtime.KindUpstreamMalformed: http.StatusBadGateway,
}

// kindStatusOf is the HTTP status of a failure of kind k (500 for a kind
// the table lacks, which its test rules out).
func kindStatusOf(k ragtime.Kind) int {
	if s, ok := kindStatus[k]; ok {
		return s
	}
	return http.StatusInternalServerError
}
