package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"ragtime/auth"
	"ragtime/pipeline"
)

// askBody is the POST /ask JSON body; the integer knobs not given are
// pipeline.Unset (answerKnobs), the others' pointers tell absent from zero.
type askBody struct {
	Question  *string          `json:"question"`
	MaxTokens int              `json:"max_tokens"`
	Model     string           `json:"model"`
	Filters   *pipeline.Filter `json:"filters"`
	// PromptNonce goes first after the system prompt (pipeline.Request).
	PromptNonce string `json:"prompt_nonce"`
	answerKnobs
}

// handleAskGet serves GET /ask?q=…&top_k=…&rerank_top_n=…&max_tokens=…&model=…&doc_id=…
// for EventSource clients.
func (s *server) handleAskGet(c echo.Context) error {
	if id := c.Request().Header.Get("Last-Event-ID"); id != "" {
		return s.streams.resume(c, id)
	}
	// Parsed here rather than through c.QueryParams, which keeps the map
	// in echo's context for as long as the stream is open (0.5 KB per open
	// stream in make bench-streams); nothing reads it after the request is
	// built.
	qs := c.Request().URL.Query()
	// A misspelt parameter (topk=3) would otherwise be ignored silently and
	// the query run with the default, as POST /ask refuses unknown fields.
	for name := range qs {
		switch name {
		case "q", "question", "top_k", "rerank_top_n", "max_tokens", "model", "doc_id", "prompt_nonce", "retrieval", "vector_k", "lexical_k", "collapse", "ttft_budget_ms", "min_chunks", keyParam:
		default:
			return badRequest(nameOf(name), "unknown_parameter",
				fmt.Sprintf("unknown parameter %q; known: q, top_k, rerank_top_n, max_tokens, model, doc_id, prompt_nonce, retrieval, vector_k, lexical_k, collapse, ttft_budget_ms, min_chunks", name))
		}
	}
	req := pipeline.Request{Question: qs.Get("q"), Model: qs.Get("model"), Filter: pipeline.Filter{DocIDs: qs["doc_id"]}, PromptNonce: qs.Get("prompt_nonce"),
		Retrieval: qs.Get("retrieval"), Collapse: qs.Get("collapse")}
	if req.Question == "" {
		req.Question = qs.Get("question")
	}
	for _, f := range []struct {
		name string
		dst  *int
	}{{"top_k", &req.TopK}, {"rerank_top_n", &req.RerankTopN}, {"max_tokens", &req.MaxTokens}, {"vector_k", &req.VectorK}, {"lexical_k", &req.LexicalK},
		{"ttft_budget_ms", &req.TTFTBudgetMs}, {"min_chunks", &req.MinChunks}} {
		v, err := intParam(qs.Get(f.name), f.name)
		if err != nil {
			return err
		}
		if v != pipeline.Unset && (f.name == "vector_k" || f.name == "lexical_k") {
			if err := pipeline.CheckLegK(f.name, v); err != nil {
				return err
			}
		}
		*f.dst = v
	}
	if err := req.Filter.Check(); err != nil {
		return renameField(err, "doc_id") // GET names the filter's parameter doc_id
	}
	return s.ask(c, req)
}

func intParam(raw, name string) (int, error) {
	if raw == "" {
		return pipeline.Unset, nil
	}
	v, err := strconv.Atoi(strings.TrimSpace(raw))
	if err != nil {
		return 0, badRequest(name, name+"_invalid", fmt.Sprintf("%s must be a whole number, got %q", name, raw))
	}
	return v, nil
}

// handleAskPost serves POST /ask with a JSON body.
func (s *server) handleAskPost(c echo.Context) error {
	r := c.Request()
	if id := r.Header.Get("Last-Event-ID"); id != "" {
		// The body (the question again) is not needed; reading it to the
		// end lets net/http notice when this client goes away.
		if _, err := io.Copy(io.Discard, http.MaxBytesReader(c.Response(), r.Body, s.deps.MaxBodyBytes)); err != nil {
			return bodyError(err, s.deps.MaxBodyBytes)
		}
		return s.streams.resume(c, id)
	}
	if ct := r.Header.Get(echo.HeaderContentType); ct != "" && !strings.HasPrefix(ct, echo.MIMEApplicationJSON) {
		return &apiError{Status: http.StatusUnsupportedMediaType, Code: "unsupported_media_type",
			Message: "POST /ask takes a JSON body (Content-Type: application/json), got " + ct}
	}
	dec := json.NewDecoder(http.MaxBytesReader(c.Response(), r.Body, s.deps.MaxBodyBytes))
	dec.DisallowUnknownFields()
	body := askBody{MaxTokens: pipeline.Unset, answerKnobs: unsetAnswer()}
	if err := dec.Decode(&body); err != nil {
		return bodyError(err, s.deps.MaxBodyBytes)
	}
	// dec.More is not enough: it reports false for a stray ']' or '}'.
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return badRequest("", "body_invalid", "the body must hold exactly one JSON object")
	}
	req := pipeline.Request{Model: body.Model, MaxTokens: body.MaxTokens, PromptNonce: body.PromptNonce}
	if body.Question != nil {
		req.Question = *body.Question
	}
	if body.Filters != nil {
		req.Filter = *body.Filters
	}
	if err := body.apply(&req); err != nil {
		return err
	}
	return s.ask(c, req)
}

