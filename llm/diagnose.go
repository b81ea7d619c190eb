package llm

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"path"
	"slices"
	"strings"
	"time"
	"unicode"

	"golang.org/x/net/http/httpproxy"

	"ragtime"
	"ragtime/pipeline"
)

// Remote is an HTTP generator (OpenAI-compatible, Anthropic or Ollama) with
// what doctor, ttft and serve's warm-up need beyond pipeline.Generator.
type Remote interface {
	pipeline.Generator
	ListModels(ctx context.Context) ([]string, error)
	Warmup(ctx context.Context, request bool) error
	CloseIdleConnections()
	Model() string
	BaseURL() string
}

// New builds the HTTP generator of provider (ProviderOpenAI,
// ProviderAnthropic or ProviderOllama).
func New(provider string, cfg Config) (Remote, error) {
	var r Remote
	var err error
	switch provider {
	case ProviderOpenAI:
		r, err = NewOpenAI(cfg)
	case ProviderAnthropic:
		r, err = NewAnthropic(cfg)
	case ProviderOllama:
		r, err = NewOllama(cfg)
	default:
		err = fmt.Errorf("llm provider must be %s, %s or %s, got %q", ProviderOpenAI, ProviderAnthropic, ProviderOllama, provider)
	}
	if err != nil {
		return nil, err // not a typed nil in the interface
	}
	return r, nil
}

// CheckStatus is the outcome of one Check.
type CheckStatus string

// Check outcomes. A warning does not stop Diagnose; a failure does.
const (
	CheckOK   CheckStatus = "ok"
	CheckWarn CheckStatus = "WARN"
	CheckFail CheckStatus = "FAIL"
)

// Check is one step of Diagnose.
type Check struct {
	// Name is the step: "api key", "base url", "proxy", "dns", "connect",
	// "models" or "first token".
	Name   string
	Status CheckStatus
	// Code is the error code (llm_auth, llm_connect, ...) of a warning or
	// failure, when there is one.
	Code string
	// Detail says what was found, in one line; never the key.
	Detail string
	// Hint says what to do about a warning or failure.
	Hint string
}

// DiagnoseConfig is what Diagnose checks: the generator's own
// configuration (Config.APIKey as read, before trimming, so stray
// whitespace can be reported) and how long each network step may take.
type DiagnoseConfig struct {
	// Provider is ProviderOpenAI, ProviderAnthropic or ProviderOllama.
	Provider string
	Config
	// CheckTimeout bounds each network step (dns, connect, models); the
	// first-token request gets the longer of it and Config.TTFTTimeout.
	CheckTimeout time.Duration
	// ConnectOnly stops after the TCP (and TLS) connect, so that nothing is
	// requested of the provider (nor billed): serve's start-up preflight.
	ConnectOnly bool
}

// Diagnose checks the way to a provider step by step — the key, the base
// URL, the proxy, DNS, the TCP and TLS connection, the models listing, and
// a 1-token streaming request with its TTFT — and returns one Check per
// step, up to and including the first failure. The models listing only
// warns (a model missing from it, or a listing the key may not read, can
// still answer): the first-token request decides. Nothing it returns
// holds the key.
func Diagnose(ctx context.Context, cfg DiagnoseConfig) []Check {
	d := &diagnosis{cfg: cfg}
	cfg.MaxRetries = 0 // a doctor reports the first failure as it is
	if cfg.Getenv == nil {
		cfg.Getenv = func(string) string { return "" }
	}
	d.cfg = cfg
	steps := []func(context.Context) bool{d.provider, d.apiKey, d.baseURL, d.proxy, d.dns, d.connect, d.models, d.firstToken}
	if cfg.ConnectOnly {
		steps = steps[:6]
	}
	for _, step := range steps {
		if !step(ctx) {
			break
		}
	}
	if d.buildErr == nil && d.remote != nil {
		d.remote.CloseIdleConnections()
	}
	return d.checks
}

// diagnosis carries what one step learns to the next.
type diagnosis struct {
	cfg    DiagnoseConfig
	checks []Check
	key    string // trimmed
	remote Remote
	// buildErr is why the generator could not be built (a bad base URL).
	buildErr error
	// listed are the model names the provider listed, if it did.
	listed []string
	u      *url.URL
	port   string
	// dialHost and dialPort are where the TCP connection goes: the proxy
	// when one applies, else the base URL's host.
	dialHost, dialPort string
	proxied            bool
}

func (d *diagnosis) ok(name, detail string) bool {
	d.checks = append(d.checks, Check{Name: name, Status: CheckOK, Detail: detail})
	return true
}

func (d *diagnosis) warn(name, code, detail, hint string) bool {
	d.checks = append(d.checks, Check{Name: name, Status: CheckWarn, Code: code, Detail: detail, Hint: hint})
	return true
}

