package sim

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"ragtime/internal/openaiwire"
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
	// Rejected counts requests answered with an error status (400, 401,
	// 404, 429, 500), injected faults included.
	Rejected int64
	// Faults counts injected faults of every kind.
	Faults int64
	// Active is the number of requests being answered now.
	Active int64
	// TokensSent counts output tokens (reasoning included) written to clients.
	TokensSent int64
	// PromptTokens and CachedTokens sum the prompt tokens of admitted
	// requests and those of them served from a prefix cache.
	PromptTokens, CachedTokens int64
	// Embeds and Reranks count embedding and rerank requests received.
	Embeds, Reranks int64
	// Steps counts engine steps (continuous batching only).
	Steps int64
	// TokenWrites counts the writes (each one write and flush) that carried
	// streamed tokens; TokensSent / TokenWrites above 1 means writers fell
	// behind and coalesced.
	TokenWrites int64
	// LagP99 is the scheduler's lag: the 99th percentile (bucket upper
	// bound) of how late the engines' drivers woke past a due step, in
	// seconds.
	LagP99 float64
	// WriterLagP99 is the writers' lag: the 99th percentile (bucket upper
	// bound) over writes of how long after the modelled release of the
	// oldest token in a write it was flushed, in seconds. It includes the
	// scheduler's lag.
	WriterLagP99 float64
	// FirstTokenLagP99 is the 99th percentile (bucket upper bound) of how
	// long after its modelled time a stream's first token was flushed, in
	// seconds.
	FirstTokenLagP99 float64
	// AnswerLagP99 is the 99th percentile (bucket upper bound) of how late
	// embedding and rerank handlers woke past their modelled latency, in
	// seconds (0 before the first).
	AnswerLagP99 float64
}

// Server is the simulator as an http.Handler. It is safe for concurrent use.
type Server struct {
	cfg     Config
	counter *tokens.Counter
	memo    *tokenMemo
	faults  []faultRate
	mux     *http.ServeMux
	created int64
	metrics *serverMetrics

	ctx     context.Context
	cancel  context.CancelFunc
	drivers []*driver
	alarm   *alarm
	wg      sync.WaitGroup
	rr      atomic.Uint64

	rngMu sync.Mutex
	rng   *rand.Rand

	idPrefix string
	nextID   atomic.Uint64

	requests, completed, cancelled, rejected, faultCount, active, tokensSent atomic.Int64
	embeds, reranks, tokenWrites                                             atomic.Int64
	// engined counts the chat requests handed to an engine (PrefillShiftAfter).
	engined atomic.Int64
}

// New validates cfg, loads the token counter, starts one scheduler
// goroutine per replica and returns a Server ready to serve. Call Close when
// done.
func New(cfg Config) (*Server, error) {
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("configure llmsim: %w", err)
	}
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = 8 << 20
	}
	if cfg.Replicas < 1 {
		cfg.Replicas = 1
	}
	if cfg.Routing == "" {
		cfg.Routing = "round-robin"
	}
	if cfg.ReasoningField == "" {
		cfg.ReasoningField = "reasoning_content"
	}
	faults, _ := parseFaults(cfg.Faults) // validated above
	counter, err := tokens.New(cfg.Encoding)
	if err != nil {
		return nil, fmt.Errorf("configure llmsim: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{
		cfg:      cfg,
		counter:  counter,
		memo:     newTokenMemo(64 << 20),
		faults:   faults,
		mux:      http.NewServeMux(),
		created:  time.Now().Unix(),
		metrics:  newServerMetrics(),
		ctx:      ctx,
		cancel:   cancel,
		rng:      rand.New(rand.NewPCG(uint64(cfg.Seed), 0x33)),
		idPrefix: "chatcmpl-sim" + strconv.FormatInt(time.Now().UnixNano()%1e9, 36) + "-",
	}
	s.alarm = newAlarm(!cfg.CoarseTimers)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.alarm.run(ctx)
	}()
	for i := range cfg.Replicas {
		d := newDriver(newEngine(cfg, uint64(cfg.Seed)+uint64(i)), s.alarm, s.metrics.schedulerLag, !cfg.CoarseTimers)
		s.drivers = append(s.drivers, d)
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			d.run(ctx)
		}()
	}
	s.mux.HandleFunc("POST /v1/chat/completions", s.handleChat)
	s.mux.HandleFunc("GET /v1/models", s.handleModels)
	s.mux.HandleFunc("GET /metrics", s.handleMetrics)
	s.mux.HandleFunc("POST /v1/embeddings", s.handleEmbeddings)
	s.mux.HandleFunc("POST /api/embed", s.handleOllamaEmbed)
	for _, p := range []string{"/rerank", "/v1/rerank", "/v2/rerank"} {
		s.mux.HandleFunc("POST "+p, s.handleRerank)
	}
	s.mux.HandleFunc("/", s.handleNotFound)
	return s, nil
}

