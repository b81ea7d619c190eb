package llm

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strings"
	"sync"
	"time"
	"unicode"

	"ragtime/pipeline"
)

// Why a thin client of our own rather than langchaingo's OpenAI client: a
// source reading of langchaingo v0.1.14 found that its streaming callback is
// also called with empty chunks (role-only and finish deltas), that a context
// cancelled mid-stream can come back as partial content with a nil error, and
// that HTTP status codes are only available inside error strings. The TTFT
// breakdown needs the exact moment of the first non-empty delta, a cancelled
// answer must never look like a complete one, and errors must be classified
// by status, so this package speaks the wire format itself.

// OpenAIConfig configures an OpenAI generator.
type OpenAIConfig struct {
	// BaseURL is the API root, e.g. https://api.openai.com/v1 or
	// http://localhost:11434/v1; /chat/completions is appended to it.
	BaseURL string
	// Model is the default model; GenerateRequest.Model overrides it.
	Model string
	// APIKey is sent as a bearer token when not empty. Surrounding
	// whitespace is trimmed; it never appears in logs or errors.
	APIKey string
	// Timeout bounds how long the upstream may stay silent: the wait for the
	// response headers and then for each further piece of the stream. It is
	// not a bound on the whole answer, so long answers are not cut off. Zero
	// means no timeout beyond the caller's context.
	Timeout time.Duration
	// HTTPClient replaces the client with its own keep-alive pool when set.
	HTTPClient *http.Client
}

// OpenAI is a pipeline.Generator for any OpenAI-compatible chat completions
// endpoint (OpenAI, TaoToken, vLLM, llama.cpp, Ollama's /v1, the ragtime
// simulator). It streams with stream_options.include_usage and times each
// call with net/http/httptrace. It is safe for concurrent use.
type OpenAI struct {
	endpoint     string
	redactedBase string
	model        string
	authHeader   string
	keySet       bool
	timeout      time.Duration
	client       *http.Client
	scrubber     secretScrubber
}

// ProviderOpenAI is the Generation.Provider of the OpenAI generator.
const ProviderOpenAI = "openai"

