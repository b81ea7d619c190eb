package sim

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"ragtime/internal/openaiwire"
)

// requestError is a 400 naming the offending field.
type requestError struct {
	// Status is the HTTP status; 0 means 400.
	Status  int
	Param   string
	Message string
}

func (e *requestError) Error() string { return e.Message }

// decodeChatRequest reads and validates a chat completion request.
func decodeChatRequest(r io.Reader) (*openaiwire.ChatRequest, error) {
	var req openaiwire.ChatRequest
	dec := json.NewDecoder(r)
	if err := dec.Decode(&req); err != nil {
		var typeErr *json.UnmarshalTypeError
		var syntaxErr *json.SyntaxError
		switch {
		case errors.As(err, &typeErr):
			return nil, &requestError{Param: typeErr.Field, Message: fmt.Sprintf("invalid type for %q: expected %s", typeErr.Field, typeErr.Type)}
		case errors.As(err, &syntaxErr):
			return nil, &requestError{Message: fmt.Sprintf("request body is not valid JSON (at byte %d): %v", syntaxErr.Offset, err)}
		case errors.Is(err, io.ErrUnexpectedEOF):
			return nil, &requestError{Message: "request body is not valid JSON: it ends before the object does"}
		case errors.Is(err, io.EOF):
			return nil, &requestError{Message: "request body is empty; want a JSON chat completion request"}
		default:
			var maxErr *http.MaxBytesError
			if errors.As(err, &maxErr) {
				return nil, &requestError{Status: http.StatusRequestEntityTooLarge, Message: fmt.Sprintf("request body exceeds %d bytes", maxErr.Limit)}
			}
			if errors.Is(err, openaiwire.ErrContent) {
				return nil, &requestError{Param: "messages[].content", Message: "invalid messages[].content: " + err.Error()}
			}
			return nil, &requestError{Message: "invalid request body: " + err.Error()}
		}
	}
	if len(req.Messages) == 0 {
		return nil, &requestError{Param: "messages", Message: "messages is required and must not be empty"}
	}
	for i, m := range req.Messages {
		if m.Role == "" {
			return nil, &requestError{Param: fmt.Sprintf("messages[%d].role", i), Message: fmt.Sprintf("messages[%d].role is required", i)}
		}
	}
	if req.MaxTokens != nil && *req.MaxTokens < 1 {
		return nil, &requestError{Param: "max_tokens", Message: fmt.Sprintf("max_tokens must be ≥ 1, got %d", *req.MaxTokens)}
	}
	if req.MaxCompletionTokens != nil && *req.MaxCompletionTokens < 1 {
		return nil, &requestError{Param: "max_completion_tokens", Message: fmt.Sprintf("max_completion_tokens must be ≥ 1, got %d", *req.MaxCompletionTokens)}
	}
	return &req, nil
}