// newEngine builds one engine as cfg describes.
func newEngine(cfg Config, seed uint64) engine {
	c := costsOf(cfg)
	cache := newPrefixCache(cfg.KVCacheBlocks)
	if cfg.MaxNumSeqs <= 0 {
		return newIdealEngine(c, cache, seed)
	}
	return newBatchEngine(c, cache, cfg.MaxNumSeqs, seed)
}

func costsOf(cfg Config) costs {
	return costs{
		overhead:  cfg.PrefillMs,
		perToken:  cfg.PrefillMsPerToken,
		quadratic: cfg.PrefillMsQuadratic,
		itl:       cfg.ITLMs,
		perSeq:    cfg.ITLMsPerSeq,
		jitter:    cfg.ITLJitter,
		chunk:     cfg.ChunkedPrefillTokens,
	}
}

// ServeHTTP serves the simulator's routes.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// Close stops every stream in progress (they count as cancelled). The Server
// answers nothing useful afterwards.
func (s *Server) Close() {
	s.cancel()
	s.wg.Wait()
}

// Stats returns a snapshot of the counters.
func (s *Server) Stats() Stats {
	return Stats{
		Requests:         s.requests.Load(),
		Completed:        s.completed.Load(),
		Cancelled:        s.cancelled.Load(),
		Rejected:         s.rejected.Load(),
		Faults:           s.faultCount.Load(),
		Active:           s.active.Load(),
		TokensSent:       s.tokensSent.Load(),
		PromptTokens:     s.metrics.prefixQueries.Load(),
		CachedTokens:     s.metrics.prefixHits.Load(),
		Embeds:           s.embeds.Load(),
		Reranks:          s.reranks.Load(),
		Steps:            s.steps(),
		TokenWrites:      s.tokenWrites.Load(),
		LagP99:           s.metrics.schedulerLag.quantile(0.99),
		WriterLagP99:     s.metrics.writerLag.quantile(0.99),
		FirstTokenLagP99: s.metrics.firstWriteLag.quantile(0.99),
		AnswerLagP99:     s.metrics.answerLag.quantile(0.99),
	}
}

func (s *Server) steps() int64 {
	var n int64
	for _, d := range s.drivers {
		n += d.steps.Load()
	}
	return n
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
	writeJSON(w, http.StatusOK, openaiwire.ModelList{Object: "list", Data: []openaiwire.Model{{
		ID: s.modelName(""), Object: "model", Created: s.created, OwnedBy: OwnedBy,
	}}})
}

func (s *Server) handleNotFound(w http.ResponseWriter, r *http.Request) {
	writeAPIError(w, http.StatusNotFound, "invalid_request_error", "not_found", "",
		fmt.Sprintf("llmsim (a simulator) serves POST /v1/chat/completions, POST /v1/embeddings, POST /api/embed, POST /rerank (also /v1/rerank, /v2/rerank), GET /v1/models and GET /metrics, not %s %s", r.Method, r.URL.Path))
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

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v) // the client may be gone; nothing to do then
}

func writeAPIError(w http.ResponseWriter, status int, typ, code, param, msg string) {
	body := openaiwire.ErrorResponse{Error: openaiwire.Error{Message: msg, Type: typ}}
	if code != "" {
		body.Error.Code = &code
	}
	if param != "" {
		body.Error.Param = &param
	}
	writeJSON(w, status, body)
}
