package sim

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// chatRequest is the part of an OpenAI chat completion request the
// simulator reads.
type chatRequest struct {
	Model               string        `json:"model"`
	Messages            []chatMessage `json:"messages"`
	Stream              bool          `json:"stream"`
	StreamOptions       *streamOpts   `json:"stream_options"`
	MaxTokens           *int          `json:"max_tokens"`
	MaxCompletionTokens *int          `json:"max_completion_tokens"`
}

type streamOpts struct {
	IncludeUsage bool `json:"include_usage"`
}

// chatMessage is one message; Content is a string or an array of parts.
type chatMessage struct {
	Role    string      `json:"role"`
	Content contentText `json:"content"`
}

// contentText is a message content: a JSON string, an array of
// {"type":"text","text":...} parts (joined), or null.
type contentText string

func (c *contentText) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*c = ""
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*c = contentText(s)
		return nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(b, &parts); err != nil {
		return errors.New("content: want a string or an array of text parts")
	}
	var sb strings.Builder
	for _, p := range parts {
		sb.WriteString(p.Text)
	}
	*c = contentText(sb.String())
	return nil
}

// requestError is a 400 naming the offending field.
type requestError struct {
	// Status is the HTTP status; 0 means 400.
	Status  int
	Param   string
	Message string
}

func (e *requestError) Error() string { return e.Message }

// decodeChatRequest reads and validates a chat completion request.
func decodeChatRequest(r io.Reader) (*chatRequest, error) {
	var req chatRequest
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
			if strings.Contains(err.Error(), "text parts") {
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

// apiError is the OpenAI error body.
type apiError struct {
	Error apiErrorBody `json:"error"`
}

type apiErrorBody struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

// chunk is one streamed chat.completion.chunk.
type chunk struct {
	ID      string        `json:"id"`
	Object  string        `json:"object"`
	Created int64         `json:"created"`
	Model   string        `json:"model"`
	Choices []chunkChoice `json:"choices"`
	Usage   *usage        `json:"usage,omitempty"`
}

type chunkChoice struct {
	Index        int     `json:"index"`
	Delta        delta   `json:"delta"`
	FinishReason *string `json:"finish_reason"`
}

type delta struct {
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
}

// usage is the OpenAI usage object.
type usage struct {
	PromptTokens            int                      `json:"prompt_tokens"`
	CompletionTokens        int                      `json:"completion_tokens"`
	TotalTokens             int                      `json:"total_tokens"`
	PromptTokensDetails     *promptTokensDetails     `json:"prompt_tokens_details,omitempty"`
	CompletionTokensDetails *completionTokensDetails `json:"completion_tokens_details,omitempty"`
}

type completionTokensDetails struct {
	ReasoningTokens int `json:"reasoning_tokens"`
}

type promptTokensDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

// completion is a non-streamed chat.completion.
type completion struct {
	ID      string             `json:"id"`
	Object  string             `json:"object"`
	Created int64              `json:"created"`
	Model   string             `json:"model"`
	Choices []completionChoice `json:"choices"`
	Usage   usage              `json:"usage"`
}

type completionChoice struct {
	Index        int               `json:"index"`
	Message      completionMessage `json:"message"`
	FinishReason string            `json:"finish_reason"`
}

type completionMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// modelList is the /v1/models body.
type modelList struct {
	Object string      `json:"object"`
	Data   []modelInfo `json:"data"`
}

type modelInfo struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}
