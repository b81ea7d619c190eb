package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	"ragtime"
	"ragtime/admission"
	"ragtime/auth"
	"ragtime/pipeline"
)

// Asker runs one question through the pipeline into a stream and returns
// its record; it neither keeps nor changes req. *pipeline.Pipeline
// implements it. The request and the record go by pointer: the handler's
// goroutine waits in Run while the answer streams, and keeps its frames.
type Asker interface {
	Run(ctx context.Context, req *pipeline.Request, out pipeline.Stream) *ragtime.Record
}

// QueryReader reads stored queries. It returns an error wrapping
// ragtime.ErrNotFound for an unknown id.
type QueryReader interface {
	GetQuery(ctx context.Context, id string) (ragtime.Record, error)
}

// ReadyCheck is one readiness condition for /readyz; nil error means ready.
// An error wrapping ErrDegraded means the part is not ready but answers
// still go out without loss (PostgreSQL away while a spool keeps the
// records): /readyz then says "degraded" with 200, not 503.
type ReadyCheck func(ctx context.Context) error

// ErrDegraded marks a ReadyCheck failure that does not stop the service.
var ErrDegraded = errors.New("degraded")

// Deps is everything the server needs.
type Deps struct {
	Asker Asker
	// Retriever serves POST /v1/search; nil answers 501.
	Retriever Retriever
	Queries   QueryReader
	// List serves GET /v1/queries and Stats GET /v1/stats; *postgres.Store
	// implements both.
	List  QueryLister
	Stats StatsReader
	// Metrics serves GET /metrics (Prometheus); nil answers 404.
	Metrics http.Handler
	// Ready maps a check's name to the check; /readyz runs them all.
	Ready map[string]ReadyCheck
	// ReadyDetails, when set, adds its keys to the /readyz body (such as
	// the recorder's queue and spool).
	ReadyDetails func() map[string]any
	// Logger receives one line per request (never the query string).
	Logger *slog.Logger
	// CORSOrigins lists the origins allowed to call the API from a browser
	// (each scheme://host[:port]; see ValidateOrigins); with Keys off they
	// are also the only foreign origins whose state-changing requests are
	// let through. Origins of live publishable keys get CORS headers too.
	CORSOrigins []string
	// AllowedHosts are the names, besides loopback names and IP addresses,
	// a request's Host may carry while the server runs without keys
	// (serve's --addr host and --allowed-hosts): any other is refused, as a
	// page's name rebound to this machine (openGuard).
	AllowedHosts []string
	// Keys checks API keys; nil runs the server open (every caller may do
	// everything), as does a keyring without keys.
	Keys Authenticator
	// RefuseOpen is set when the server may not run without keys (serve on
	// a non-loopback address without --insecure-no-auth): while it has no
	// keys, every request needing one gets 503 auth_no_keys instead of
	// running open. Serve refuses to start so; this covers keys that could
	// not be read at start and turned out to be none.
	RefuseOpen bool
	// AuthFailures bounds the failed key checks of one client address
	// (serve's --auth-failure-rate): past Rate.N within Rate.Per, its
	// requests with a key get 429 auth_throttled until the bucket refills.
	// Zero: no bound.
	AuthFailures auth.Rate
	// SharedAuthFailures, when set (serve's --redis-url), counts the failed
	// key checks of an address across replicas as well
	// (admission.Failures.Share).
	SharedAuthFailures admission.RateLimiter
	// DefaultModel is the configured model (--llm-model): always allowed,
	// listed first by /v1/models, and what a chat completion naming it
	// asks for (as an empty model in /ask).
	DefaultModel string
	// AllowedModels, when not empty, are the only models a request may ask
	// for (--allowed-models); a key may narrow them further.
	AllowedModels []string
	// MaxQuestionChars bounds the question (0: pipeline.DefaultMaxQuestion).
	MaxQuestionChars int
	// Defaults are the top_k and rerank_top_n an ask gets when it omits
	// them (serve's --top-k, --rerank-top-n).
	Defaults pipeline.Defaults
	// MaxBodyBytes bounds a request body (0: 1 MiB).
	MaxBodyBytes int64
	// Documents serves /v1/documents; nil answers 503.
	Documents Documents
	// MaxDocumentBytes bounds one document or uploaded file (0: 10 MiB).
	MaxDocumentBytes int64
	// Admission admits asks (bounds on streams, a queue, rates); nil lets
	// every ask start at once.
	Admission Admitter
	// CallerLimits are the limits of a caller without a key of its own
	// (one per client IP, an IPv6 client per /64); a key's --rate and
	// --concurrency replace them for its caller.
	CallerLimits admission.Limits
	// BodyTimeout bounds how long a request body may take to arrive (a
	// read deadline from the end of its headers); 0 means none.
	BodyTimeout time.Duration
	// Stream shapes the /ask streams (write timeout, heartbeat, resume).
	Stream StreamOptions
	// MaxConcurrentIngests bounds the POST /v1/documents requests processed
	// at once (0: DefaultMaxConcurrentIngests); IngestWait is how long one
	// waits for a slot before 503 ingest_busy (0: DefaultIngestWait).
	MaxConcurrentIngests int
	IngestWait           time.Duration
	// UploadDir is where multipart uploads are spooled while they arrive
	// ("": os.TempDir()).
	UploadDir string
	// TraceContext, when set, reads the caller's W3C trace context
	// (traceparent, tracestate) from a request's headers into its context,
	// for every route: a query's trace then continues the caller's
	// (tracing.Tracer.Extract). Nil ignores the headers.
	TraceContext func(ctx context.Context, h http.Header) context.Context
	// TraceURLTemplate, when set, is the link to a query's trace shown on
	// /queries/:id and sent as trace_url by GET /v1/queries/:id: {trace_id}
	// is replaced by the query's trace id.
	TraceURLTemplate string
}