// NewOpenAI checks cfg and returns a generator with its own keep-alive
// connection pool (unless cfg.HTTPClient is set).
func NewOpenAI(cfg OpenAIConfig) (*OpenAI, error) {
	base := strings.TrimSpace(cfg.BaseURL)
	if base == "" {
		return nil, errors.New("--llm-base-url is required for the openai generator (for example https://api.openai.com/v1)")
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
		return nil, errors.New("--llm-model is required for the openai generator")
	}
	if cfg.Timeout < 0 {
		return nil, fmt.Errorf("llm timeout must not be negative, got %s", cfg.Timeout)
	}
	key := strings.TrimSpace(cfg.APIKey)
	if strings.IndexFunc(key, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0 {
		return nil, errors.New("RAGTIME_LLM_API_KEY contains whitespace or a control character inside it; set it to the bare key")
	}
	u.Path = strings.TrimRight(u.Path, "/") + "/chat/completions"
	u.RawPath = ""
	redacted := *u
	redacted.Path = strings.TrimSuffix(redacted.Path, "/chat/completions")
	redacted.RawQuery = ""
	o := &OpenAI{
		endpoint:     u.String(),
		redactedBase: redacted.Redacted(),
		model:        strings.TrimSpace(cfg.Model),
		keySet:       key != "",
		timeout:      cfg.Timeout,
		client:       cfg.HTTPClient,
		scrubber:     newSecretScrubber(key),
	}
	if key != "" {
		o.authHeader = "Bearer " + key
	}
	if o.client == nil {
		o.client = &http.Client{Transport: newTransport()}
	}
	return o, nil
}

// newTransport returns the keep-alive transport shared by every call of one
// generator: a pool sized for many concurrent streams to one host, HTTP/2
// when the server negotiates it, proxies from the environment.
func newTransport() *http.Transport {
	return &http.Transport{
		Proxy: http.ProxyFromEnvironment,
		DialContext: (&net.Dialer{
			Timeout:   10 * time.Second,
			KeepAlive: 30 * time.Second,
		}).DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          256,
		MaxIdleConnsPerHost:   64,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
}

// Model returns the configured default model.
func (o *OpenAI) Model() string { return o.model }

// CloseIdleConnections closes the pooled connections that are not in use,
// for shutdown.
func (o *OpenAI) CloseIdleConnections() { o.client.CloseIdleConnections() }

// chatRequest is the body of a streaming chat completion request.
type chatRequest struct {
	Model         string             `json:"model"`
	Messages      []pipeline.Message `json:"messages"`
	MaxTokens     int                `json:"max_tokens,omitempty"`
	Stream        bool               `json:"stream"`
	StreamOptions streamOptions      `json:"stream_options"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// drainWait bounds how long a finished stream is read on after [DONE] so its
// connection can go back to the pool.
const drainWait = 250 * time.Millisecond

// errDrained is the cancellation cause when the post-[DONE] drain gives up.
var errDrained = errors.New("stopped draining the finished stream")

// Generate streams one chat completion, calling emit for every non-empty
// content or reasoning delta. See pipeline.Generator for the contract.
func (o *OpenAI) Generate(ctx context.Context, req pipeline.GenerateRequest, emit func(pipeline.Delta) error) (gen pipeline.Generation, err error) {
	model := o.model
	if req.Model != "" {
		model = req.Model
	}
	gen = pipeline.Generation{Provider: ProviderOpenAI, Model: model}
	msgs := req.Messages
	if len(msgs) == 0 {
		msgs = []pipeline.Message{{Role: "user", Content: req.Question}}
	}
	body, err := json.Marshal(chatRequest{
		Model:         model,
		Messages:      msgs,
		MaxTokens:     max(req.MaxTokens, 0),
		Stream:        true,
		StreamOptions: streamOptions{IncludeUsage: true},
	})
	if err != nil {
		return gen, &pipeline.Error{Stage: pipeline.StageLLMConnect, Code: pipeline.CodeInternal, Message: "encoding the chat completion request failed", Err: err}
	}

	callCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var idle *time.Timer
	if o.timeout > 0 {
		idle = time.AfterFunc(o.timeout, func() { cancel(errIdleTimeout) })
		defer idle.Stop()
	}
	tr := &connTrace{}
	defer func() { tr.fill(&gen) }()

	httpReq, err := http.NewRequestWithContext(httptrace.WithClientTrace(callCtx, tr.hooks()), http.MethodPost, o.endpoint, bytes.NewReader(body))
	if err != nil {
		return gen, &pipeline.Error{Stage: pipeline.StageLLMConnect, Code: CodeConnect, Message: "building the chat completion request failed", Hint: "check --llm-base-url", Err: o.scrubber.wrap(err)}
	}
	httpReq.Header.Set("Content-Type", "application/json")
	httpReq.Header.Set("Accept", "text/event-stream")
	if o.authHeader != "" {
		httpReq.Header.Set("Authorization", o.authHeader)
	}

	gen.RequestStart = time.Now()
	resp, err := o.client.Do(httpReq)
	tr.fill(&gen)
	if err != nil {
		return gen, o.transportError(ctx, callCtx, &gen, err)
	}
	defer resp.Body.Close()
	gen.UpstreamStatus = resp.StatusCode
	gen.RequestID = resp.Header.Get("X-Request-Id")
	if gen.RequestID == "" {
		gen.RequestID = resp.Header.Get("Request-Id")
	}

	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		errBody, readErr := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		if readErr != nil {
			if e := contextError(ctx, callCtx, &gen); e != nil {
				return gen, e
			}
		}
		return gen, o.statusError(&gen, resp.StatusCode, resp.Header, errBody, model)
	}
	if !isEventStream(resp.Header.Get("Content-Type")) {
		head, _ := io.ReadAll(io.LimitReader(resp.Body, 200))
		if e := contextError(ctx, callCtx, &gen); e != nil {
			return gen, e
		}
		return gen, &pipeline.Error{
			Stage: pipeline.StageLLMPrefill, Code: CodeBadStream, Status: resp.StatusCode, RequestID: gen.RequestID,
			Message: fmt.Sprintf("the model provider at %s answered %q instead of an event stream; first bytes: %q",
				o.redactedBase, resp.Header.Get("Content-Type"), o.scrubber.scrub(string(head))),
			Hint: "check --llm-base-url points at an OpenAI-compatible API that supports streaming",
		}
	}

	sr := streamReader{gen: &gen, emit: emit, scrubber: o.scrubber}
	if idle != nil {
		sr.onRead = func() { idle.Reset(o.timeout) }
	}
	err = sr.run(resp.Body)
	var ee emitError
	switch {
	case errors.As(err, &ee):
		// The deferred cancel and Body.Close abort the upstream call.
		return gen, ee.err
	case err != nil:
		var pe *pipeline.Error
		if errors.As(err, &pe) {
			return gen, pe
		}
		return gen, o.transportError(ctx, callCtx, &gen, err)
	}
	if e := contextError(ctx, callCtx, &gen); e != nil {
		return gen, e
	}
	if sr.done {
		// Read on to the end of the body so the connection is reused.
		if idle != nil {
			idle.Stop()
		}
		stop := time.AfterFunc(drainWait, func() { cancel(errDrained) })
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		stop.Stop()
	}
	return gen, nil
}

// isEventStream reports whether a Content-Type is text/event-stream.
func isEventStream(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && mt == "text/event-stream"
}

// connTrace collects the httptrace events of one request. Hooks may run on
// other goroutines, even after the request finished, hence the mutex.
type connTrace struct {
	mu                  sync.Mutex
	dnsStart, dnsDone   time.Time
	connStart, connDone time.Time
	tlsStart, tlsDone   time.Time
	gotConn, wrote      time.Time
	reused              bool
}

func (t *connTrace) hooks() *httptrace.ClientTrace {
	return &httptrace.ClientTrace{
		DNSStart: func(httptrace.DNSStartInfo) { t.set(&t.dnsStart, false) },
		DNSDone:  func(httptrace.DNSDoneInfo) { t.set(&t.dnsDone, true) },
		ConnectStart: func(string, string) {
			t.set(&t.connStart, false)
		},
		ConnectDone: func(_, _ string, err error) {
			if err == nil {
				t.set(&t.connDone, true)
			}
		},
		TLSHandshakeStart: func() { t.set(&t.tlsStart, false) },
		TLSHandshakeDone: func(_ tls.ConnectionState, err error) {
			if err == nil {
				t.set(&t.tlsDone, true)
			}
		},
		GotConn: func(info httptrace.GotConnInfo) {
			t.mu.Lock()
			t.gotConn = time.Now()
			t.reused = info.Reused
			t.mu.Unlock()
		},
		WroteRequest: func(info httptrace.WroteRequestInfo) {
			if info.Err == nil {
				t.set(&t.wrote, true)
			}
		},
	}
}

// set records now in *at: the first time when overwrite is false (a start),
// the latest time otherwise (a done).
func (t *connTrace) set(at *time.Time, overwrite bool) {
	now := time.Now()
	t.mu.Lock()
	if overwrite || at.IsZero() {
		*at = now
	}
	t.mu.Unlock()
}

// fill copies what was traced into gen.
func (t *connTrace) fill(gen *pipeline.Generation) {
	t.mu.Lock()
	defer t.mu.Unlock()
	gen.GotConn = t.gotConn
	gen.WroteRequest = t.wrote
	gen.Conn = pipeline.ConnInfo{
		Reused:  t.reused,
		DNS:     span(t.dnsStart, t.dnsDone),
		Connect: span(t.connStart, t.connDone),
		TLS:     span(t.tlsStart, t.tlsDone),
	}
}

func span(start, done time.Time) time.Duration {
	if start.IsZero() || done.IsZero() || done.Before(start) {
		return 0
	}
	return done.Sub(start)
}
