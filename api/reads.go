package api

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"ragtime"
	"ragtime/auth"
	"ragtime/pipeline"
)

// QueryLister lists stored queries a page at a time; it returns an error
// wrapping ragtime.ErrInvalidCursor for a cursor it did not make.
type QueryLister interface {
	ListQueries(ctx context.Context, f ragtime.QueryFilter) (ragtime.QueryPage, error)
}

// StatsReader reads the dashboard views for the queries a filter selects:
// since a moment, of one provider and model when given, of one API key when
// its KeyID is set.
type StatsReader interface {
	Stats(ctx context.Context, f ragtime.StatsFilter) (pipeline.Stats, error)
	// Models lists the providers and models of the window's queries (of
	// the key's, with a KeyID); it ignores f's Provider and Model.
	Models(ctx context.Context, f ragtime.StatsFilter) ([]ragtime.ProviderModel, error)
}

// maxStatsWindow bounds /v1/stats?since=, which aggregates every query of
// the window.
const maxStatsWindow = 90 * 24 * time.Hour

// parseMoment reads a query parameter naming a moment: an RFC 3339 time
// (2025-03-01T12:00:00Z) or an age before now ("90m", "1h", "7d").
func parseMoment(raw, name string, now time.Time) (time.Time, error) {
	raw = strings.TrimSpace(raw)
	if t, err := time.Parse(time.RFC3339Nano, raw); err == nil {
		return t, nil
	}
	d, err := parseAge(raw)
	if err != nil {
		return time.Time{}, badRequest(name, name+"_invalid",
			fmt.Sprintf("%s must be an RFC 3339 time (2025-03-01T12:00:00Z) or an age such as 15m, 1h or 7d, got %q", name, raw))
	}
	return now.Add(-d), nil
}

// parseAge reads "7d" or "1.5d" (days, which time.ParseDuration lacks) or a
// Go duration such as "90m"; it must be positive.
func parseAge(v string) (time.Duration, error) {
	var d time.Duration
	if days, ok := strings.CutSuffix(v, "d"); ok {
		n, err := strconv.ParseFloat(days, 64)
		if err != nil {
			return 0, err
		}
		d = time.Duration(n * float64(24*time.Hour))
	} else {
		var err error
		if d, err = time.ParseDuration(v); err != nil {
			return 0, err
		}
	}
	if d <= 0 {
		return 0, fmt.Errorf("age %q is not positive", v)
	}
	return d, nil
}

// handleListQueries serves GET /v1/queries: stored queries newest first,
// filtered by since, until, status, provider, model and top_k, a page at a
// time.
func (s *server) handleListQueries(c echo.Context) error {
	if s.deps.List == nil {
		return &apiError{Status: http.StatusServiceUnavailable, Code: "unavailable", Message: "no query store is configured"}
	}
	qs := c.QueryParams()
	for name := range qs {
		switch name {
		case "since", "until", "status", "provider", "model", "top_k", "retrieval", "limit", "cursor":
		default:
			return badRequest(nameOf(name), "unknown_parameter",
				fmt.Sprintf("unknown parameter %q; known: since, until, status, provider, model, top_k, retrieval, limit, cursor", name))
		}
	}
	now := timeNow()
	var f ragtime.QueryFilter
	var err error
	if v := qs.Get("since"); v != "" {
		if f.Since, err = parseMoment(v, "since", now); err != nil {
			return err
		}
	}
	if v := qs.Get("until"); v != "" {
		if f.Until, err = parseMoment(v, "until", now); err != nil {
			return err
		}
	}
	switch f.Status = qs.Get("status"); f.Status {
	case "", ragtime.StatusOK, ragtime.StatusError, ragtime.StatusCancelled:
	default:
		return badRequest("status", "status_invalid", fmt.Sprintf("status must be ok, error or cancelled, got %q", f.Status))
	}
	if f.Provider, f.Model, err = providerModel(qs); err != nil {
		return err
	}
	if v := qs.Get("top_k"); v != "" {
		k, err := strconv.Atoi(v)
		if err != nil {
			return badRequest("top_k", "top_k_invalid", fmt.Sprintf("top_k must be a whole number from 1 to %d, got %q", pipeline.MaxTopK, v))
		}
		if err := pipeline.CheckTopK("top_k", k); err != nil {
			return err
		}
		f.TopK = k
	}
	switch f.Retrieval = qs.Get("retrieval"); f.Retrieval {
	case "", ragtime.RetrievalHybrid, ragtime.RetrievalVector, ragtime.RetrievalLexical:
	default:
		return badRequest("retrieval", "retrieval_invalid", fmt.Sprintf("retrieval must be hybrid, vector or lexical, got %.40q", f.Retrieval))
	}
	if v := qs.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > ragtime.MaxListLimit {
			return badRequest("limit", "limit_invalid", fmt.Sprintf("limit must be a whole number from 1 to %d, got %q", ragtime.MaxListLimit, v))
		}
		f.Limit = n
	}
	f.Cursor = qs.Get("cursor")
	f.KeyID = ownQueries(c)

	page, err := s.deps.List.ListQueries(c.Request().Context(), f)
	if err != nil {
		return err
	}
	body := map[string]any{"queries": page.Queries}
	if page.NextCursor != "" {
		next := url.Values{}
		for name, v := range qs {
			next[name] = v
		}
		// A relative "since" would move with the clock; pin it.
		if !f.Since.IsZero() {
			next.Set("since", f.Since.UTC().Format(time.RFC3339Nano))
		}
		if !f.Until.IsZero() {
			next.Set("until", f.Until.UTC().Format(time.RFC3339Nano))
		}
		next.Set("cursor", page.NextCursor)
		body["next_cursor"] = page.NextCursor
		body["next"] = "/v1/queries?" + next.Encode()
	}
	return c.JSON(http.StatusOK, body)
}