// bodyError explains a JSON body that could not be decoded, naming the
// field where it can.
func bodyError(err error, limit int64) error {
	var tooBig *http.MaxBytesError
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	switch {
	case errors.Is(err, errBodyTimeout):
		return err // answered 408 body_timeout
	case errors.As(err, &tooBig):
		return &apiError{Status: http.StatusRequestEntityTooLarge, Code: "body_too_large",
			Message: fmt.Sprintf("the body is larger than %d bytes", limit)}
	case errors.As(err, &typeErr) && typeErr.Field == "":
		return badRequest("", "body_invalid", fmt.Sprintf("the body must be a JSON object, got %s", typeErr.Value))
	case errors.As(err, &typeErr):
		field := jsonField(typeErr.Field)
		return badRequest(field, field+"_invalid",
			fmt.Sprintf("%s must be a JSON %s, got %s", field, typeErr.Type.Kind(), typeErr.Value))
	case errors.As(err, &syntaxErr):
		return badRequest("", "body_invalid", fmt.Sprintf("the body is not valid JSON (at byte %d): %v", syntaxErr.Offset, err))
	case errors.Is(err, io.EOF):
		return badRequest("question", "question_required", "the body is empty; send {\"question\": \"...\"}")
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		field := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return badRequest(nameOf(field), "unknown_field", fmt.Sprintf("unknown field %q; known: question, top_k, rerank_top_n, max_tokens, model, filters, prompt_nonce, retrieval, vector_k, lexical_k, collapse, ttft_budget_ms, min_chunks", field))
	default:
		return badRequest("", "body_invalid", "the body is not valid JSON: "+err.Error())
	}
}

// jsonField is the body's name for a field encoding/json names by its Go
// path: without the embedded knob structs (answerKnobs.top_k is top_k).
func jsonField(path string) string {
	for _, embedded := range []string{"answerKnobs.", "retrievalKnobs."} {
		path = strings.ReplaceAll(path, embedded, "")
	}
	return path
}

// ask validates req and, only when it is valid and the caller may ask for
// its model, starts the stream; its answer is left to the tail (deferTail).
func (s *server) ask(c echo.Context, req pipeline.Request) error {
	return s.admitAsk(c, &req, func(req *pipeline.Request) func() { return s.streams.run(c, s.deps.Asker, req) })
}

// admitAsk is every ask's way in, /ask's and /v1/chat/completions' alike:
// it validates req, checks that the caller may ask for its model, gives it
// the caller's tenant filter and key id, admits it (rate and concurrency
// limits; the wait is its queue stage) and runs answer with it, holding
// the admission until answer returns or, when answer returns the rest of
// the ask (an /ask stream's answer), until that rest has run as the
// request's tail (deferTail). Nothing is run, and no query recorded, when
// it returns an error.
func (s *server) admitAsk(c echo.Context, req *pipeline.Request, answer func(*pipeline.Request) (rest func())) error {
	caller, _ := auth.CallerFrom(c.Request().Context())
	defaults := s.deps.Defaults
	if caller.Key != nil && caller.Key.TTFTBudgetMs > 0 {
		defaults.TTFTBudgetMs = caller.Key.TTFTBudgetMs // the ask's own, then the key's, then serve's
	}
	if err := req.NormalizeWith(s.deps.MaxQuestionChars, defaults); err != nil {
		return err
	}
	if err := caller.AllowModel(req.Model, s.deps.AllowedModels); err != nil {
		return err
	}
	if caller.Key != nil {
		req.Scope, req.KeyID = caller.Key.Filter, caller.Key.ID
	}
	ticket, err := s.admit(c, caller, req)
	if err != nil {
		return err
	}
	held := ticket != nil // released here, unless the rest takes it
	defer func() {
		if held {
			ticket.Release()
		}
	}()
	rest := answer(req)
	if rest == nil {
		return nil
	}
	if ticket != nil {
		held = false
		deferTail(c, func() {
			defer ticket.Release()
			rest()
		})
		return nil
	}
	deferTail(c, rest)
	return nil
}
