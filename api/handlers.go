package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"ragtime"
)

// handleHealthz answers while the process is alive.
func (s *server) handleHealthz(c echo.Context) error {
	return c.JSON(http.StatusOK, map[string]string{"status": "ok"})
}

// handleReadyz runs every readiness check: 503 when any fails, 200 with
// status "degraded" when the only failures wrap ErrDegraded.
func (s *server) handleReadyz(c echo.Context) error {
	ctx, cancel := context.WithTimeout(c.Request().Context(), 2*time.Second)
	defer cancel()
	names := make([]string, 0, len(s.deps.Ready))
	for name := range s.deps.Ready {
		names = append(names, name)
	}
	sort.Strings(names)
	checks := make(map[string]string, len(names))
	status, word := http.StatusOK, "ok"
	for _, name := range names {
		err := s.deps.Ready[name](ctx)
		switch {
		case err == nil:
			checks[name] = "ok"
		case errors.Is(err, ErrDegraded):
			checks[name] = err.Error()
			if status == http.StatusOK {
				word = "degraded"
			}
		default:
			checks[name] = err.Error()
			status, word = http.StatusServiceUnavailable, "unavailable"
		}
	}
	s.logReadiness(word, checks)
	// Which check fails, and why, can name hosts and paths: only admin
	// keys (or anyone, when the server runs without keys) see it, and
	// the recorder's figures with it.
	if !s.optionalCaller(c).Admin() {
		return c.JSON(status, map[string]any{"status": word})
	}
	body := map[string]any{}
	if s.deps.ReadyDetails != nil {
		for k, v := range s.deps.ReadyDetails() {
			body[k] = v
		}
	}
	body["status"], body["checks"] = word, checks
	return c.JSON(status, body)
}

// handleGetQuery serves GET /v1/queries/:id: the stored query and stages.
func (s *server) handleGetQuery(c echo.Context) error {
	if s.deps.Queries == nil {
		return &apiError{Status: http.StatusServiceUnavailable, Code: "unavailable", Message: "no query store is configured"}
	}
	rec, err := s.deps.Queries.GetQuery(c.Request().Context(), c.Param("id"))
	if err != nil {
		return err
	}
	// Another key's query is answered as if it did not exist.
	if own := ownQueries(c); own != "" {
		if rec.KeyID != own {
			return fmt.Errorf("query %.80q: %w", c.Param("id"), ragtime.ErrNotFound)
		}
		// The operator's text (the model server's address) is for admin
		// reads.
		rec.ErrorMessage, _ = callerText(rec.ErrorCode, "", rec.ErrorMessage, "")
	}
	if rec.TraceID == "" || s.deps.TraceURLTemplate == "" {
		return c.JSON(http.StatusOK, rec)
	}
	return c.JSON(http.StatusOK, struct {
		ragtime.Record
		// TraceURL is the query's trace in the tracing UI (--trace-url-template).
		TraceURL string `json:"trace_url"`
	}{rec, TraceURL(s.deps.TraceURLTemplate, rec.TraceID)})
}

// TraceURL fills a --trace-url-template with a trace id: every {trace_id}
// is replaced by it.
func TraceURL(template, traceID string) string {
	return strings.ReplaceAll(template, "{trace_id}", traceID)
}

// ValidateTraceURLTemplate checks a --trace-url-template: an http(s) URL
// that holds {trace_id}.
func ValidateTraceURLTemplate(template string) error {
	if template == "" {
		return nil
	}
	if !strings.Contains(template, "{trace_id}") {
		return fmt.Errorf("%q does not contain {trace_id}, which is replaced by the query's trace id", template)
	}
	u, err := url.Parse(TraceURL(template, "0123456789abcdef0123456789abcdef"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%q is not an http:// or https:// URL, such as http://localhost:16686/trace/{trace_id}", template)
	}
	return nil
}

// logReadiness logs the checks when readiness changes, so the details
// unauthenticated callers do not see are in the log.
func (s *server) logReadiness(word string, checks map[string]string) {
	if s.lastReady.Swap(word) == word {
		return
	}
	if word == "ok" {
		s.log.Info("ready", "checks", checks)
	} else {
		s.log.Warn("not ready", "checks", checks)
	}
}
