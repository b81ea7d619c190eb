package api

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"ragtime"
	"ragtime/auth"
	"ragtime/internal/openaiwire"
	"ragtime/pipeline"
)

var timeNow = time.Now

// apiError is an error with the HTTP status and stable code it is answered
// with, as the body {"error": {"code", "message"}}.
type apiError struct {
	Status  int    `json:"-"`
	Code    string `json:"code"`
	Message string `json:"message"`
	Field   string `json:"field,omitempty"`
	// Hint says what to do about it.
	Hint string `json:"hint,omitempty"`
	// retryAfter, in seconds, is sent as Retry-After when positive.
	retryAfter int
}

func (e *apiError) Error() string { return e.Message }

func badRequest(field, code, msg string) *apiError {
	return &apiError{Status: http.StatusBadRequest, Code: code, Message: msg, Field: field}
}

// statusTable maps the sentinel errors handlers branch on to the status and
// code they are answered with; anything else is a 500.
var statusTable = []struct {
	err    error
	status int
	code   string
	hint   string
}{
	{ragtime.ErrNotFound, http.StatusNotFound, "not_found", ""},
	{ErrReadOnly, http.StatusServiceUnavailable, "read_only", ""},
	{ragtime.ErrInvalidCursor, http.StatusBadRequest, "cursor_invalid", ""},
	{auth.ErrMissing, http.StatusUnauthorized, "auth_missing",
		"send an API key as Authorization: Bearer <key> (a publishable key may come as ?key=); `ragtime keys create` makes one"},
	{auth.ErrInvalid, http.StatusUnauthorized, "auth_invalid",
		"send the whole key (rt_sk_… or rt_pk_…, 62 characters) as Authorization: Bearer <key>; `ragtime keys list` shows the prefixes of the keys that exist"},
	{errKeyInURL, http.StatusUnauthorized, "auth_invalid",
		"send secret keys (rt_sk_…) only as Authorization: Bearer <key>: URLs end up in logs and browser history; revoke this key if the URL was shared"},
	{auth.ErrRevoked, http.StatusUnauthorized, "auth_revoked", "this key was revoked (`ragtime keys revoke`); use another key"},
	{auth.ErrExpired, http.StatusUnauthorized, "auth_expired", "this key passed its --expires; create a new one with `ragtime keys create`"},
	{auth.ErrUnavailable, http.StatusServiceUnavailable, "auth_unavailable",
		"retry in a few seconds: the server cannot read its API keys while its database is away, and refuses every request until it can (its log says why)"},
	{errNoKeys, http.StatusServiceUnavailable, "auth_no_keys",
		"nothing to change in the request: the server answers once its operator creates an API key (its log says why)"},
	{auth.ErrScope, http.StatusForbidden, "scope_denied", "use a key created with the scope this endpoint needs (ragtime keys create --scopes ...)"},
	{auth.ErrOrigin, http.StatusForbidden, "origin_denied",
		"call from one of the key's --origins, or create a key that lists this page's origin (scheme://host[:port])"},
	{auth.ErrModel, http.StatusForbidden, "model_denied", "ask for one of the allowed models, or leave model empty for the server's default"},
	{errCrossSite, http.StatusForbidden, "cross_site_denied",
		"a page on another site may not write here; add its origin to --cors-origins if it should, or create API keys (ragtime keys create)"},
	{errBodyTimeout, http.StatusRequestTimeout, "body_timeout",
		"send the whole body within --body-timeout of the headers"},
}

// handleError answers every error a handler returns, once, as JSON.
func (s *server) handleError(err error, c echo.Context) {
	if c.Response().Committed {
		return
	}
	var ae *apiError
	var ve *pipeline.ValidationError
	var he *echo.HTTPError
	switch {
	case errors.As(err, &ae):
	case errors.As(err, &ve):
		ae = badRequest(ve.Field, ve.Code, ve.Message)
	case errors.As(err, &he) && he.Code == http.StatusNotFound && unknownOpenAIRoute(c.Request().URL.Path):
		_ = c.JSON(http.StatusNotFound, openaiwire.ErrorResponse{Error: asOpenAIError(noSuchOpenAIRoute(c.Request()))})
		return
	case errors.As(err, &he):
		msg := http.StatusText(he.Code)
		if m, ok := he.Message.(string); ok {
			msg = m
		}
		ae = &apiError{Status: he.Code, Code: codeForStatus(he.Code), Message: msg}
	default:
		for _, row := range statusTable {
			if errors.Is(err, row.err) {
				ae = &apiError{Status: row.status, Code: row.code, Message: err.Error(), Hint: row.hint}
				break
			}
		}
		if ae == nil {
			s.log.Error("request failed", "path", c.Request().URL.Path, "err", err)
			ae = &apiError{Status: http.StatusInternalServerError, Code: "internal", Message: "internal error; see the server log"}
		}
	}
	if ae.Status == http.StatusUnauthorized {
		c.Response().Header().Set("WWW-Authenticate", `Bearer realm="ragtime"`)
	}
	if ae.retryAfter > 0 {
		c.Response().Header().Set("Retry-After", strconv.Itoa(ae.retryAfter))
	}
	if openAIRoute(c.Request().URL.Path) {
		if errors.Is(err, auth.ErrModel) && ae.Field == "" {
			ae.Field = "model"
		}
		_ = c.JSON(ae.Status, openaiwire.ErrorResponse{Error: asOpenAIError(ae)})
		return
	}
	_ = c.JSON(ae.Status, map[string]*apiError{"error": ae})
}

func codeForStatus(status int) string {
	switch status {
	case http.StatusNotFound:
		return "not_found"
	case http.StatusMethodNotAllowed:
		return "method_not_allowed"
	case http.StatusRequestEntityTooLarge:
		return "body_too_large"
	case http.StatusUnsupportedMediaType:
		return "unsupported_media_type"
	case http.StatusServiceUnavailable:
		return "unavailable"
	default:
		if status >= 500 {
			return "internal"
		}
		return "bad_request"
	}
}
