package api

import (
	"errors"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	"ragtime/auth"
)

// Authenticator checks API keys; *auth.Keyring implements it.
type Authenticator interface {
	// Enabled reports whether requests need a key.
	Enabled() bool
	// Authenticate returns the key a token belongs to, or an error wrapping
	// auth.ErrInvalid, ErrRevoked, ErrExpired or ErrUnavailable.
	Authenticate(token string, now time.Time) (*auth.Key, error)
	// AllowsOrigin reports whether a live publishable key lists origin.
	AllowsOrigin(origin string, now time.Time) bool
}

// errCrossSite refuses a state-changing browser request from another site
// while the server runs without keys.
var errCrossSite = errors.New("cross-site requests may not change anything on this server")

// errKeyInURL refuses a secret key sent as ?key=.
var errKeyInURL = errors.New("a secret key may not be sent in the URL")

// keyParam is the query parameter a publishable key may come in, because
// EventSource cannot set headers.
const keyParam = "key"

// need is the middleware of an endpoint that needs scope: it finds the
// caller, checks its key, scope and origin, and puts it in the request's
// context (auth.CallerFrom).
func (s *server) need(scope auth.Scope) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			caller, err := s.caller(c)
			if err != nil {
				return err
			}
			if err := caller.Authorize(scope, c.Request().Header.Get("Origin")); err != nil {
				return err
			}
			c.SetRequest(c.Request().WithContext(auth.WithCaller(c.Request().Context(), caller)))
			return next(c)
		}
	}
}

// caller returns who makes the request: an open caller when the server
// runs without keys, else the caller of the key the request carries
// (Authorization: Bearer, or ?key= for publishable keys only). A request
// without a key gets a caller without one; Authorize refuses it.
func (s *server) caller(c echo.Context) (auth.Caller, error) {
	r := c.Request()
	caller := auth.Caller{IP: clientIP(r)}
	if s.deps.Keys == nil || !s.deps.Keys.Enabled() {
		caller.Open = true
		return caller, nil
	}
	token, err := bearer(r)
	if err != nil {
		return caller, err
	}
	if token == "" {
		if token = r.URL.Query().Get(keyParam); token != "" && auth.KindOfPrefix(token) == auth.Secret {
			return caller, errKeyInURL
		}
	}
	if token == "" {
		return caller, nil
	}
	key, err := s.deps.Keys.Authenticate(token, timeNow())
	if err != nil {
		return caller, err
	}
	caller.Key = key
	return caller, nil
}

// bearer returns the token of an "Authorization: Bearer" header, "" when
// there is none, and auth.ErrInvalid for another scheme.
func bearer(r *http.Request) (string, error) {
	h := r.Header.Get(echo.HeaderAuthorization)
	if h == "" {
		return "", nil
	}
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(token) == "" {
		return "", auth.ErrInvalid
	}
	return strings.TrimSpace(token), nil
}

// optionalCaller is the caller of a public endpoint (/readyz): the key's
// caller when a valid key came with the request, else one without a key.
func (s *server) optionalCaller(c echo.Context) auth.Caller {
	caller, err := s.caller(c)
	if err != nil {
		return auth.Caller{}
	}
	return caller
}

// crossSiteGuard refuses state-changing requests that a browser sends from
// another site (a form POST from https://evil.example) while the server runs
// without keys, unless the origin is in --cors-origins: with keys, such a
// request carries none and is refused anyway. It uses net/http's
// CrossOriginProtection (Sec-Fetch-Site, else Origin against Host).
func (s *server) crossSiteGuard() echo.MiddlewareFunc {
	cop := http.NewCrossOriginProtection()
	for _, o := range s.deps.CORSOrigins {
		if err := cop.AddTrustedOrigin(o); err != nil {
			// ValidateOrigins refused it before; log rather than trust it.
			s.log.Error("ignoring a --cors-origins value", "origin", o, "err", err)
		}
	}
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if s.deps.Keys != nil && s.deps.Keys.Enabled() {
				return next(c)
			}
			if err := cop.Check(c.Request()); err != nil {
				return errCrossSite
			}
			return next(c)
		}
	}
}

// cors answers CORS for --cors-origins and for the origins of live
// publishable keys.
func (s *server) cors() echo.MiddlewareFunc {
	allowed := make([]string, 0, len(s.deps.CORSOrigins))
	for _, o := range s.deps.CORSOrigins {
		allowed = append(allowed, auth.NormalizeOrigin(o))
	}
	return middleware.CORSWithConfig(middleware.CORSConfig{
		AllowOriginFunc: func(origin string) (bool, error) {
			if slices.Contains(allowed, auth.NormalizeOrigin(origin)) {
				return true, nil
			}
			return s.deps.Keys != nil && s.deps.Keys.AllowsOrigin(origin, timeNow()), nil
		},
		AllowMethods: []string{http.MethodGet, http.MethodPost, http.MethodDelete, http.MethodOptions},
		AllowHeaders: []string{echo.HeaderContentType, echo.HeaderAuthorization, "Last-Event-ID"},
		// Browser apps (the Vercel AI SDK in a page) may read the query id
		// of a chat completion.
		ExposeHeaders: []string{HeaderQueryID},
	})
}

// ValidateOrigins checks --cors-origins values: each must be
// scheme://host[:port].
func ValidateOrigins(origins []string) error {
	for _, o := range origins {
		if err := auth.ValidateOrigin(o); err != nil {
			return err
		}
	}
	return nil
}

// Content-Security-Policy of the pages: scripts and styles only from files
// this server serves (no inline script), no framing. Inline style attributes
// stay allowed: the pages draw colour swatches with them.
const (
	pageCSP = "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; " +
		"connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
	apiCSP = "default-src 'none'; frame-ancestors 'none'"
)

// securityHeaders sets the headers every response gets; pages replace the
// Content-Security-Policy with pageCSP.
func securityHeaders(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		h := c.Response().Header()
		// Canonical keys, values shared by every response (net/http only
		// reads them): Header.Set allocated a slice per header per request.
		h["X-Content-Type-Options"] = headerNosniff
		h["Referrer-Policy"] = headerNoReferrer
		h["X-Frame-Options"] = headerDeny
		h["Content-Security-Policy"] = headerAPICSP
		return next(c)
	}
}

var (
	headerNosniff    = []string{"nosniff"}
	headerNoReferrer = []string{"no-referrer"}
	headerDeny       = []string{"DENY"}
	headerAPICSP     = []string{apiCSP}
)
