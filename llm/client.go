package llm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
	"unicode"

	"ragtime"
	"ragtime/internal/openaiwire"
	"ragtime/internal/upstream"
	"ragtime/pipeline"
)

// Config configures any of the HTTP generators (OpenAI-compatible,
// Anthropic, Ollama).
type Config struct {
	// BaseURL is the API root, e.g. https://api.openai.com/v1,
	// https://api.anthropic.com/v1 or http://127.0.0.1:11434; the
	// provider's chat path is appended to it.
	BaseURL string
	// Model is the default model; GenerateRequest.Model overrides it.
	Model string
	// APIKey is sent as the provider's credential when not empty.
	// Surrounding whitespace is trimmed; it never appears in logs or errors.
	APIKey string
	// KeyEnv names the environment variable the key was read from, for
	// hints; empty means RAGTIME_LLM_API_KEY.
	KeyEnv string
	// Timeout bounds the whole generation, retries included. Zero means no
	// bound beyond the caller's context.
	Timeout time.Duration
	// TTFTTimeout bounds the wait for the first token (of any kind) of each
	// attempt. Zero means no bound of its own.
	TTFTTimeout time.Duration
	// MaxRetries is how many times a call that failed before its first
	// token (rate limited, unavailable, no connection) is tried again,
	// after a jittered exponential backoff. Never after the first token.
	MaxRetries int
	// Pool holds the shared keep-alive transport of the provider's host;
	// nil means upstream.Default().
	Pool *upstream.Pool
	// HTTPClient replaces the pooled client when set (tests).
	HTTPClient *http.Client
	// Getenv reads the proxy variables named in hints; nil means os.Getenv.
	Getenv func(string) string
}

// OpenAIConfig configures the OpenAI-compatible generator.
type OpenAIConfig = Config

// dialect is what differs between providers' wire formats; the client does
// everything else (transport, timing, retries, error classification) once.
type dialect interface {
	// provider is the Generation.Provider value.
	provider() string
	// chatPath and modelsPath are appended to the base URL.
	chatPath() string
	modelsPath() string
	// body is the streaming request's body, to be encoded as JSON.
	body(model string, req *pipeline.GenerateRequest) any
	// authorize sets the credential headers (key is not empty) and any
	// fixed headers the provider requires.
	authorize(h http.Header, key string)
	// streamType reports whether a response Content-Type is the stream.
	streamType(contentType string) bool
	// newStream returns the parser of one response body.
	newStream(gen *pipeline.Generation, emit func(pipeline.Delta) error, sc upstream.Scrubber) stream
	// models reads the model ids out of a models listing.
	models(body []byte) ([]string, error)
}

// stream parses one streamed response body.
type stream interface {
	// run reads until the end marker, the end of the body or an error. It
	// returns emitError for emit failures, *ragtime.Error for malformed
	// streams and the read error otherwise.
	run(body io.Reader) error
	// ended reports whether the end marker was seen (so the rest of the
	// body can be drained and the connection reused).
	ended() bool
}

// client is the provider-independent part of every HTTP generator.
type client struct {
	d            dialect
	base         string // the base URL without a trailing slash, query or fragment
	redactedBase string
	model        string
	key          string
	keyEnv       string
	timeout      time.Duration
	ttftTimeout  time.Duration
	maxRetries   int
	http         *upstream.Client
	scrubber     upstream.Scrubber
	getenv       func(string) string
}

