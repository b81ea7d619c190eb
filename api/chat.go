package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/labstack/echo/v4"

	"ragtime/auth"
	"ragtime/internal/openaiwire"
	"ragtime/pipeline"
)

// The OpenAI-compatible front door: POST /v1/chat/completions runs the
// same admitted, recorded pipeline as /ask on the conversation's last user
// message, and answers in OpenAI's shapes (docs/api.md).

// HeaderQueryID carries the query id on the chat completion responses.
const HeaderQueryID = "X-Ragtime-Query-Id"

// chatBody is the POST /v1/chat/completions body. Fields ragtime cannot
// honour are refused unless they hold the value that changes nothing
// (chatNeutral). MaxTokens and MaxCompletionTokens are pipeline.Unset when
// not given (as in answerKnobs).
type chatBody struct {
	Model *string `json:"model"`
	// Messages and Ragtime are decoded apart (decodeStrict), so that an
	// unknown field in them is named with its path.
	Messages            []json.RawMessage         `json:"messages"`
	Stream              *bool                     `json:"stream"`
	StreamOptions       *openaiwire.StreamOptions `json:"stream_options"`
	MaxTokens           int                       `json:"max_tokens"`
	MaxCompletionTokens int                       `json:"max_completion_tokens"`
	Temperature         *float64                  `json:"temperature"`
	User                *string                   `json:"user"`
	N                   *float64                  `json:"n"`
	TopP                *float64                  `json:"top_p"`
	FrequencyPenalty    *float64                  `json:"frequency_penalty"`
	PresencePenalty     *float64                  `json:"presence_penalty"`
	Logprobs            *bool                     `json:"logprobs"`
	// Stop is a string or an array of strings (chatStop reads it).
	Stop    json.RawMessage `json:"stop"`
	Seed    *int64          `json:"seed"`
	Ragtime json.RawMessage `json:"ragtime"`
	// resumable is ragtime.resumable (chatRequest sets it).
	resumable bool
}

// chatRagtimeKnobs is the request's ragtime extension object: the /ask
// knobs an OpenAI request has no field for.
type chatRagtimeKnobs struct {
	Filters     *pipeline.Filter `json:"filters"`
	PromptNonce string           `json:"prompt_nonce"`
	answerKnobs
	// Resumable makes a streamed answer resumable (chatresume.go).
	Resumable *bool `json:"resumable"`
}

// chatMessage is one message; content is a string or an array of text
// parts, read by chatContent.
type chatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
	Name    string          `json:"name"`
}

const chatKnownFields = "model, messages, stream, stream_options, max_tokens, max_completion_tokens, temperature, " +
	"stop, seed, user, n, top_p, frequency_penalty, presence_penalty, logprobs, ragtime"

// chatUnsupported are the fields of OpenAI's chat completions request that
// ragtime knows and does not honour, with why: a request that sends one is
// refused with unsupported_parameter, not unknown_field, so that the
// caller learns it is the feature, not the spelling. (n, top_p,
// frequency_penalty, presence_penalty and logprobs are accepted at the
// value that changes nothing: chatRequest.)
var chatUnsupported = map[string]string{
	"audio":               "ragtime answers in text",
	"modalities":          "ragtime answers in text",
	"function_call":       "ragtime answers from its documents and calls no tools",
	"functions":           "ragtime answers from its documents and calls no tools",
	"tools":               "ragtime answers from its documents and calls no tools",
	"tool_choice":         "ragtime answers from its documents and calls no tools",
	"parallel_tool_calls": "ragtime answers from its documents and calls no tools",
	"web_search_options":  "ragtime answers from its documents and searches nothing else",
	"logit_bias":          "ragtime does not bias the model's tokens",
	"top_logprobs":        "ragtime does not return log probabilities",
	"response_format":     "ragtime answers in plain text with citations",
	"prediction":          "ragtime does not pass predicted outputs to the model",
	"reasoning_effort":    "ragtime does not pass it to the model",
	"verbosity":           "ragtime does not pass it to the model",
	"service_tier":        "ragtime has no service tiers",
	"store":               "ragtime records every query itself (GET /v1/queries/{id})",
	"metadata":            "ragtime records every query itself (GET /v1/queries/{id})",
	"prompt_cache_key":    "ragtime does not pass it to the model",
	"safety_identifier":   "ragtime does not pass it to the model",
}

