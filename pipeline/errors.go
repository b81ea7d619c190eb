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
	CodeCancelled = "cancelled"
	CodeInternal  = "internal"
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