// newClient checks cfg for the named provider and builds the client.
func newClient(cfg Config, d dialect, defaultBase string) (*client, error) {
	name := d.provider()
	base := strings.TrimSpace(cfg.BaseURL)
	if base == "" {
		base = defaultBase
	}
	if base == "" {
		return nil, fmt.Errorf("--llm-base-url is required for the %s generator (for example https://api.openai.com/v1)", name)
	}
	u, err := url.Parse(base)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the url.Error text repeats the URL, which may hold credentials
		}
		return nil, fmt.Errorf("--llm-base-url is not a valid URL: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("--llm-base-url %s: the scheme must be http or https", u.Redacted())
	}
	if u.Host == "" {
		return nil, fmt.Errorf("--llm-base-url %s: a host is required", u.Redacted())
	}
	if strings.TrimSpace(cfg.Model) == "" {
		return nil, fmt.Errorf("--llm-model is required for the %s generator", name)
	}
	if cfg.Timeout < 0 || cfg.TTFTTimeout < 0 {
		return nil, fmt.Errorf("llm timeouts must not be negative, got --llm-timeout %s and --llm-ttft-timeout %s", cfg.Timeout, cfg.TTFTTimeout)
	}
	if cfg.MaxRetries < 0 {
		return nil, fmt.Errorf("--llm-max-retries must be 0 or more, got %d", cfg.MaxRetries)
	}
	keyEnv := cfg.KeyEnv
	if keyEnv == "" {
		keyEnv = "RAGTIME_LLM_API_KEY"
	}
	key := strings.TrimSpace(cfg.APIKey)
	if strings.IndexFunc(key, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0 {
		return nil, fmt.Errorf("%s contains whitespace or a control character inside it; set it to the bare key", keyEnv)
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawPath, u.RawQuery, u.Fragment = "", "", ""
	c := &client{
		d:            d,
		base:         u.String(),
		redactedBase: u.Redacted(),
		model:        strings.TrimSpace(cfg.Model),
		key:          key,
		keyEnv:       keyEnv,
		timeout:      cfg.Timeout,
		ttftTimeout:  cfg.TTFTTimeout,
		maxRetries:   cfg.MaxRetries,
		scrubber:     upstream.NewScrubber(key),
		getenv:       cfg.Getenv,
	}
	switch {
	case cfg.HTTPClient != nil:
		c.http = upstream.FromHTTP(cfg.HTTPClient)
	case cfg.Pool != nil:
		c.http = cfg.Pool.Client(c.base)
	default:
		c.http = upstream.Default().Client(c.base)
	}
	return c, nil
}

// Model returns the configured default model.
func (c *client) Model() string { return c.model }

// BaseURL returns the configured base URL with any credentials in it masked.
func (c *client) BaseURL() string { return c.redactedBase }

// CloseIdleConnections closes the pooled connections that are not in use,
// for shutdown (and for measuring a cold connection).
func (c *client) CloseIdleConnections() { c.http.CloseIdleConnections() }

// drainWait bounds how long a finished stream is read on after its end
// marker so its connection can go back to the pool.
const drainWait = 250 * time.Millisecond

// Timeout causes.
var (
	errDrained = errors.New("stopped draining the finished stream")
	// errTTFTTimeout: no first token within Config.TTFTTimeout.
	errTTFTTimeout = fmt.Errorf("no first token within --llm-ttft-timeout: %w", context.DeadlineExceeded)
	// errOverallTimeout: the generation took longer than Config.Timeout.
	errOverallTimeout = fmt.Errorf("the generation took longer than --llm-timeout: %w", context.DeadlineExceeded)
)

// Backoff between retries: exponential from retryBase, capped, with jitter;
// a Retry-After longer than maxRetryAfter is not waited for.
const (
	retryBase     = 200 * time.Millisecond
	retryCap      = 5 * time.Second
	maxRetryAfter = 30 * time.Second
)

// Generate streams one answer, calling emit for every non-empty content or
// reasoning delta, and fills gen. A failure before the first delta reached
// emit is retried up to MaxRetries times when it is worth retrying. See
// pipeline.Generator for the contract.
func (c *client) Generate(ctx context.Context, req *pipeline.GenerateRequest, emit func(pipeline.Delta) error, gen *pipeline.Generation) error {
	model := c.model
	if req.Model != "" {
		model = req.Model
	}
	rb, err := encodeBody(c.d.body(model, req))
	if err != nil {
		*gen = pipeline.Generation{Provider: c.d.provider(), Model: model}
		return &ragtime.Error{Stage: ragtime.StageLLMConnect, Kind: ragtime.KindInternal, Code: ragtime.CodeInternal, Message: "encoding the chat request failed", Err: err}
	}
	callCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var deadline time.Time
	if c.timeout > 0 {
		deadline = time.Now().Add(c.timeout)
		t := time.AfterFunc(c.timeout, func() { cancel(errOverallTimeout) })
		defer t.Stop()
	}
	emitted := false
	counted := func(d pipeline.Delta) error {
		if !emitted {
			// No retry after the first token: the prompt need not be kept
			// while the rest of the answer streams.
			emitted = true
			rb.release()
		}
		return emit(d)
	}
	start := time.Now()
	for attempt := 0; ; attempt++ {
		retryAfter, err := c.attempt(ctx, callCtx, cancel, start, model, rb, counted, gen)
		gen.RequestStart, gen.Retries = start, attempt
		if err == nil || emitted || attempt >= c.maxRetries || !retryable(err) {
			return err
		}
		if err := waitRetry(ctx, callCtx, attempt, retryAfter, deadline, gen, err); err != nil {
			return err
		}
	}
}

// waitRetry waits before retry attempt+1 of a generation that failed with
// err; it returns err, or the context's error, when the retry is not to be
// made. Apart from Generate, whose frame is on the answer's stack for as
// long as the answer streams.
func waitRetry(ctx, callCtx context.Context, attempt int, retryAfter time.Duration, deadline time.Time, gen *pipeline.Generation, err error) error {
	wait := backoff(attempt, retryAfter)
	if retryAfter > maxRetryAfter || (!deadline.IsZero() && time.Now().Add(wait).After(deadline)) {
		return err // the wait would outlast what we may spend
	}
	t := time.NewTimer(wait)
	select {
	case <-callCtx.Done():
		t.Stop()
		if e := contextError(ctx, callCtx, gen); e != nil {
			return e
		}
		return err
	case <-t.C:
		return nil
	}
}

// retryable reports whether a failure before the first token is worth
// another attempt: the provider was busy, failing, or not reachable.
func retryable(err error) bool {
	var pe *ragtime.Error
	if !errors.As(err, &pe) {
		return false
	}
	switch pe.Kind {
	case ragtime.KindRateLimited, ragtime.KindUpstream:
		return true
	}
	return pe.Status == http.StatusGatewayTimeout
}

// backoff is the wait before retry attempt+1: at least retryAfter, else
// 200 ms·2^attempt (capped at 5 s) with full jitter over its upper half.
func backoff(attempt int, retryAfter time.Duration) time.Duration {
	d := retryBase << min(attempt, 10)
	d = min(d, retryCap)
	d = d/2 + rand.N(d/2+1)
	return max(d, retryAfter)
}

// attempt makes one upstream call, observed in gen (reset first). parent
// is the caller's context, call the generation's (carrying the overall
// timeout), which cancel ends with a cause: attempt ends it when no first
// token comes within the TTFT timeout (an error never retried) and when a
// finished stream's drain takes too long (after which nothing is tried
// again), and does not otherwise; a failed attempt's upstream call ends
// with its body's Close. One context per generation rather than one more
// per attempt: the parent's map of children and the context itself were
// some 300 bytes held for as long as the answer streams (make
// bench-streams). gen is the caller's, by pointer: the answer's goroutine parks
// in this call for as long as the answer streams, and a Generation (some
// 300 bytes) returned by value took room in this frame and the caller's.
// With it the deepest point of a stream, parsing a chunk outside the fast
// path (fastjson recursing four levels deep), passed the 8 KB stack and
// every answer goroutine held 16 KB (make bench-streams, gdb over
// runtime.allgs).
func (c *client) attempt(parent, actx context.Context, cancel context.CancelCauseFunc, start time.Time, model string, body *requestBody, emit func(pipeline.Delta) error, gen *pipeline.Generation) (retryAfter time.Duration, err error) {
	*gen = pipeline.Generation{Provider: c.d.provider(), Model: model}
	firstSeen := false
	var ttft *time.Timer
	if c.ttftTimeout > 0 {
		ttft = time.AfterFunc(c.ttftTimeout, func() { cancel(errTTFTTimeout) })
		defer ttft.Stop()
	}
	firstStop := func(d pipeline.Delta) error {
		if !firstSeen {
			firstSeen = true
			if ttft != nil {
				ttft.Stop()
			}
		}
		return emit(d)
	}
	tr := &upstream.Trace{TakeWarm: true}
	defer func() { fill(gen, tr) }()
	body.tr = tr

	httpReq, err := c.chatRequest(actx, body)
	if err != nil {
		return 0, err
	}

	// The generation's start, so that llm_connect holds earlier attempts and
	// their backoff (the retries attr says how many) from the first delta on.
	gen.RequestStart = start
	resp, err := c.http.Do(httpReq, tr)
	fill(gen, tr)
	if err != nil {
		return 0, c.transportError(parent, actx, gen, err)
	}
	defer resp.Body.Close()
	gen.UpstreamStatus = resp.StatusCode
	gen.RequestID = c.requestID(resp.Header)

	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return c.failedStatus(parent, actx, gen, resp, model)
	}
	if !c.d.streamType(resp.Header.Get("Content-Type")) {
		return 0, c.notAStream(parent, actx, gen, resp)
	}

	hold := &deltaHold{emit: firstStop, body: resp.Body, received: tr.Received}
	st := c.d.newStream(gen, hold.add, c.scrubber)
	if err := c.streamError(parent, actx, gen, hold, st.run(hold)); err != nil {
		return 0, err
	}
	if st.ended() {
		drain(resp.Body, cancel)
	}
	return 0, nil
}