// providerModel reads the provider and model filters of a read.
func providerModel(qs url.Values) (provider, model string, err error) {
	provider, model = qs.Get("provider"), qs.Get("model")
	if err := pipeline.CheckProvider(provider); err != nil {
		return "", "", err // PostgreSQL refuses NUL and invalid UTF-8: a 400, not a 500
	}
	if err := pipeline.CheckModel(model); err != nil {
		return "", "", err
	}
	return provider, model, nil
}

// statsFilter reads the query parameters of /v1/stats and
// /v1/stats/models: since (default 1h, at most 90d), provider, model.
func statsFilter(c echo.Context) (ragtime.StatsFilter, error) {
	now := timeNow()
	since := now.Add(-time.Hour)
	qs := c.QueryParams()
	for name := range qs {
		switch name {
		case "since", "provider", "model":
		default:
			return ragtime.StatsFilter{}, badRequest(nameOf(name), "unknown_parameter", fmt.Sprintf("unknown parameter %q; known: since, provider, model", name))
		}
	}
	if qs.Has("since") {
		var err error
		if since, err = parseMoment(qs.Get("since"), "since", now); err != nil {
			return ragtime.StatsFilter{}, err
		}
	}
	if since.After(now) {
		return ragtime.StatsFilter{}, badRequest("since", "since_invalid", "since must be in the past")
	}
	if now.Sub(since) > maxStatsWindow {
		return ragtime.StatsFilter{}, badRequest("since", "since_out_of_range", "since must be within the last 90 days (90d)")
	}
	provider, model, err := providerModel(qs)
	if err != nil {
		return ragtime.StatsFilter{}, err
	}
	return ragtime.StatsFilter{Since: since, Provider: provider, Model: model, KeyID: ownQueries(c)}, nil
}

// handleStats serves GET /v1/stats?since=1h&provider=...&model=...: every
// dashboard view for the queries of the window (of one provider and model
// when given), as JSON.
func (s *server) handleStats(c echo.Context) error {
	if s.deps.Stats == nil {
		return &apiError{Status: http.StatusServiceUnavailable, Code: "unavailable", Message: "no query store is configured"}
	}
	f, err := statsFilter(c)
	if err != nil {
		return err
	}
	st, err := s.deps.Stats.Stats(c.Request().Context(), f)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, st)
}

// handleStatsModels serves GET /v1/stats/models?since=7d: the providers and
// models of the window's queries, the choices of the pages' model selector,
// without aggregating anything else.
func (s *server) handleStatsModels(c echo.Context) error {
	if s.deps.Stats == nil {
		return &apiError{Status: http.StatusServiceUnavailable, Code: "unavailable", Message: "no query store is configured"}
	}
	f, err := statsFilter(c)
	if err != nil {
		return err
	}
	list, err := s.deps.Stats.Models(c.Request().Context(), f)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{"since": f.Since.UTC(), "models": list})
}

// ownQueries is the key whose queries the caller may read: "" (every
// caller's) for admin keys and open servers, else the caller's own key.
func ownQueries(c echo.Context) string {
	caller, _ := auth.CallerFrom(c.Request().Context())
	if caller.Admin() {
		return ""
	}
	return caller.KeyID()
}
