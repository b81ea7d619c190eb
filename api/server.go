package api

import (
	"context"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	"ragtime/pipeline"
)

// Asker runs one question through the pipeline into a stream.
// *pipeline.Pipeline implements it.
type Asker interface {
	Run(ctx context.Context, req pipeline.Request, out pipeline.Stream) pipeline.Record
}

// QueryReader reads stored queries. It returns an error wrapping
// pipeline.ErrNotFound for an unknown id.
type QueryReader interface {
	GetQuery(ctx context.Context, id string) (pipeline.Record, error)
}

// ReadyCheck is one readiness condition for /readyz; nil error means ready.
type ReadyCheck func(ctx context.Context) error

// Deps is everything the server needs.
type Deps struct {
	Asker   Asker
	Queries QueryReader
	// List serves GET /v1/queries and Stats GET /v1/stats; *postgres.Store
	// implements both.
	List  QueryLister
	Stats StatsReader
	// Metrics serves GET /metrics (Prometheus); nil answers 404.
	Metrics http.Handler
	// Ready maps a check's name to the check; /readyz runs them all.
	Ready map[string]ReadyCheck
	// Logger receives one line per request (never the query string).
	Logger *slog.Logger
	// CORSOrigins lists the origins allowed to call the API from a browser
	// (each scheme://host[:port]; see ValidateOrigins); with Keys off they
	// are also the only foreign origins whose state-changing requests are
	// let through. Origins of live publishable keys get CORS headers too.
	CORSOrigins []string
	// Keys checks API keys; nil runs the server open (every caller may do
	// everything), as does a keyring without keys.
	Keys Authenticator
	// AllowedModels, when not empty, are the only models a request may ask
	// for (--allowed-models); a key may narrow them further.
	AllowedModels []string
	// MaxQuestionChars bounds the question (0: pipeline.DefaultMaxQuestion).
	MaxQuestionChars int
	// MaxBodyBytes bounds a request body (0: 1 MiB).
	MaxBodyBytes int64
	// Documents serves /v1/documents; nil answers 503.
	Documents Documents
	// MaxDocumentBytes bounds one document or uploaded file (0: 10 MiB).
	MaxDocumentBytes int64
	// MaxConcurrentIngests bounds the POST /v1/documents requests processed
	// at once (0: DefaultMaxConcurrentIngests); IngestWait is how long one
	// waits for a slot before 503 ingest_busy (0: DefaultIngestWait).
	MaxConcurrentIngests int
	IngestWait           time.Duration
	// UploadDir is where multipart uploads are spooled while they arrive
	// ("": os.TempDir()).
	UploadDir string
}

// server holds the dependencies the handlers use.
type server struct {
	deps   Deps
	log    *slog.Logger
	ingest ingestSlots
	// lastReady is the last /readyz answer ("ok" or "unavailable"), so a
	// change is logged once.
	lastReady atomic.Value
}

// NewServer builds the HTTP handler with every route and middleware.
func NewServer(deps Deps) http.Handler {
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
	s := &server{deps: deps, log: deps.Logger, ingest: make(ingestSlots, deps.MaxConcurrentIngests)}
	s.lastReady.Store("")
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = s.handleError
	e.Use(middleware.Recover())
	e.Use(s.logRequests)
	e.Use(securityHeaders)
	e.Use(s.cors())
	e.Use(s.crossSiteGuard())
	s.routes(e)
	return e
}

// logRequests logs one line per request: method, path (without the query
// string, which may hold the question), status and duration.
func (s *server) logRequests(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		start := timeNow()
		err := next(c)
		if err != nil {
			c.Error(err)
		}
		s.log.Info("request", "method", c.Request().Method, "path", c.Request().URL.Path,
			"status", c.Response().Status, "ms", float64(timeNow().Sub(start).Microseconds())/1000)
		return nil
	}
}