// chatRequest builds the chat request with body.
func (c *client) chatRequest(ctx context.Context, body *requestBody) (*http.Request, error) {
	httpReq, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+c.d.chatPath(), nil)
	if err != nil {
		return nil, &ragtime.Error{Stage: ragtime.StageLLMConnect, Kind: ragtime.KindUpstream, Code: CodeConnect, Message: "building the chat request failed", Hint: "check --llm-base-url", Err: c.scrubber.Wrap(err)}
	}
	httpReq.Body, httpReq.ContentLength, httpReq.GetBody = body.reader(), int64(len(body.b)), body.getBody
	httpReq.Header.Set("Content-Type", "application/json")
	c.d.authorize(httpReq.Header, c.key)
	return httpReq, nil
}

// The answer's goroutine parks in attempt's frame for as long as the
// answer streams: what only a failure needs is built in the functions
// below, so that its temporaries do not widen that frame.

// failedStatus reads a non-2xx answer into its error, and the wait its
// Retry-After asks for.
func (c *client) failedStatus(parent, actx context.Context, gen *pipeline.Generation, resp *http.Response, model string) (time.Duration, error) {
	errBody := upstream.ReadErrorBody(resp.Body)
	if e := contextError(parent, actx, gen); e != nil {
		return 0, e
	}
	wait, _, _ := upstream.RetryAfter(resp.Header)
	return wait, c.statusError(gen, resp.StatusCode, resp.Header, errBody, model)
}