// Server is ragtime's HTTP handler.
type Server struct {
	http.Handler
	s *server
}

// ServeHTTP serves r through the router and its middleware, then runs on
// the same goroutine the tail a handler left with deferTail (an /ask
// stream's answer): the response ends when ServeHTTP returns, as net/http
// requires, but the router's frames (some 3 KB: echo, the middleware, the
// handler) are no longer under the goroutine that parks in the model's
// stream, so a held stream keeps within net/http's handler goroutine
// rather than needing one of its own (make bench-streams). It also hands
// the request its arrival (arrival.go).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ctx, ac := arrival(r.Context())
	if ac != nil {
		defer ac.armed.Store(true)
	}
	t := &tail{}
	s.Handler.ServeHTTP(w, r.WithContext(context.WithValue(ctx, tailKey{}, t)))
	if t.run != nil {
		s.runTail(t.run)
	}
}

// runTail runs a request's tail, recovering a panic in it as the Recover
// middleware recovers one in a handler: logged with its stack, and the
// response ended as it stands (its status is long sent).
func (s *Server) runTail(run func()) {
	defer func() {
		if p := recover(); p != nil {
			if p == http.ErrAbortHandler {
				panic(p)
			}
			s.s.log.Error("panic in a stream after its handler returned", "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
		}
	}()
	run()
}

// tail is what a request's handler left to run after the router returned
// (deferTail).
type tail struct{ run func() }

type tailKey struct{}

// deferTail has run called once the router's frames have returned, on the
// handler's goroutine, before the response ends (Server.ServeHTTP); run
// must not use c, which the router reuses for other requests by then.
// Outside Server.ServeHTTP, or if a tail is already set, run is called at
// once.
func deferTail(c echo.Context, run func()) {
	if t, ok := c.Request().Context().Value(tailKey{}).(*tail); ok && t.run == nil {
		t.run = run
		return
	}
	run()
}

// deferredTail is the tail set for c's request so far, or nil.
func deferredTail(c echo.Context) *tail {
	if t, ok := c.Request().Context().Value(tailKey{}).(*tail); ok && t.run != nil {
		return t
	}
	return nil
}

// EndStreams cancels every open /ask stream, sending each client an error
// event with code server_shutdown, and waits until they have ended or ctx
// is done. It returns how many are still open. Serve calls it when its
// shutdown deadline passes, before closing the connections.
func (s *Server) EndStreams(ctx context.Context) int {
	return s.s.streams.endAll(ctx, pipeline.ErrServerShutdown)
}

// server holds the dependencies the handlers use.
type server struct {
	deps    Deps
	log     *slog.Logger
	ingest  ingestSlots
	streams *streamHub
	// queueAttrs are the queue stage's attrs, shared (admit).
	queueAttrs queueAttrs
	// lastReady is the last /readyz answer ("ok" or "unavailable"), so a
	// change is logged once.
	lastReady atomic.Value
	// failures counts failed key checks per client address (nil: off).
	failures *admission.Failures
}

// NewServer builds the HTTP handler with every route and middleware.
func NewServer(deps Deps) *Server {
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.DiscardHandler)
	}
	if deps.MaxQuestionChars <= 0 {
		deps.MaxQuestionChars = pipeline.DefaultMaxQuestion
	}
	if deps.MaxBodyBytes <= 0 {
		deps.MaxBodyBytes = 1 << 20
	}
	if deps.MaxDocumentBytes <= 0 {
		deps.MaxDocumentBytes = 10 << 20
	}
	if deps.MaxConcurrentIngests <= 0 {
		deps.MaxConcurrentIngests = DefaultMaxConcurrentIngests
	}
	if deps.IngestWait <= 0 {
		deps.IngestWait = DefaultIngestWait
	}
	deps.Stream.log = deps.Logger
	s := &server{deps: deps, log: deps.Logger, ingest: make(ingestSlots, deps.MaxConcurrentIngests),
		streams: newStreamHub(deps.Stream), failures: admission.NewFailures(deps.AuthFailures, 0).Share(deps.SharedAuthFailures)}
	s.lastReady.Store("")
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = s.handleError
	e.Use(middleware.Recover())
	if deps.TraceContext != nil {
		e.Use(s.traceContext)
	}
	e.Use(s.logRequests)
	e.Use(s.bodyDeadline)
	e.Use(securityHeaders)
	e.Use(s.cors())
	e.Use(s.openGuard())
	s.routes(e)
	return &Server{Handler: e, s: s}
}