// fail records a failure and returns false, which stops Diagnose.
func (d *diagnosis) fail(name, code, detail, hint string) bool {
	d.checks = append(d.checks, Check{Name: name, Status: CheckFail, Code: code, Detail: detail, Hint: hint})
	return false
}

func (d *diagnosis) failErr(name string, err error) bool {
	var pe *ragtime.Error
	if errors.As(err, &pe) {
		return d.fail(name, pe.Code, pe.Message, pe.Hint)
	}
	return d.fail(name, "", err.Error(), "")
}

func (d *diagnosis) keyFrom() string {
	if d.cfg.KeyEnv != "" {
		return d.cfg.KeyEnv
	}
	return "RAGTIME_LLM_API_KEY"
}

// provider fails on a provider New cannot build, before any other step
// reports ok about a configuration that cannot work.
func (d *diagnosis) provider(context.Context) bool {
	switch d.cfg.Provider {
	case ProviderOpenAI, ProviderAnthropic, ProviderOllama:
		return true
	}
	return d.fail("provider", "", fmt.Sprintf("--llm-provider %q is not a provider", d.cfg.Provider),
		fmt.Sprintf("use %s, %s, %s or %s (llm.provider in --config)", ProviderExtractive, ProviderOpenAI, ProviderAnthropic, ProviderOllama))
}