// notAStream is the error of a 2xx answer that is not an event stream.
func (c *client) notAStream(parent, actx context.Context, gen *pipeline.Generation, resp *http.Response) error {
	head, _ := io.ReadAll(io.LimitReader(resp.Body, 200))
	if e := contextError(parent, actx, gen); e != nil {
		return e
	}
	return &ragtime.Error{
		Stage: ragtime.StageLLMPrefill, Kind: ragtime.KindUpstreamMalformed, Code: CodeBadStream, Status: resp.StatusCode, RequestID: gen.RequestID,
		Message: fmt.Sprintf("the model provider at %s answered %q instead of a stream; first bytes: %q",
			c.redactedBase, resp.Header.Get("Content-Type"), c.scrubber.Scrub(string(head))),
		Hint: fmt.Sprintf("check --llm-base-url points at a %s API that supports streaming (and --llm-provider matches it)", c.d.provider()),
	}
}

// streamError classifies how a stream's read ended (err, run's), after
// the held delta is sent: nil when it ended well.
func (c *client) streamError(parent, actx context.Context, gen *pipeline.Generation, hold *deltaHold, err error) error {
	var ee emitError
	if !errors.As(err, &ee) {
		// The last delta, or the one before a malformed chunk or a broken
		// connection: received, so sent before anything else is said.
		if herr := hold.release(); herr != nil {
			err = emitError{herr}
		}
	}
	switch {
	case errors.As(err, &ee):
		// The deferred Body.Close, and Generate's cancel, abort the upstream call.
		return ee.err
	case err != nil:
		var pe *ragtime.Error
		if errors.As(err, &pe) {
			if e := contextError(parent, actx, gen); e != nil {
				return e
			}
			return pe
		}
		return c.transportError(parent, actx, gen, err)
	}
	if e := contextError(parent, actx, gen); e != nil {
		return e
	}
	return nil
}

