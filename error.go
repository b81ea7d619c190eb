package ragtime

import "fmt"

// Error is a failure a client can act on: what kind of failure it is
// (Kind), a stable Code (llm_auth, store_unavailable, ...), a Message saying
// what happened and a Hint naming the flag, variable or command to check. It
// is what the SSE error event carries and what is stored with the query.
type Error struct {
	// Stage is the stage that failed (filled in by the pipeline when empty).
	Stage string `json:"stage"`
	// Kind is what the failure means, for whoever decides on it (the API's
	// HTTP status, a retry); clients read Code.
	Kind    Kind   `json:"-"`
	Code    string `json:"code"`
	Message string `json:"message"`
	Hint    string `json:"hint,omitempty"`
	// Status is the upstream HTTP status, when there was one.
	Status int `json:"-"`
	// RequestID is the upstream's request id, when it sent one.
	RequestID string `json:"-"`
	Err       error  `json:"-"`
}

func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s: %s: %v", e.Code, e.Message, e.Err)
	}
	return e.Code + ": " + e.Message
}

func (e *Error) Unwrap() error { return e.Err }

// Kind is what a failure means, whichever part reported it. The upstream
// kinds (KindUpstream…) are failures of a service ragtime calls (the model
// provider, the embedder, the reranker, the vector store), told apart from
// the same failure of ragtime's own caller: a model provider refusing the
// server's key is not the client's 401.
type Kind uint8

// The kinds of failure. The zero Kind is KindInternal: a failure nobody
// classified is answered as ragtime's own.
const (
	// KindInternal: a failure of ragtime itself, or one not classified.
	KindInternal Kind = iota
	// KindInvalid: the request is invalid; sending it again fails again.
	KindInvalid
	// KindUnauthorized: the caller's credentials are missing or refused.
	KindUnauthorized
	// KindForbidden: the caller's credentials do not allow this.
	KindForbidden
	// KindNotFound: what the caller named does not exist.
	KindNotFound
	// KindRateLimited: too many requests, the caller's or (HTTP 429) a
	// service's ragtime calls.
	KindRateLimited
	// KindTimeout: a deadline passed, or a service timed out (HTTP 408,
	// 504), or no answer came in time.
	KindTimeout
	// KindUnavailable: ragtime cannot answer now (shutting down,
	// read-only, its database away); retrying later may succeed.
	KindUnavailable
	// KindCancelled: the caller went away or the query was cancelled.
	KindCancelled
	// KindUpstream: a service ragtime calls failed (HTTP 5xx) or could not
	// be reached.
	KindUpstream
	// KindUpstreamAuth: a service ragtime calls refused its credentials
	// (HTTP 401, 403).
	KindUpstreamAuth
	// KindUpstreamNotFound: a service ragtime calls does not have the path
	// or the model asked for (HTTP 404, or an error body saying the model
	// is missing).
	KindUpstreamNotFound
	// KindUpstreamRejected: a service ragtime calls refused the request
	// itself (any other 4xx).
	KindUpstreamRejected
	// KindUpstreamMalformed: a service ragtime calls answered, but not in
	// the shape asked for (a broken stream, a body that does not parse).
	KindUpstreamMalformed

	kindCount // the number of kinds; keep last
)

// Kinds lists every Kind, in declaration order.
func Kinds() []Kind {
	ks := make([]Kind, kindCount)
	for i := range ks {
		ks[i] = Kind(i)
	}
	return ks
}

var kindNames = [kindCount]string{
	KindInternal:          "internal",
	KindInvalid:           "invalid",
	KindUnauthorized:      "unauthorized",
	KindForbidden:         "forbidden",
	KindNotFound:          "not_found",
	KindRateLimited:       "rate_limited",
	KindTimeout:           "timeout",
	KindUnavailable:       "unavailable",
	KindCancelled:         "cancelled",
	KindUpstream:          "upstream",
	KindUpstreamAuth:      "upstream_auth",
	KindUpstreamNotFound:  "upstream_not_found",
	KindUpstreamRejected:  "upstream_rejected",
	KindUpstreamMalformed: "upstream_malformed",
}

func (k Kind) String() string {
	if k < kindCount {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}
