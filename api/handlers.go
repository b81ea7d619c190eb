package api

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"time"

	"github.com/labstack/echo/v4"

	"ragtime/pipeline"
)

// handleHealthz answers while the process is alive.
func (s *server) handleHealthz(c echo.Context) error {
	return c.JSON(http.StatusOK, map[string]string{"status": "ok"})
}

// handleReadyz runs every readiness check; 503 when any fails.
func (s *server) handleReadyz(c echo.Context) error {
	ctx, cancel := context.WithTimeout(c.Request().Context(), 2*time.Second)
	defer cancel()
	names := make([]string, 0, len(s.deps.Ready))
	for name := range s.deps.Ready {
		names = append(names, name)
	}
	sort.Strings(names)
	checks := make(map[string]string, len(names))
	status := http.StatusOK
	for _, name := range names {
		if err := s.deps.Ready[name](ctx); err != nil {
			checks[name] = err.Error()
			status = http.StatusServiceUnavailable
		} else {
			checks[name] = "ok"
		}
	}
	word := "ok"
	if status != http.StatusOK {
		word = "unavailable"
	}
	s.logReadiness(word, checks)
	// Which check fails, and why, can name hosts and paths: only admin
	// keys (or anyone, when the server runs without keys) see it.
	if !s.optionalCaller(c).Admin() {
		return c.JSON(status, map[string]any{"status": word})
	}
	return c.JSON(status, map[string]any{"status": word, "checks": checks})
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
	if own := ownQueries(c); own != "" && rec.KeyID != own {
		return fmt.Errorf("query %.80q: %w", c.Param("id"), pipeline.ErrNotFound)
	}
	return c.JSON(http.StatusOK, rec)
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