// handleChatCompletions serves POST /v1/chat/completions.
func (s *server) handleChatCompletions(c echo.Context) error {
	r := c.Request()
	if ct := r.Header.Get(echo.HeaderContentType); ct != "" && !strings.HasPrefix(ct, echo.MIMEApplicationJSON) {
		return &apiError{Status: http.StatusUnsupportedMediaType, Code: "unsupported_media_type",
			Message: "POST /v1/chat/completions takes a JSON body (Content-Type: application/json), got " + ct}
	}
	if id := r.Header.Get("Last-Event-ID"); id != "" {
		// A resumable stream's reconnect: the body (the request again) is
		// not needed; reading it to the end lets net/http notice when this
		// client goes away.
		if _, err := io.Copy(io.Discard, http.MaxBytesReader(c.Response(), r.Body, s.deps.MaxBodyBytes)); err != nil {
			return bodyError(err, s.deps.MaxBodyBytes)
		}
		return s.streams.resumeChat(c, id)
	}
	dec := json.NewDecoder(http.MaxBytesReader(c.Response(), r.Body, s.deps.MaxBodyBytes))
	dec.DisallowUnknownFields()
	body := chatBody{MaxTokens: pipeline.Unset, MaxCompletionTokens: pipeline.Unset}
	if err := dec.Decode(&body); err != nil {
		return chatBodyError(err, s.deps.MaxBodyBytes)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return badRequest("", "body_invalid", "the body must hold exactly one JSON object")
	}
	req, err := s.chatRequest(&body)
	if err != nil {
		return err
	}
	stream := body.Stream != nil && *body.Stream
	if body.resumable && !stream {
		return badRequest("ragtime.resumable", "resumable_needs_stream", "ragtime.resumable makes a streamed answer resumable; send stream: true with it")
	}
	if err := s.admitAsk(c, &req, func(req *pipeline.Request) func() {
		out := newChatStream(c, s.streams.opts, req.MaxTokens, stream, body.StreamOptions != nil && body.StreamOptions.IncludeUsage)
		if body.resumable {
			s.streams.runResumableChat(c, s.deps.Asker, req, out)
			return nil
		}
		s.streams.runPlain(c, s.deps.Asker, req, out)
		out.finish()
		return nil
	}); err != nil {
		return renameChatField(err, len(body.Messages)-1)
	}
	return nil
}

// chatBodyError is bodyError in the chat route's words.
func chatBodyError(err error, limit int64) error {
	if strings.HasPrefix(err.Error(), "json: unknown field ") {
		field := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		if why, ok := chatUnsupported[field]; ok {
			return badRequest(field, "unsupported_parameter", fmt.Sprintf("%s is an OpenAI parameter ragtime does not support (%s); leave it out", field, why))
		}
		return badRequest(nameOf(field), "unknown_field", fmt.Sprintf("unknown field %q; known: %s (ragtime: top_k, rerank_top_n, filters, prompt_nonce, retrieval, vector_k, lexical_k, collapse, ttft_budget_ms, min_chunks, resumable)", field, chatKnownFields))
	}
	if errors.Is(err, io.EOF) {
		return badRequest("messages", "messages_required", `the body is empty; send {"model": "...", "messages": [{"role": "user", "content": "..."}]}`)
	}
	return bodyError(err, limit)
}

