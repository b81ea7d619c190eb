package pipeline

import (
	"context"
	"errors"
	"fmt"
)

// Error is a failure a client can act on: a stable Code (llm_auth,
// store_unavailable, ...), a Message saying what happened and a Hint naming
// the flag, variable or command to check. It is what the SSE error event
// carries and what is stored with the query.
type Error struct {
	// Stage is the stage that failed (filled in by the pipeline when empty).
	Stage   string `json:"stage"`
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

// Codes the pipeline itself produces; parts define their own (llm_auth, ...).
const (
	// CodeCancelled: the client went away, or the query's context was
	// cancelled; the query is stored with status cancelled.
	CodeCancelled      = "cancelled"
	CodeInternal       = "internal"
	CodeClientStalled  = "client_stalled"
	CodeServerShutdown = "server_shutdown"
)

// Cancel is why a query was cancelled from outside its stages. Set one as
// the cause of the query's context (context.WithCancelCause), or return one
// (wrapped) from a Stream method; the query is stored as cancelled with its
// Code, and when Tell is set the client is sent an error event saying so.
type Cancel struct {
	Code    string
	Message string
	Hint    string
	// Tell: the client is still there and should hear why its stream ends.
	Tell bool
}

func (c *Cancel) Error() string { return c.Code + ": " + c.Message }

// The reasons the API cancels a query for.
var (
	// ErrClientGone: the client disconnected (and did not resume).
	ErrClientGone = &Cancel{Code: CodeCancelled, Message: "the client went away"}
	// ErrClientStalled: the client stopped reading; a write waited longer
	// than --stream-write-timeout.
	ErrClientStalled = &Cancel{Code: CodeClientStalled,
		Message: "the client stopped reading for longer than --stream-write-timeout"}
	// ErrServerShutdown: the server's shutdown deadline passed while the
	// stream was open.
	ErrServerShutdown = &Cancel{Code: CodeServerShutdown, Tell: true,
		Message: "the server is shutting down and its --shutdown-timeout passed before the answer ended",
		Hint:    "ask again: a restarted or another instance will answer"}
)

// IsCancelled reports whether err ends a query as cancelled rather than
// failed: it is an *Error with CodeCancelled, or it wraps context.Canceled
// (a part's own cancellation code, such as llm_cancelled, wraps it by
// contract).
func IsCancelled(err error) bool {
	var e *Error
	if errors.As(err, &e) && e.Code == CodeCancelled {
		return true
	}
	return errors.Is(err, context.Canceled)
}

// FailedStage names the generation stage a failure at this point of the
// call belongs to: llm_connect before a connection, llm_prefill before the
// first token, llm_decode after it.
func (g *Generation) FailedStage() string {
	switch {
	case g.GotConn.IsZero():
		return StageLLMConnect
	case g.FirstToken.IsZero():
		return StageLLMPrefill
	default:
		return StageLLMDecode
	}
}

// AsError returns err as an *Error, classifying what is not one as
// stage_failed for the given stage.
func AsError(stage string, err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		if e.Stage == "" {
			e.Stage = stage
		}
		return e
	}
	return &Error{Stage: stage, Code: stage + "_failed", Message: err.Error(), Err: err}
}
