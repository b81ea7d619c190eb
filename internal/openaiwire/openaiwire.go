package openaiwire

import (
	"encoding/json"
	"errors"
	"strings"
)

// Object names of the chat completions responses.
const (
	// ObjectChunk is a streamed chunk's object.
	ObjectChunk = "chat.completion.chunk"
	// ObjectCompletion is a whole (non-streamed) answer's object.
	ObjectCompletion = "chat.completion"
)

// ChatRequest is a POST /v1/chat/completions body: the fields ragtime sends
// and the simulator reads.
type ChatRequest struct {
	Model    string    `json:"model"`
	Messages []Message `json:"messages"`
	// MaxTokens and MaxCompletionTokens bound the output; nil is no bound.
	MaxTokens           *int     `json:"max_tokens,omitempty"`
	MaxCompletionTokens *int     `json:"max_completion_tokens,omitempty"`
	Temperature         *float64 `json:"temperature,omitempty"`
	// Stop are the sequences the output stops before; Seed asks for
	// repeatable sampling.
	Stop          []string       `json:"stop,omitempty"`
	Seed          *int64         `json:"seed,omitempty"`
	Stream        bool           `json:"stream"`
	StreamOptions *StreamOptions `json:"stream_options,omitempty"`
}

// StreamOptions is a streamed request's stream_options.
type StreamOptions struct {
	// IncludeUsage asks for a last chunk with the usage and no choices.
	IncludeUsage bool `json:"include_usage"`
}

// Message is one message of a request's conversation.
type Message struct {
	Role    string  `json:"role"`
	Content Content `json:"content"`
}

// Content is a message's text. It is encoded as a JSON string and decoded
// from a string, an array of {"type":"text","text":...} parts (joined) or
// null.
type Content string

// UnmarshalJSON reads a string, text parts or null.
func (c *Content) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*c = ""
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*c = Content(s)
		return nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(b, &parts); err != nil {
		return ErrContent
	}
	var sb strings.Builder
	for _, p := range parts {
		sb.WriteString(p.Text)
	}
	*c = Content(sb.String())
	return nil
}

// ErrContent is the error of a message content that is neither a string,
// nor text parts, nor null.
var ErrContent = errors.New("content: want a string or an array of text parts")

// Chunk is a chat.completion.chunk (ObjectChunk) or, with Message set in its
// choice instead of Delta, a whole chat.completion (ObjectCompletion).
type Chunk struct {
	ID      string   `json:"id"`
	Object  string   `json:"object"`
	Created int64    `json:"created"`
	Model   string   `json:"model"`
	Choices []Choice `json:"choices"`
	Usage   *Usage   `json:"usage,omitempty"`
}

// Choice is one choice of a chunk (Delta) or of a completion (Message).
type Choice struct {
	Index        int     `json:"index"`
	Delta        *Delta  `json:"delta,omitempty"`
	Message      *Delta  `json:"message,omitempty"`
	FinishReason *string `json:"finish_reason"`
	// Logprobs is always null: no log probabilities are returned.
	Logprobs *struct{} `json:"logprobs"`
}

// Delta is a chunk's delta or a completion's message. ReasoningContent is
// DeepSeek's reasoning field, the one ragtime writes.
type Delta struct {
	Role             string  `json:"role,omitempty"`
	Content          *string `json:"content,omitempty"`
	ReasoningContent *string `json:"reasoning_content,omitempty"`
}

// Usage is the token counts of an answer.
type Usage struct {
	PromptTokens            int                      `json:"prompt_tokens"`
	CompletionTokens        int                      `json:"completion_tokens"`
	TotalTokens             int                      `json:"total_tokens"`
	PromptTokensDetails     *PromptTokensDetails     `json:"prompt_tokens_details,omitempty"`
	CompletionTokensDetails *CompletionTokensDetails `json:"completion_tokens_details,omitempty"`
}

// PromptTokensDetails splits the prompt tokens.
type PromptTokensDetails struct {
	// CachedTokens were served from a prefix cache.
	CachedTokens int `json:"cached_tokens"`
}

// CompletionTokensDetails splits the completion tokens.
type CompletionTokensDetails struct {
	// ReasoningTokens were spent thinking before the answer.
	ReasoningTokens int `json:"reasoning_tokens"`
}

// ErrorResponse is an error answer's body.
type ErrorResponse struct {
	Error Error `json:"error"`
}

// Error is OpenAI's error object; Param names the offending field.
type Error struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

// ModelList is the GET /v1/models body.
type ModelList struct {
	Object string  `json:"object"`
	Data   []Model `json:"data"`
}

// Model is one model of a ModelList (and GET /v1/models/{id}'s body).
type Model struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}