// chatRequest turns the body into a pipeline request: the last message
// (from the user) is the question, the ones before it the history.
func (s *server) chatRequest(b *chatBody) (pipeline.Request, error) {
	req := pipeline.Request{TopK: pipeline.Unset, RerankTopN: pipeline.Unset, MaxTokens: pipeline.Unset, Temperature: b.Temperature, Seed: b.Seed,
		TTFTBudgetMs: pipeline.Unset, MinChunks: pipeline.Unset} // as unsetAnswer, when there is no ragtime object
	stop, err := chatStop(b.Stop)
	if err != nil {
		return req, err
	}
	req.Stop = stop
	if b.Model == nil || *b.Model == "" {
		return req, badRequest("model", "model_required", "model is required; GET /v1/models lists the models this key may use")
	}
	// The configured model is the default, always allowed (as an empty
	// model in /ask).
	if *b.Model != s.deps.DefaultModel {
		req.Model = *b.Model
	}
	for _, n := range []struct {
		name    string
		v       *float64
		neutral float64
	}{{"n", b.N, 1}, {"top_p", b.TopP, 1}, {"frequency_penalty", b.FrequencyPenalty, 0}, {"presence_penalty", b.PresencePenalty, 0}} {
		if n.v != nil && *n.v != n.neutral {
			return req, badRequest(n.name, "unsupported_parameter",
				fmt.Sprintf("%s must be %g or absent: ragtime does not support other values", n.name, n.neutral))
		}
	}
	if b.Logprobs != nil && *b.Logprobs {
		return req, badRequest("logprobs", "unsupported_parameter", "logprobs must be false or absent: ragtime does not return log probabilities")
	}
	switch {
	case b.MaxTokens != pipeline.Unset && b.MaxCompletionTokens != pipeline.Unset && b.MaxTokens != b.MaxCompletionTokens:
		return req, badRequest("max_completion_tokens", "max_tokens_invalid", "max_tokens and max_completion_tokens differ; send one of them")
	case b.MaxCompletionTokens != pipeline.Unset:
		req.MaxTokens = b.MaxCompletionTokens
	default:
		req.MaxTokens = b.MaxTokens
	}
	if len(b.Ragtime) > 0 && string(b.Ragtime) != "null" {
		k := chatRagtimeKnobs{answerKnobs: unsetAnswer()}
		if err := decodeStrict(b.Ragtime, &k, "ragtime"); err != nil {
			return req, err
		}
		if k.Filters != nil {
			req.Filter = *k.Filters
		}
		req.PromptNonce = k.PromptNonce
		b.resumable = k.Resumable != nil && *k.Resumable
		if err := k.apply(&req); err != nil {
			return req, renameChatField(err, 0)
		}
	}
	if len(b.Messages) == 0 {
		return req, badRequest("messages", "messages_required", "messages must hold at least one message, the last from the user")
	}
	msgs := make([]pipeline.Message, len(b.Messages))
	for i, raw := range b.Messages {
		var m chatMessage
		if err := decodeStrict(raw, &m, fmt.Sprintf("messages[%d]", i)); err != nil {
			return req, err
		}
		role := m.Role
		switch role {
		case "system", "user", "assistant":
		case "developer":
			role = "system"
		case "tool", "function":
			return req, badRequest(fmt.Sprintf("messages[%d].role", i), "messages_invalid",
				fmt.Sprintf("messages[%d] has role %q: ragtime answers from its documents and calls no tools", i, role))
		default:
			return req, badRequest(fmt.Sprintf("messages[%d].role", i), "messages_invalid",
				fmt.Sprintf("messages[%d] has role %.40q; the roles are system, developer, user and assistant", i, role))
		}
		text, err := chatContent(m.Content, i)
		if err != nil {
			return req, err
		}
		msgs[i] = pipeline.Message{Role: role, Content: text}
	}
	last := msgs[len(msgs)-1]
	if last.Role != "user" {
		return req, badRequest(fmt.Sprintf("messages[%d].role", len(msgs)-1), "messages_invalid",
			"the last message must be the user's question, got role "+last.Role)
	}
	req.Question, req.History = last.Content, msgs[:len(msgs)-1]
	return req, nil
}