// drain reads on to the end of a finished stream's body, for a while, so
// that its connection is reused.
func drain(body io.Reader, cancel context.CancelCauseFunc) {
	stop := time.AfterFunc(drainWait, func() { cancel(errDrained) })
	_, _ = io.Copy(io.Discard, io.LimitReader(body, 64<<10))
	stop.Stop()
}

// requestBody is a chat request's body (the whole prompt, often several
// KB), read again by each attempt and by the transport's own retry until
// release. The transport holds a request until its response ends, so a
// body read from a bytes.Reader would stay alive for as long as the answer
// streams; release, at the first token (after which nothing is retried),
// lets the collector have it while the stream is held open.
//
// The body is encoded into a pooled buffer, which release gives back when
// it was read once, by the one attempt, whose request the transport wrote
// whole (the trace's WroteRequest): the transport reads it no more. Each
// generation's body was a new allocation of the prompt's size.
type requestBody struct {
	b     []byte
	buf   *[]byte         // b's backing array, from bodyBufs
	tr    *upstream.Trace // the attempt sending it
	reads int             // readers made: one unless the request was sent again
}

// bodyBufs holds chat request bodies' buffers between generations.
var bodyBufs sync.Pool

// maxPooledBody bounds the buffers kept in bodyBufs.
const maxPooledBody = 64 << 10

// encodeBody encodes v as JSON (the bytes of json.Marshal) into a pooled
// buffer.
func encodeBody(v any) (*requestBody, error) {
	bp, _ := bodyBufs.Get().(*[]byte)
	if bp == nil {
		bp = new([]byte)
	}
	w := &appendWriter{b: (*bp)[:0]}
	if err := json.NewEncoder(w).Encode(v); err != nil {
		return nil, err
	}
	return &requestBody{b: w.b[:len(w.b)-1], buf: bp}, nil // without Encode's newline
}

// appendWriter appends what is written to b.
type appendWriter struct{ b []byte }

func (w *appendWriter) Write(p []byte) (int, error) {
	w.b = append(w.b, p...)
	return len(p), nil
}

// release lets go of the body: no attempt is made after it.
func (rb *requestBody) release() {
	if rb.buf != nil && rb.reads == 1 && rb.tr != nil && !rb.tr.WroteRequest().IsZero() && cap(rb.b) <= maxPooledBody {
		*rb.buf = rb.b[:0]
		bodyBufs.Put(rb.buf)
	}
	rb.b, rb.buf, rb.tr = nil, nil, nil
}

// reader reads the body from its start.
func (rb *requestBody) reader() io.ReadCloser {
	rb.reads++
	return &bodyReader{rest: rb.b}
}

// getBody is http.Request.GetBody.
func (rb *requestBody) getBody() (io.ReadCloser, error) { return rb.reader(), nil }

// bodyReader reads a requestBody and lets go of it once read.
type bodyReader struct{ rest []byte }

func (r *bodyReader) Read(p []byte) (int, error) {
	if len(r.rest) == 0 {
		r.rest = nil
		return 0, io.EOF
	}
	n := copy(p, r.rest)
	r.rest = r.rest[n:]
	if len(r.rest) == 0 {
		r.rest = nil // an empty tail still points into the body
	}
	return n, nil
}

// Close does nothing: the transport may close a body while its write loop
// still reads it, and a read to the end lets go of it anyway.
func (r *bodyReader) Close() error { return nil }

// requestID is the upstream's request id from the headers providers use,
// kept only when it is shaped like one (pipeline.SafeRequestID) and the key
// scrubber finds nothing key-like in it.
func (c *client) requestID(h http.Header) string {
	for _, k := range []string{"X-Request-Id", "Request-Id", "X-Amzn-Requestid", "Cf-Ray"} {
		if v := h.Get(k); v != "" {
			if c.scrubber.Scrub(v) != v {
				return ""
			}
			return pipeline.SafeRequestID(v)
		}
	}
	return ""
}

