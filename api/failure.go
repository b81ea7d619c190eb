package api

import (
	"log/slog"

	"ragtime"
)

// The failure of an ask is written for the operator: the parts name the
// model server's address and the serve flag to check (llm_connect: "could
// not connect to the model provider at http://10.0.0.7:8000/v1", "check
// --llm-base-url"). The API's callers are told the stage and code, and a
// message and hint on their side; the operator's text goes to the log, with
// the query id, and stays in the query's record (error_message), which only
// admin reads show. This file is the one place that splits the two.

// callerSafe are the codes whose text is already the caller's: the
// pipeline's and the API's own, which name nothing of the server's set-up.
var callerSafe = map[string]bool{
	ragtime.CodeCancelled:      true,
	ragtime.CodeClientStalled:  true,
	ragtime.CodeServerShutdown: true,
	ragtime.CodeResumeGap:      true,
}

// callerTexts are the message and hint a caller gets for a code a part
// returned.
var callerTexts = map[string]struct{ message, hint string }{
	ragtime.CodeLLMAuth: {"the server's model provider refused its credentials",
		"nothing to change in the request; tell the server's operator (the server log has the detail)"},
	ragtime.CodeLLMModelNotFound: {"the model provider does not serve the model asked for",
		"ask for another model (GET /v1/models lists this server's), or leave model empty for the server's default"},
	ragtime.CodeLLMRateLimited: {"the server's model provider is rate limiting it",
		"retry later, or send fewer requests at once"},
	ragtime.CodeLLMUnavailable: {"the server's model provider failed or dropped the connection",
		"retry later; if it lasts, tell the server's operator (the server log has the detail)"},
	ragtime.CodeLLMTimeout: {"the model did not answer in time",
		"retry; a smaller max_tokens or top_k makes the answer quicker"},
	ragtime.CodeLLMConnect: {"the server could not reach its model provider",
		"retry later; if it lasts, tell the server's operator (the server log has the detail)"},
	ragtime.CodeLLMBadStream: {"the model provider sent a malformed answer",
		"retry; if it lasts, tell the server's operator (the server log has the detail)"},
	ragtime.CodeLLMBadRequest: {"the model provider refused the request",
		"if the prompt is too long for the model, lower top_k or max_tokens"},
	ragtime.CodeLLMCancelled: {"the request was cancelled before the model finished", ""},
	ragtime.CodeStoreCollectionMissing: {"the server's index holds no documents yet",
		"add documents with POST /v1/documents (a key with scope documents), or tell the server's operator"},
}

// callerText is the message and hint a caller is shown for a failure with
// code (the operator's message is msg): msg itself when the code's text is
// the caller's, else the code's caller text, else one naming the stage.
func callerText(code, stage, msg, hint string) (string, string) {
	if callerSafe[code] {
		return msg, hint
	}
	if t, ok := callerTexts[code]; ok {
		return t.message, t.hint
	}
	part := stage
	if part == "" {
		part = "a stage"
	}
	return "the server failed at " + part + " (" + code + ")",
		"retry later; if it lasts, tell the server's operator (the server log has the detail)"
}

// callerFailure is e as the caller of query id is told it; what only the
// operator should read is logged.
func callerFailure(log *slog.Logger, id string, e *ragtime.Error) *ragtime.Error {
	if e == nil || callerSafe[e.Code] {
		return e
	}
	if log != nil {
		log.Warn("ask failed", "query_id", id, "stage", e.Stage, "code", e.Code, "message", e.Message, "hint", e.Hint)
	}
	msg, hint := callerText(e.Code, e.Stage, e.Message, e.Hint)
	return &ragtime.Error{Stage: e.Stage, Kind: e.Kind, Code: e.Code, Message: msg, Hint: hint, Status: e.Status, RequestID: e.RequestID}
}