// chatStop reads the request's stop: absent or null, a string, or an array
// of strings (OpenAI's shapes); pipeline.Request's checks bound them.
func chatStop(raw json.RawMessage) ([]string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, nil
	}
	var one string
	if raw[0] == '"' {
		if err := json.Unmarshal(raw, &one); err != nil {
			return nil, badRequest("stop", "stop_invalid", "stop is not a valid JSON string")
		}
		return []string{one}, nil
	}
	var many []string
	if err := json.Unmarshal(raw, &many); err != nil {
		return nil, badRequest("stop", "stop_invalid", "stop must be a string or an array of strings")
	}
	return many, nil
}

// decodeStrict decodes the JSON object raw into v, refusing unknown
// fields; errors name the field under path.
func decodeStrict(raw json.RawMessage, v any, path string) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil {
		return nil
	}
	var typeErr *json.UnmarshalTypeError
	switch {
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		field := path + "." + strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return badRequest(field, "unknown_field", fmt.Sprintf("unknown field %q", field))
	case errors.As(err, &typeErr) && typeErr.Field != "":
		field := path + "." + jsonField(typeErr.Field)
		return badRequest(field, "body_invalid", fmt.Sprintf("%s must be a JSON %s, got %s", field, typeErr.Type.Kind(), typeErr.Value))
	}
	return badRequest(path, "body_invalid", fmt.Sprintf("%s must be a JSON object: %v", path, err))
}

// chatContent reads a message's content: a string, or an array of text
// parts ({"type": "text", "text": ...}), joined.
func chatContent(raw json.RawMessage, i int) (string, error) {
	field := fmt.Sprintf("messages[%d].content", i)
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return "", badRequest(field, "messages_invalid", field+" is required")
	}
	var text string
	if raw[0] == '"' {
		if err := json.Unmarshal(raw, &text); err != nil {
			return "", badRequest(field, "messages_invalid", field+" is not a valid JSON string")
		}
		return text, nil
	}
	var parts []struct {
		Type string  `json:"type"`
		Text *string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", badRequest(field, "messages_invalid", field+" must be a string or an array of text parts")
	}
	var sb strings.Builder
	for j, p := range parts {
		if p.Type != "text" || p.Text == nil {
			return "", badRequest(fmt.Sprintf("%s[%d]", field, j), "messages_invalid",
				fmt.Sprintf("%s[%d] has type %.40q; ragtime reads text parts only", field, j, p.Type))
		}
		if j > 0 {
			sb.WriteString("\n")
		}
		sb.WriteString(*p.Text)
	}
	return sb.String(), nil
}

// renameChatField names a validation error's field as the chat request
// names it: the question is the last message (index last), the history the
// ones before, and the /ask knobs live in the ragtime object.
func renameChatField(err error, last int) error {
	var ve *pipeline.ValidationError
	if !errors.As(err, &ve) {
		return err
	}
	field := ve.Field
	switch {
	case field == "question":
		field = fmt.Sprintf("messages[%d].content", last)
	case field == "history":
		field = "messages"
	case strings.HasPrefix(field, "history["):
		field = "messages[" + strings.TrimPrefix(field, "history[")
	case field == "top_k", field == "rerank_top_n", field == "prompt_nonce", strings.HasPrefix(field, "filters"),
		field == "retrieval", field == "vector_k", field == "lexical_k", field == "collapse",
		field == "ttft_budget_ms", field == "min_chunks":
		field = "ragtime." + field
	}
	return badRequest(field, ve.Code, ve.Message)
}