func (d *diagnosis) apiKey(context.Context) bool {
	raw := d.cfg.APIKey
	d.key = strings.TrimSpace(raw)
	from := d.keyFrom()
	d.remote, d.buildErr = New(d.cfg.Provider, d.cfg.Config) // an error is the base url step's to report
	u, _ := url.Parse(strings.TrimSpace(d.cfg.BaseURL))
	if d.remote != nil {
		u, _ = url.Parse(d.remote.BaseURL())
	}
	switch {
	case raw == "" && (d.cfg.Provider == ProviderOllama || (u != nil && IsLoopback(u.Hostname()))):
		return d.ok("api key", from+" is not set; none is needed for a local server")
	case raw == "":
		return d.fail("api key", CodeAuth, from+" is not set",
			fmt.Sprintf("export %s=<your %s key> (or name another variable with --llm-api-key-env or api_key_env in --config)", from, d.cfg.Provider))
	case raw != d.key:
		return d.fail("api key", CodeAuth, fmt.Sprintf("%s (%s) has surrounding whitespace or a newline", from, MaskKey(d.key)),
			"ragtime trims it, but other tools will not: set the variable to the bare key (a file read with $(cat ...) keeps no newline; echo does add one)")
	case strings.IndexFunc(d.key, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0:
		return d.fail("api key", CodeAuth, from+" contains whitespace or a control character inside it",
			"set it to the bare key, with no quotes, spaces or line breaks")
	}
	note := ""
	if strings.HasPrefix(d.key, "sk-ant-") && d.cfg.Provider != ProviderAnthropic {
		note = " (note: this looks like an Anthropic key, but --llm-provider is " + d.cfg.Provider + ")"
	}
	return d.ok("api key", fmt.Sprintf("%s from %s%s", MaskKey(d.key), from, note))
}

func (d *diagnosis) baseURL(context.Context) bool {
	if d.buildErr != nil {
		return d.fail("base url", "", d.buildErr.Error(), "check --llm-base-url and --llm-model (or base_url and default_model in --config)")
	}
	d.u, _ = url.Parse(d.remote.BaseURL()) // the client parsed it already
	d.port = d.u.Port()
	if d.port == "" {
		d.port = map[string]string{"http": "80", "https": "443"}[d.u.Scheme]
	}
	detail := fmt.Sprintf("%s (%s, host %s, port %s)", d.remote.BaseURL(), d.u.Scheme, d.u.Hostname(), d.port)
	if d.u.Scheme == "http" && !IsLoopback(d.u.Hostname()) && d.key != "" {
		detail += "; note: plain http to a remote host sends the key unencrypted"
	}
	return d.ok("base url", detail)
}

// proxy finds which proxy, if any, the base URL goes through.
func (d *diagnosis) proxy(context.Context) bool {
	getenv := d.cfg.Getenv
	pc := httpproxy.Config{
		HTTPProxy:  firstEnv(getenv, "HTTP_PROXY", "http_proxy"),
		HTTPSProxy: firstEnv(getenv, "HTTPS_PROXY", "https_proxy"),
		NoProxy:    firstEnv(getenv, "NO_PROXY", "no_proxy"),
	}
	d.dialHost, d.dialPort = d.u.Hostname(), d.port
	proxyURL, err := pc.ProxyFunc()(d.u)
	if all := firstEnv(getenv, "ALL_PROXY", "all_proxy"); proxyURL == nil && err == nil && all != "" {
		proxyURL, err = url.Parse(all)
	}
	switch {
	case err != nil:
		return d.fail("proxy", CodeConnect, "a proxy variable is not a valid URL: "+err.Error(), "fix or unset "+ProxyVars(getenv))
	case proxyURL != nil:
		d.proxied = true
		d.dialHost, d.dialPort = proxyURL.Hostname(), proxyURL.Port()
		if d.dialPort == "" {
			d.dialPort = map[string]string{"http": "80", "https": "443", "socks5": "1080"}[proxyURL.Scheme]
		}
		return d.ok("proxy", fmt.Sprintf("requests go through %s (%s)", proxyURL.Redacted(), ProxyVars(getenv)))
	case ProxyVars(getenv) != "":
		return d.ok("proxy", "proxy variables are set but NO_PROXY excludes this host: "+ProxyVars(getenv))
	}
	return d.ok("proxy", "no proxy variables set; connecting directly")
}

func (d *diagnosis) dns(ctx context.Context) bool {
	if net.ParseIP(d.dialHost) != nil {
		return d.ok("dns", d.dialHost+" is an IP address; no lookup")
	}
	cctx, cancel := context.WithTimeout(ctx, d.cfg.CheckTimeout)
	defer cancel()
	start := time.Now()
	addrs, err := net.DefaultResolver.LookupHost(cctx, d.dialHost)
	if err != nil {
		return d.fail("dns", CodeConnect, fmt.Sprintf("could not resolve %s: %v", d.dialHost, err), "check the host name in --llm-base-url (or the proxy's) and this machine's DNS")
	}
	return d.ok("dns", fmt.Sprintf("%s → %s in %.1f ms", d.dialHost, strings.Join(addrs[:min(len(addrs), 3)], ", "), msOf(time.Since(start))))
}

// connect opens a TCP connection, and a TLS session when the URL is https
// and no proxy stands between.
func (d *diagnosis) connect(ctx context.Context) bool {
	cctx, cancel := context.WithTimeout(ctx, d.cfg.CheckTimeout)
	defer cancel()
	addr := net.JoinHostPort(d.dialHost, d.dialPort)
	start := time.Now()
	conn, err := (&net.Dialer{}).DialContext(cctx, "tcp", addr)
	if err != nil {
		hint := "check the host and port in --llm-base-url and that the server is running"
		if d.proxied {
			hint = "the proxy is not reachable: check " + ProxyVars(d.cfg.Getenv) + ", or exclude this host with NO_PROXY"
		}
		return d.fail("connect", CodeConnect, fmt.Sprintf("tcp connect to %s failed: %v", addr, err), hint)
	}
	tcpMs := msOf(time.Since(start))
	if d.u.Scheme != "https" || d.proxied {
		conn.Close()
		return d.ok("connect", fmt.Sprintf("tcp %.1f ms (%s, no TLS from here)", tcpMs, map[bool]string{true: "via the proxy", false: "plain http"}[d.proxied]))
	}
	start = time.Now()
	tc := tls.Client(conn, &tls.Config{ServerName: d.u.Hostname(), NextProtos: []string{"h2", "http/1.1"}})
	err = tc.HandshakeContext(cctx)
	tc.Close()
	if err != nil {
		hint := "check the host name in --llm-base-url; a proxy that intercepts TLS needs its CA trusted (SSL_CERT_FILE)"
		var rh tls.RecordHeaderError
		if errors.As(err, &rh) {
			hint = "the server speaks plain http: use http:// in --llm-base-url"
		}
		return d.fail("connect", CodeConnect, fmt.Sprintf("TLS handshake with %s failed: %v", d.u.Host, err), hint)
	}
	return d.ok("connect", fmt.Sprintf("tcp %.1f ms, tls %.1f ms (%s)", tcpMs, msOf(time.Since(start)), tc.ConnectionState().NegotiatedProtocol))
}

// models reads the listing. It only warns: llama.cpp's server answers any
// model name (docs/providers.md recommends "any") but lists its file name,
// and a key may be allowed to chat but not to list; the first token
// decides.
func (d *diagnosis) models(ctx context.Context) bool {
	cctx, cancel := context.WithTimeout(ctx, d.cfg.CheckTimeout)
	defer cancel()
	models, err := d.remote.ListModels(cctx)
	if err != nil {
		var pe *ragtime.Error
		if errors.As(err, &pe) {
			return d.warn("models", pe.Code, "could not list the models: "+pe.Message, "the first-token request below decides whether the model answers; "+pe.Hint)
		}
		return d.warn("models", "", "could not list the models: "+err.Error(), "the first-token request below decides whether the model answers")
	}
	d.listed = models
	model := d.remote.Model()
	if listed, ok := MatchModel(d.cfg.Provider, model, models); ok {
		if listed != model {
			return d.ok("models", fmt.Sprintf("%d listed, %q among them as %q", len(models), model, listed))
		}
		return d.ok("models", fmt.Sprintf("%d listed, %q among them", len(models), model))
	}
	return d.warn("models", CodeModelNotFound, fmt.Sprintf("%q is not among the %d models the provider lists: %s", model, len(models), listNames(models)),
		"some servers answer any name (llama.cpp's serves its one model whatever is asked); if the first token below fails, set --llm-model (or default_model) to a listed name")
}

// listNames shows up to ten listed names.
func listNames(models []string) string {
	if len(models) == 0 {
		return "(none)"
	}
	s := strings.Join(models[:min(len(models), 10)], ", ")
	if len(models) > 10 {
		s += fmt.Sprintf(", … (%d more)", len(models)-10)
	}
	return s
}

// MatchModel finds model in a provider's listing and returns the listed
// name it matched. Ollama lists "name:tag" and treats a name without a tag
// as ":latest" ("rnd" is "rnd:latest"); Anthropic lists dated ids, of which
// an alias is a prefix; llama.cpp's server lists the file it loaded
// ("/models/qwen2.5-0.5b-q4_k_m.gguf"), which the file's name matches with
// or without its .gguf extension.
func MatchModel(provider, model string, listed []string) (string, bool) {
	if slices.Contains(listed, model) {
		return model, true
	}
	for _, l := range listed {
		base := fileBase(l)
		if base == l {
			continue // not a path
		}
		if m := fileBase(model); m == base || m == strings.TrimSuffix(base, ggufExt(base)) {
			return l, true
		}
	}
	withTag := func(m string) string {
		if strings.Contains(m, ":") {
			return m
		}
		return m + ":latest"
	}
	for _, l := range listed {
		if withTag(l) == withTag(model) {
			return l, true
		}
	}
	if provider == ProviderAnthropic {
		for _, l := range listed {
			if strings.HasPrefix(l, model) {
				return l, true
			}
		}
	}
	return "", false
}

// fileBase is the last element of a slash- or backslash-separated path.
func fileBase(p string) string {
	return p[strings.LastIndexAny(p, `/\`)+1:]
}

// ggufExt is name's ".gguf" extension, whatever its case, or "".
func ggufExt(name string) string {
	if ext := path.Ext(name); strings.EqualFold(ext, ".gguf") {
		return ext
	}
	return ""
}

// firstToken sends one 1-token streaming request and times it.
func (d *diagnosis) firstToken(ctx context.Context) bool {
	gctx, cancel := context.WithTimeout(ctx, max(d.cfg.CheckTimeout, d.cfg.TTFTTimeout))
	defer cancel()
	req := pipeline.GenerateRequest{MaxTokens: 1, Messages: []pipeline.Message{{Role: "user", Content: "Say OK."}}}
	var first time.Time
	var gen pipeline.Generation
	err := d.remote.Generate(gctx, &req, func(dl pipeline.Delta) error {
		if first.IsZero() {
			first = dl.At
		}
		return nil
	}, &gen)
	if err != nil {
		var pe *ragtime.Error
		if errors.As(err, &pe) && pe.Kind == ragtime.KindUpstreamNotFound && len(d.listed) > 0 {
			return d.fail("first token", pe.Code, pe.Message, "set --llm-model (or default_model) to one of: "+listNames(d.listed))
		}
		return d.failErr("first token", err)
	}
	if first.IsZero() {
		return d.fail("first token", CodeBadStream, "the 1-token request finished without any token", "the provider answered an empty stream; check the model with another client")
	}
	conn := "new connection"
	if gen.Conn.Reused {
		conn = "reused connection"
	}
	line := fmt.Sprintf("TTFT %.1f ms (connect %.1f ms on a %s, prefill %.1f ms), HTTP %d", msOf(first.Sub(gen.RequestStart)),
		msOf(gen.GotConn.Sub(gen.RequestStart)), conn, msOf(first.Sub(gen.WroteRequest)), gen.UpstreamStatus)
	if gen.RequestID != "" {
		line += ", request id " + gen.RequestID
	}
	return d.ok("first token", line)
}

// msOf is a duration in milliseconds, to the microsecond.
func msOf(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 }

func firstEnv(getenv func(string) string, names ...string) string {
	for _, n := range names {
		if v := getenv(n); v != "" {
			return v
		}
	}
	return ""
}

// IsLoopback reports whether host is localhost or a loopback address.
func IsLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// MaskKey shows a key as its first three and last four characters
// (sk-…abcd), enough to tell keys apart and never enough to use one. Keys
// shorter than 12 characters show only their length.
func MaskKey(key string) string {
	key = strings.TrimSpace(key)
	if len(key) < 12 {
		return fmt.Sprintf("(set, %d characters)", len(key))
	}
	return key[:3] + "…" + key[len(key)-4:]
}