// ListModels asks the provider which models it serves (GET /models, or
// Ollama's /api/tags).
func (c *client) ListModels(ctx context.Context) ([]string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+c.d.modelsPath(), nil)
	if err != nil {
		return nil, fmt.Errorf("building the models request: %w", c.scrubber.Wrap(err))
	}
	c.d.authorize(req.Header, c.key)
	req.Header.Del("Accept")
	resp, err := c.http.Do(req, nil)
	if err != nil {
		var gen pipeline.Generation
		return nil, c.transportError(ctx, nil, &gen, err)
	}
	defer resp.Body.Close()
	body, err := upstream.ReadLimited(resp.Body, 4<<20)
	if err != nil {
		return nil, fmt.Errorf("reading the models list from %s: %w", c.redactedBase, c.scrubber.Wrap(err))
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		gen := pipeline.Generation{UpstreamStatus: resp.StatusCode, RequestID: c.requestID(resp.Header)}
		e := c.statusError(&gen, resp.StatusCode, resp.Header, body, c.model)
		if e.Kind == ragtime.KindUpstreamNotFound {
			e.Message = fmt.Sprintf("%s%s was not found (HTTP %d)", c.redactedBase, c.d.modelsPath(), resp.StatusCode)
			e.Hint = "check --llm-base-url (OpenAI-compatible servers usually need the /v1 suffix) and --llm-provider"
		}
		return nil, e
	}
	ids, err := c.d.models(body)
	if err != nil {
		return nil, fmt.Errorf("reading the models list from %s: %w; first bytes: %q", c.redactedBase, err, c.scrubber.Scrub(upstream.Truncate(string(body), 200)))
	}
	return ids, nil
}

// Warmup opens a keep-alive connection to the provider ahead of the first
// user (DNS, TCP and TLS paid now) by listing models; any HTTP answer counts
// as success, since the connection is what is being warmed. With request
// set it also sends a 1-token generation, which warms the server side too.
func (c *client) Warmup(ctx context.Context, request bool) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+c.d.modelsPath(), nil)
	if err != nil {
		return fmt.Errorf("building the warm-up request: %w", c.scrubber.Wrap(err))
	}
	c.d.authorize(req.Header, c.key)
	resp, err := c.http.Do(req, nil)
	if err != nil {
		var gen pipeline.Generation
		return c.transportError(ctx, nil, &gen, err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<20))
	resp.Body.Close()
	if !request {
		return nil
	}
	var gen pipeline.Generation
	return c.Generate(ctx, &pipeline.GenerateRequest{MaxTokens: 1, Messages: []pipeline.Message{{Role: "user", Content: "Say OK."}}},
		func(pipeline.Delta) error { return nil }, &gen)
}

// Prewarm dials a connection to the provider in the background when its
// pool holds no idle one (a server that closes after each stream, a pool
// gone idle), for the generation that follows retrieval
// (pipeline.Prewarmer).
func (c *client) Prewarm(ctx context.Context) { c.http.Prewarm(ctx) }

// decodeModelIDs reads {"data": [{"id": ...}]} (OpenAI, Anthropic, vLLM,
// llama.cpp, the simulator).
func decodeModelIDs(body []byte) ([]string, error) {
	var list openaiwire.ModelList
	if err := json.Unmarshal(body, &list); err != nil {
		return nil, fmt.Errorf("the models list is not JSON: %w", err)
	}
	if list.Data == nil {
		return nil, errors.New(`the models list has no "data" array`)
	}
	ids := make([]string, 0, len(list.Data))
	for _, m := range list.Data {
		ids = append(ids, m.ID)
	}
	return ids, nil
}

// fill copies what tr observed into gen.
func fill(gen *pipeline.Generation, tr *upstream.Trace) {
	gen.GotConn, gen.WroteRequest, gen.Conn = tr.GotConn(), tr.WroteRequest(), tr.Conn()
}
