package sim

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"ragtime/llm/tokens"
)

// Stats are the simulator's counters since New; tests use them to see what
// the simulator observed (a cancellation, a rejection).
type Stats struct {
	// Requests counts chat completion requests received.
	Requests int64
	// Completed counts requests answered in full.
	Completed int64
	// Cancelled counts requests whose client went away (or the server
	// closed) before the answer was complete.
	Cancelled int64
	// Rejected counts requests answered with an error status (400, 401, 404, ...).
	Rejected int64
	// Active is the number of requests being answered now.
	Active int64
	// TokensSent counts output tokens written to clients.
	TokensSent int64
}

// Server is the simulator as an http.Handler. It is safe for concurrent use.
type Server struct {
	cfg     Config
	counter *tokens.Counter
	mux     *http.ServeMux
	created int64

	ctx    context.Context
	cancel context.CancelFunc

	idPrefix string
	nextID   atomic.Uint64

	requests, completed, cancelled, rejected, active, tokensSent atomic.Int64
}

// New validates cfg, loads the token counter and returns a Server ready to
// serve. Call Close when done.
func New(cfg Config) (*Server, error) {
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("configure llmsim: %w", err)
	}
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = 8 << 20
	}
	counter, err := tokens.New(cfg.Encoding)
	if err != nil {
		return nil, fmt.Errorf("configure llmsim: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{
		cfg:      cfg,
		counter:  counter,
		mux:      http.NewServeMux(),
		created:  time.Now().Unix(),
		ctx:      ctx,
		cancel:   cancel,
		idPrefix: "chatcmpl-sim" + strconv.FormatInt(time.Now().UnixNano()%1e9, 36) + "-",
	}
	s.mux.HandleFunc("POST /v1/chat/completions", s.handleChat)
	s.mux.HandleFunc("GET /v1/models", s.handleModels)
	s.mux.HandleFunc("/", s.handleNotFound)
	return s, nil
}

// ServeHTTP serves the simulator's routes.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// Close stops every stream in progress (they count as cancelled). The Server
// answers nothing useful afterwards.
func (s *Server) Close() { s.cancel() }

// Stats returns a snapshot of the counters.
func (s *Server) Stats() Stats {
	return Stats{
		Requests:   s.requests.Load(),
		Completed:  s.completed.Load(),
		Cancelled:  s.cancelled.Load(),
		Rejected:   s.rejected.Load(),
		Active:     s.active.Load(),
		TokensSent: s.tokensSent.Load(),
	}
}

// Config returns the configuration the Server runs with.
func (s *Server) Config() Config { return s.cfg }

func (s *Server) modelName(requested string) string {
	switch {
	case s.cfg.Model != "":
		return s.cfg.Model
	case requested != "":
		return requested
	default:
		return DefaultModel
	}
}

func (s *Server) handleModels(w http.ResponseWriter, r *http.Request) {
	if !s.authorized(r) {
		s.writeAuthError(w)
		return
	}
	writeJSON(w, http.StatusOK, modelList{Object: "list", Data: []modelInfo{{
		ID: s.modelName(""), Object: "model", Created: s.created, OwnedBy: OwnedBy,
	}}})
}

func (s *Server) handleNotFound(w http.ResponseWriter, r *http.Request) {
	writeAPIError(w, http.StatusNotFound, "invalid_request_error", "not_found", "",
		fmt.Sprintf("llmsim (a simulator) serves POST /v1/chat/completions and GET /v1/models, not %s %s", r.Method, r.URL.Path))
}

// authorized reports whether r carries the configured key (always true when
// none is configured). The comparison takes constant time.
func (s *Server) authorized(r *http.Request) bool {
	if s.cfg.APIKey == "" {
		return true
	}
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && subtle.ConstantTimeCompare([]byte(got), []byte(s.cfg.APIKey)) == 1
}