// traceContext continues the caller's trace: the request's context carries
// the trace context of its traceparent header, so the query's root span is a
// child of the caller's span.
func (s *server) traceContext(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if r := c.Request(); r.Header.Get("traceparent") != "" {
			c.SetRequest(r.WithContext(s.deps.TraceContext(r.Context(), r.Header)))
		}
		return next(c)
	}
}

// bodyDeadline gives a request's body --body-timeout to arrive: a client
// sending it a byte at a time cannot hold a handler. The read deadline is
// the connection's; net/http clears it once the body has been read, so it
// never cuts a stream. A read past it fails with errBodyTimeout (408).
func (s *server) bodyDeadline(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if r := c.Request(); s.deps.BodyTimeout > 0 && r.Body != nil && r.Body != http.NoBody {
			_ = http.NewResponseController(c.Response()).SetReadDeadline(time.Now().Add(s.deps.BodyTimeout))
			r.Body = deadlineBody{r.Body}
		}
		return next(c)
	}
}

// errBodyTimeout is a request body that did not arrive within
// --body-timeout.
var errBodyTimeout = errors.New("the request body did not arrive within --body-timeout")

// deadlineBody names a read deadline's error as errBodyTimeout.
type deadlineBody struct{ io.ReadCloser }

func (b deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		err = errBodyTimeout
	}
	return n, err
}

// logRequests logs one line per request: method, path (without the query
// string, which may hold the question), status and duration. A request
// whose handler left a tail (an /ask stream's answer) is logged when the
// tail has run, with the stream's whole duration.
func (s *server) logRequests(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		start := timeNow()
		err := next(c)
		if err != nil {
			c.Error(err)
		}
		// An answered /ask is already recorded whole (the queries row), so
		// its access line is debug: at hundreds of asks a second the log
		// line was a measurable share of the CPU per ask.
		level := slog.LevelInfo
		if (c.Path() == "/ask" || c.Path() == "/v1/chat/completions") && c.Response().Status < 400 {
			level = slog.LevelDebug
		}
		r := c.Request()
		if !s.log.Enabled(r.Context(), level) {
			return nil
		}
		ctx, method, path, status := r.Context(), r.Method, r.URL.Path, c.Response().Status
		logLine := func() {
			s.log.Log(ctx, level, "request", "method", method, "path", path,
				"status", status, "ms", float64(timeNow().Sub(start).Microseconds())/1000)
		}
		if t := deferredTail(c); t != nil {
			run := t.run
			t.run = func() {
				defer logLine()
				run()
			}
			return nil
		}
		logLine()
		return nil
	}
}