// handleModels serves GET /v1/models: the models the caller may name, in
// OpenAI's list shape. The configured model comes first.
func (s *server) handleModels(c echo.Context) error {
	ids := s.modelsFor(c)
	data := make([]openaiwire.Model, len(ids))
	for i, id := range ids {
		data[i] = openaiwire.Model{ID: id, Object: "model", OwnedBy: "ragtime"}
	}
	return c.JSON(http.StatusOK, openaiwire.ModelList{Object: "list", Data: data})
}

// handleModel serves GET /v1/models/{id}: one of the caller's models, or
// 404 not_found. The id may hold slashes (org/model), as many do.
func (s *server) handleModel(c echo.Context) error {
	id, err := url.PathUnescape(c.Param("*"))
	if err != nil {
		id = c.Param("*")
	}
	if !slices.Contains(s.modelsFor(c), id) {
		return &apiError{Status: http.StatusNotFound, Code: "not_found", Field: "model",
			Message: fmt.Sprintf("model %.200q is not one this key may use; GET /v1/models lists them", id)}
	}
	return c.JSON(http.StatusOK, openaiwire.Model{ID: id, Object: "model", OwnedBy: "ragtime"})
}

// modelsFor lists the models the request's caller may name.
func (s *server) modelsFor(c echo.Context) []string {
	caller, _ := auth.CallerFrom(c.Request().Context())
	var ids []string
	if s.deps.DefaultModel != "" {
		ids = append(ids, s.deps.DefaultModel)
	}
	candidates := s.deps.AllowedModels
	if len(candidates) == 0 && caller.Key != nil {
		candidates = caller.Key.Models
	}
	for _, m := range candidates {
		if !slices.Contains(ids, m) && caller.AllowModel(m, s.deps.AllowedModels) == nil {
			ids = append(ids, m)
		}
	}
	return ids
}

// openAIRoute reports whether a path is answered in OpenAI's shapes.
func openAIRoute(path string) bool {
	return path == "/v1/chat/completions" || path == "/v1/models" || strings.HasPrefix(path, "/v1/models/")
}

// unknownOpenAIRoute reports whether a path that matched no route is one an
// OpenAI client may have tried: anything under /v1/ (POST /v1/responses
// from the Vercel AI SDK's default openai(model), /v1/completions,
// /v1/embeddings, ...). It is answered in OpenAI's shape, so that the SDK
// shows its message.
func unknownOpenAIRoute(path string) bool { return strings.HasPrefix(path, "/v1/") }

// noSuchOpenAIRoute is the 404 of an unknown /v1/ route: it names the
// chat completions route ragtime serves and the Vercel AI SDK's way to
// it.
func noSuchOpenAIRoute(r *http.Request) *apiError {
	return &apiError{Status: http.StatusNotFound, Code: "not_found", Message: fmt.Sprintf(
		"ragtime has no %s %.100s: its OpenAI-compatible API is POST /v1/chat/completions (and GET /v1/models). "+
			"With the Vercel AI SDK use the chat completions model, openai.chat(model), not openai(model), which calls /v1/responses",
		r.Method, r.URL.Path)}
}

// asOpenAIError puts ae in OpenAI's error shape, with ragtime's stable code
// as code and the field as param; the hint, which OpenAI's shape has no
// field for, ends the message.
func asOpenAIError(ae *apiError) openaiwire.Error {
	code := ae.Code
	e := openaiwire.Error{Message: ae.Message, Type: openAIErrorType(ae.Status), Code: &code}
	if ae.Hint != "" {
		e.Message += " (" + ae.Hint + ")"
	}
	if ae.Field != "" {
		f := ae.Field
		e.Param = &f
	}
	return e
}

// openAIErrorType is the error type OpenAI's clients expect with a status.
func openAIErrorType(status int) string {
	switch status {
	case http.StatusUnauthorized:
		return "authentication_error"
	case http.StatusForbidden:
		return "permission_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	}
	if status >= 500 {
		return "server_error"
	}
	return "invalid_request_error"
}