func (s *Server) writeAuthError(w http.ResponseWriter) {
	writeAPIError(w, http.StatusUnauthorized, "invalid_request_error", "invalid_api_key", "",
		"Incorrect API key provided to llmsim (a simulator); send the key given with --api-key as 'Authorization: Bearer KEY'.")
}

// promptTokens counts the tokens of every message's content.
func (s *Server) promptTokens(msgs []chatMessage) int {
	n := 0
	for _, m := range msgs {
		n += s.counter.Count(string(m.Content))
	}
	return n
}

// plan is what the cost model decided for one request.
type plan struct {
	arrival      time.Time
	promptTokens int
	outputTokens int
	finish       string
	firstToken   time.Time
	itl          time.Duration
}

// tokenAt returns the modelled time the i-th output token (0-based) leaves.
func (p *plan) tokenAt(i int) time.Time {
	return p.firstToken.Add(time.Duration(i) * p.itl)
}

func (s *Server) handleChat(w http.ResponseWriter, r *http.Request) {
	arrival := time.Now()
	s.requests.Add(1)
	if !s.authorized(r) {
		s.rejected.Add(1)
		s.writeAuthError(w)
		return
	}
	req, err := decodeChatRequest(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	if err != nil {
		s.rejected.Add(1)
		var re *requestError
		if errors.As(err, &re) {
			status := re.Status
			if status == 0 {
				status = http.StatusBadRequest
			}
			writeAPIError(w, status, "invalid_request_error", "invalid_request", re.Param, re.Message)
			return
		}
		writeAPIError(w, http.StatusBadRequest, "invalid_request_error", "invalid_request", "", err.Error())
		return
	}
	if s.cfg.Model != "" && req.Model != s.cfg.Model {
		s.rejected.Add(1)
		writeAPIError(w, http.StatusNotFound, "invalid_request_error", "model_not_found", "model",
			fmt.Sprintf("The model %q does not exist on llmsim (a simulator); it serves %q (--model).", req.Model, s.cfg.Model))
		return
	}

	p := plan{arrival: arrival, promptTokens: s.promptTokens(req.Messages), outputTokens: s.cfg.OutputTokens, finish: "stop", itl: ms(s.cfg.ITLMs)}
	for _, limit := range []*int{req.MaxTokens, req.MaxCompletionTokens} {
		if limit != nil && *limit < p.outputTokens {
			p.outputTokens = *limit
			p.finish = "length"
		}
	}
	p.firstToken = arrival.Add(ms(s.cfg.PrefillMs + s.cfg.PrefillMsPerToken*float64(p.promptTokens)))

	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stop := context.AfterFunc(s.ctx, cancel)
	defer stop()

	s.active.Add(1)
	defer s.active.Add(-1)
	text := newTextSource(s.cfg.Seed, req.Messages)
	id := s.idPrefix + strconv.FormatUint(s.nextID.Add(1), 10)
	model := s.modelName(req.Model)
	var ok bool
	if req.Stream {
		ok = s.stream(ctx, w, req, &p, text, id, model)
	} else {
		ok = s.complete(ctx, w, &p, text, id, model)
	}
	if ok {
		s.completed.Add(1)
	} else {
		s.cancelled.Add(1)
	}
}

// stream writes the answer as server-sent chunks, each flushed the moment
// its token is due, and reports whether it finished.
func (s *Server) stream(ctx context.Context, w http.ResponseWriter, req *chatRequest, p *plan, text textSource, id, model string) bool {
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	h.Set("X-Request-Id", id)
	w.WriteHeader(http.StatusOK)

	enc := chunkEncoder{id: id, model: model, created: p.arrival.Unix()}
	buf := make([]byte, 0, 512)
	send := func(b []byte) bool {
		if _, err := w.Write(b); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	if !send(enc.role(buf[:0])) {
		return false
	}
	for i := range p.outputTokens {
		if !waitUntil(ctx, p.tokenAt(i)) {
			return false
		}
		if !send(enc.content(buf[:0], text.delta(i))) {
			return false
		}
		s.tokensSent.Add(1)
	}
	if p.outputTokens == 0 && !waitUntil(ctx, p.firstToken) {
		return false
	}
	buf = enc.finish(buf[:0], p.finish)
	if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
		buf = enc.usage(buf, p.usage())
	}
	buf = append(buf, "data: [DONE]\n\n"...)
	return send(buf)
}

// complete waits for the whole answer and writes it as one chat.completion.
func (s *Server) complete(ctx context.Context, w http.ResponseWriter, p *plan, text textSource, id, model string) bool {
	last := p.firstToken
	if p.outputTokens > 0 {
		last = p.tokenAt(p.outputTokens - 1)
	}
	if !waitUntil(ctx, last) {
		return false
	}
	var sb strings.Builder
	for i := range p.outputTokens {
		sb.WriteString(text.delta(i))
	}
	s.tokensSent.Add(int64(p.outputTokens))
	w.Header().Set("X-Request-Id", id)
	writeJSON(w, http.StatusOK, completion{
		ID: id, Object: "chat.completion", Created: p.arrival.Unix(), Model: model,
		Choices: []completionChoice{{Message: completionMessage{Role: "assistant", Content: sb.String()}, FinishReason: p.finish}},
		Usage:   p.usage(),
	})
	return true
}

func (p *plan) usage() usage {
	return usage{
		PromptTokens:        p.promptTokens,
		CompletionTokens:    p.outputTokens,
		TotalTokens:         p.promptTokens + p.outputTokens,
		PromptTokensDetails: &promptTokensDetails{CachedTokens: 0},
	}
}

// chunkEncoder writes chat.completion.chunk events without reflection: the
// per-token path is the simulator's hot loop.
type chunkEncoder struct {
	id, model string
	created   int64
}

func (e *chunkEncoder) head(b []byte) []byte {
	b = append(b, `data: {"id":`...)
	b = appendJSONString(b, e.id)
	b = append(b, `,"object":"chat.completion.chunk","created":`...)
	b = strconv.AppendInt(b, e.created, 10)
	b = append(b, `,"model":`...)
	b = appendJSONString(b, e.model)
	return b
}

func (e *chunkEncoder) role(b []byte) []byte {
	b = e.head(b)
	return append(b, `,"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`+"\n\n"...)
}

func (e *chunkEncoder) content(b []byte, text string) []byte {
	b = e.head(b)
	b = append(b, `,"choices":[{"index":0,"delta":{"content":`...)
	b = appendJSONString(b, text)
	return append(b, `},"finish_reason":null}]}`+"\n\n"...)
}

func (e *chunkEncoder) finish(b []byte, reason string) []byte {
	b = e.head(b)
	b = append(b, `,"choices":[{"index":0,"delta":{},"finish_reason":`...)
	b = appendJSONString(b, reason)
	return append(b, "}]}\n\n"...)
}

func (e *chunkEncoder) usage(b []byte, u usage) []byte {
	b = e.head(b)
	b = append(b, `,"choices":[],"usage":`...)
	j, _ := json.Marshal(u) // a struct of ints cannot fail to encode
	b = append(b, j...)
	return append(b, "}\n\n"...)
}

// appendJSONString appends s as a JSON string.
func appendJSONString(b []byte, s string) []byte {
	j, err := json.Marshal(s)
	if err != nil {
		return append(b, `""`...)
	}
	return append(b, j...)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v) // the client may be gone; nothing to do then
}

func writeAPIError(w http.ResponseWriter, status int, typ, code, param, msg string) {
	body := apiError{Error: apiErrorBody{Message: msg, Type: typ}}
	if code != "" {
		body.Error.Code = &code
	}
	if param != "" {
		body.Error.Param = &param
	}
	writeJSON(w, status, body)
}
