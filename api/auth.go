package api

import (
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
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
	// Loaded reports whether the keys were read: until then nothing says
	// whether keys exist, and every request gets auth.ErrUnavailable.
	Loaded() bool
}

// errCrossSite refuses a state-changing browser request from another site
// while the server runs without keys.
var errCrossSite = errors.New("cross-site requests may not change anything on this server")

// errNoKeys refuses every request of a server that has no keys and may
// not run open (Deps.RefuseOpen).
var errNoKeys = errors.New("this server has no API keys and may not run open on its address")

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
		if s.deps.RefuseOpen {
			return caller, errNoKeys
		}
		caller.Open = true
		return caller, nil
	}
	if !s.deps.Keys.Loaded() {
		return caller, auth.ErrUnavailable
	}
	now := timeNow()
	if wait := s.failures.Wait(caller.IP, now); wait > 0 && carriesKey(r) {
		return caller, &apiError{Status: http.StatusTooManyRequests, Code: "auth_throttled",
			Message:    "too many requests with a wrong API key came from this address",
			Hint:       "wait for Retry-After, then send a valid key; `ragtime keys list` shows the prefixes of the keys that exist",
			retryAfter: max(1, int(math.Ceil(wait.Seconds())))}
	}
	token, err := bearer(r)
	if err != nil {
		s.failures.Fail(r.Context(), caller.IP, now)
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
	key, err := s.deps.Keys.Authenticate(token, now)
	if err != nil {
		if !errors.Is(err, auth.ErrUnavailable) {
			s.failures.Fail(r.Context(), caller.IP, now)
		}
		return caller, err
	}
	caller.Key = key
	return caller, nil
}

// carriesKey reports whether a request comes with a key (or something
// meant as one): only those are throttled after failures, so a browser
// without a key still gets its 401 saying a key is needed.
func carriesKey(r *http.Request) bool {
	return r.Header.Get(echo.HeaderAuthorization) != "" || r.URL.Query().Has(keyParam)
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

// openGuard protects a server that runs without keys from the pages of
// other sites a visitor's browser opens, checked in this order:
//
//   - DNS rebinding: a page whose own name an attacker points at 127.0.0.1
//     is same-origin with the server to the browser, so Origin and
//     Sec-Fetch-Site say nothing; only its Host header gives it away. Host
//     must be a loopback name (localhost, *.localhost), an IP address
//     (rebinding needs a name the attacker controls) or one of
//     Deps.AllowedHosts (serve's --addr host and --allowed-hosts), else 403
//     host_denied.
//   - A state-changing request (a form POST from https://evil.example), or
//     an ask (GET /ask: an EventSource or an <img> starts a billed ask even
//     though CORS hides its answer), from another site is refused with 403
//     cross_site_denied unless its origin is in --cors-origins. Both use
//     net/http's CrossOriginProtection (Sec-Fetch-Site, else Origin against
//     Host), so the two follow one rule.
//
// With keys neither applies: such a request carries no key (a page cannot
// read the visitor's keys) and is refused anyway.
func (s *server) openGuard() echo.MiddlewareFunc {
	cop := http.NewCrossOriginProtection()
	for _, o := range s.deps.CORSOrigins {
		if err := cop.AddTrustedOrigin(o); err != nil {
			// ValidateOrigins refused it before; log rather than trust it.
			s.log.Error("ignoring a --cors-origins value", "origin", o, "err", err)
		}
	}
	hosts := make(map[string]bool, len(s.deps.AllowedHosts))
	for _, h := range s.deps.AllowedHosts {
		if h = normalizeHost(h); h != "" {
			hosts[h] = true
		}
	}
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if s.deps.Keys != nil && s.deps.Keys.Enabled() {
				return next(c)
			}
			r := c.Request()
			if !allowedHost(r.Host, hosts) {
				return &apiError{Status: http.StatusForbidden, Code: "host_denied",
					Message: fmt.Sprintf("this server runs without API keys and does not answer to Host %.100q", r.Host),
					Hint: "open it as http://localhost:PORT or http://127.0.0.1:PORT, or start serve with --allowed-hosts NAME " +
						"for a name that reaches it (a page whose name was pointed at this machine, DNS rebinding, may not use an open server)"}
			}
			if r.Method == http.MethodGet && c.Path() == "/ask" && (r.Header.Get("Sec-Fetch-Site") != "" || r.Header.Get("Origin") != "") {
				// Judged as the state-changing request it is (without
				// either header the check passes anyway: no copy).
				asPost := *r
				asPost.Method = http.MethodPost
				r = &asPost
			}
			if err := cop.Check(r); err != nil {
				return errCrossSite
			}
			return next(c)
		}
	}
}

// allowedHost reports whether a Host header is one an open server answers
// to (see openGuard). An absent Host (HTTP/1.0) is no browser's.
func allowedHost(hostport string, extra map[string]bool) bool {
	if hostport == "" {
		return true
	}
	h := normalizeHost(hostport)
	if _, err := netip.ParseAddr(h); err == nil {
		return true
	}
	return h == "localhost" || strings.HasSuffix(h, ".localhost") || extra[h]
}

// normalizeHost is the host of a Host header or host[:port], lower case,
// without brackets, port, zone or a trailing dot.
func normalizeHost(hostport string) string {
	h := hostport
	if host, _, err := net.SplitHostPort(hostport); err == nil {
		h = host
	}
	h = strings.TrimSuffix(strings.TrimSuffix(strings.TrimPrefix(h, "["), "]"), ".")
	return strings.ToLower(h)
}

// ValidateHosts checks --allowed-hosts values: each a host name or
// address, optionally with a port (which is ignored).
func ValidateHosts(hosts []string) error {
	for _, h := range hosts {
		host := h
		if hh, port, err := net.SplitHostPort(h); err == nil {
			if _, err := strconv.ParseUint(port, 10, 16); err != nil {
				return fmt.Errorf("%q is not a host name such as rag.example.com (no scheme or path)", h)
			}
			host = hh
		}
		if _, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
			continue
		}
		if host == "" || strings.ContainsAny(host, "/:@?#[] ") {
			return fmt.Errorf("%q is not a host name such as rag.example.com (no scheme or path)", h)
		}
	}
	return nil
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
