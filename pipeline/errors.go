package pipeline

import (
	"context"
	"errors"

	"ragtime"
)

// Cancel is why a query was cancelled from outside its stages. Set one as
// the cause of the query's context (context.WithCancelCause), or return one
// (wrapped) from a Stream method; the query is stored as cancelled with its
// Code, and when Tell is set the client is sent an error event saying so.
type Cancel struct {
	Code string
	// Kind is the failure's kind when the client is told (Tell).
	Kind    ragtime.Kind
	Message string
	Hint    string
	// Tell: the client is still there and should hear why its stream ends.
	Tell bool
}

func (c *Cancel) Error() string { return c.Code + ": " + c.Message }

// The reasons the API cancels a query for.
var (
	// ErrClientGone: the client disconnected (and did not resume).
	ErrClientGone = &Cancel{Code: ragtime.CodeCancelled, Kind: ragtime.KindCancelled, Message: "the client went away"}
	// ErrClientStalled: the client stopped reading; a write waited longer
	// than --stream-write-timeout.
	ErrClientStalled = &Cancel{Code: ragtime.CodeClientStalled, Kind: ragtime.KindCancelled,
		Message: "the client stopped reading for longer than --stream-write-timeout"}
	// ErrServerShutdown: the server's shutdown deadline passed while the
	// stream was open.
	ErrServerShutdown = &Cancel{Code: ragtime.CodeServerShutdown, Kind: ragtime.KindUnavailable, Tell: true,
		Message: "the server is shutting down and its --shutdown-timeout passed before the answer ended",
		Hint:    "ask again: a restarted or another instance will answer"}
)

// IsCancelled reports whether err ends a query as cancelled rather than
// failed: it is an *Error of KindCancelled, or it wraps context.Canceled
// (a part's own cancellation, such as llm_cancelled, wraps it by contract).
func IsCancelled(err error) bool {
	var e *ragtime.Error
	if errors.As(err, &e) && e.Kind == ragtime.KindCancelled {
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
		return ragtime.StageLLMConnect
	case g.FirstToken.IsZero():
		return ragtime.StageLLMPrefill
	default:
		return ragtime.StageLLMDecode
	}
}

// AsError returns err as an *Error, classifying what is not one as the
// stage's failure (embed_failed, ...: ragtime.FailedCode), of KindInternal.
func AsError(stage string, err error) *ragtime.Error {
	var e *ragtime.Error
	if errors.As(err, &e) {
		if e.Stage == "" {
			e.Stage = stage
		}
		return e
	}
	return &ragtime.Error{Stage: stage, Kind: ragtime.KindInternal, Code: ragtime.FailedCode(stage), Message: err.Error(), Err: err}
}
