package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"slices"
	"strings"
	"time"
	"unicode"

	"golang.org/x/net/http/httpproxy"

	"ragtime/llm"
	"ragtime/pipeline"
)

// doctorConfig holds doctor's flags: the llm flags and --config.
type doctorConfig struct {
	configFile string
	llm        llmConfig
	timeout    time.Duration
}

func (c *doctorConfig) register(fs *flag.FlagSet) {
	fs.StringVar(&c.configFile, "config", "", "JSON or TOML file with an llm section (as for serve)")
	c.llm.register(fs)
	fs.DurationVar(&c.timeout, "check-timeout", 10*time.Second, "longest each network check may take")
}

// errDoctorFailed is returned when a check failed (exit status 1).
var errDoctorFailed = errors.New("doctor found a problem")

// doctor prints one line per check.
type doctor struct {
	w io.Writer
}

func (d doctor) ok(check, detail string) {
	fmt.Fprintf(d.w, "ok    %-14s %s\n", check, detail)
}

func (d doctor) fail(check, code, msg, hint string) error {
	if code != "" {
		msg = code + ": " + msg
	}
	fmt.Fprintf(d.w, "FAIL  %-14s %s\n", check, msg)
	if hint != "" {
		fmt.Fprintf(d.w, "      %-14s hint: %s\n", "", hint)
	}
	return &checkFailed{Check: check, Msg: msg}
}

// checkFailed is the first check that failed; it matches errDoctorFailed.
type checkFailed struct {
	// Check names the check (api key, dns, connect, ...); Msg says what failed.
	Check, Msg string
}

func (e *checkFailed) Error() string { return errDoctorFailed.Error() + ": " + e.Check }

// Is reports whether target is errDoctorFailed.
func (e *checkFailed) Is(target error) bool { return target == errDoctorFailed }

func (d doctor) failErr(check string, err error) error {
	var pe *pipeline.Error
	if errors.As(err, &pe) {
		return d.fail(check, pe.Code, pe.Message, pe.Hint)
	}
	return d.fail(check, "", err.Error(), "")
}

// runDoctor checks the LLM provider step by step and stops at the first
// failure: configuration, key, base URL, proxy, DNS, TCP and TLS connect,
// the models list, and a 1-token streaming request with its TTFT.
func runDoctor(ctx context.Context, env *environment, args []string) error {
	fs := newFlagSet(env, "doctor", "doctor [flags]")
	var cfg doctorConfig
	cfg.register(fs)
	d := doctor{w: env.stdout}
	sources, err := parseFlagSources(fs, env, args)
	if errors.Is(err, flag.ErrHelp) {
		return err
	}
	if err != nil {
		return d.fail("configuration", "", err.Error(), "fix the flag, RAGTIME_* variable or --config file named above")
	}
	c := &cfg.llm
	from := "flags and defaults"
	if cfg.configFile != "" {
		from = "--config " + cfg.configFile
	}
	d.ok("configuration", fmt.Sprintf("loaded from %s: provider %s (%s), model %q (%s)", from, c.provider, sources["llm-provider"], c.model, sources["llm-model"]))
	return d.checkLLM(ctx, *c, env.getenv, cfg.timeout, false)
}

// checkLLM runs doctor's checks after the configuration, stopping at the
// first failure. connectOnly stops after the TCP (and TLS) connect, so that
// nothing is requested of the provider: serve's start-up preflight.
func (d doctor) checkLLM(ctx context.Context, c llmConfig, getenv func(string) string, timeout time.Duration, connectOnly bool) error {
	if c.provider == "extractive" {
		d.ok("provider", "the extractive generator runs in-process: no network, no key, nothing more to check")
		return nil
	}

	// The key.
	raw, keyFrom := c.apiKey(getenv)
	key := strings.TrimSpace(raw)
	c.maxRetries = 0 // a doctor reports the first failure as it is
	_, remote, _, buildErr := c.buildGenerator(getenv)
	u, _ := url.Parse(strings.TrimSpace(c.baseURL))
	if remote != nil {
		u, _ = url.Parse(remote.BaseURL())
	}
	switch {
	case raw == "" && (c.provider == llm.ProviderOllama || (u != nil && isLoopback(u.Hostname()))):
		d.ok("api key", fmt.Sprintf("%s is not set; none is needed for a local server", keyFrom))
	case raw == "":
		return d.fail("api key", llm.CodeAuth, keyFrom+" is not set",
			fmt.Sprintf("export %s=<your %s key> (or name another variable with --llm-api-key-env or api_key_env in --config)", keyFrom, c.provider))
	case raw != key:
		return d.fail("api key", llm.CodeAuth, fmt.Sprintf("%s (%s) has surrounding whitespace or a newline", keyFrom, maskKey(key)),
			"ragtime trims it, but other tools will not: set the variable to the bare key (a file read with $(cat ...) keeps no newline; echo does add one)")
	case strings.IndexFunc(key, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0:
		return d.fail("api key", llm.CodeAuth, fmt.Sprintf("%s contains whitespace or a control character inside it", keyFrom),
			"set it to the bare key, with no quotes, spaces or line breaks")
	default:
		note := ""
		if strings.HasPrefix(key, "sk-ant-") && c.provider != llm.ProviderAnthropic {
			note = " (note: this looks like an Anthropic key, but --llm-provider is " + c.provider + ")"
		}
		d.ok("api key", fmt.Sprintf("%s from %s%s", maskKey(key), keyFrom, note))
	}

	// The base URL.
	if buildErr != nil {
		return d.fail("base url", "", buildErr.Error(), "check --llm-base-url and --llm-model (or base_url and default_model in --config)")
	}
	defer remote.CloseIdleConnections()
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	detail := fmt.Sprintf("%s (%s, host %s, port %s)", remote.BaseURL(), u.Scheme, u.Hostname(), port)
	if u.Scheme == "http" && !isLoopback(u.Hostname()) && key != "" {
		detail += "; note: plain http to a remote host sends the key unencrypted"
	}
	d.ok("base url", detail)

	// Proxies: which one, if any, this URL goes through.
	pc := httpproxy.Config{
		HTTPProxy:  firstEnv(getenv, "HTTP_PROXY", "http_proxy"),
		HTTPSProxy: firstEnv(getenv, "HTTPS_PROXY", "https_proxy"),
		NoProxy:    firstEnv(getenv, "NO_PROXY", "no_proxy"),
	}
	dialHost, dialPort := u.Hostname(), port
	proxyURL, perr := pc.ProxyFunc()(u)
	if all := firstEnv(getenv, "ALL_PROXY", "all_proxy"); proxyURL == nil && perr == nil && all != "" {
		proxyURL, perr = url.Parse(all)
	}
	switch {
	case perr != nil:
		return d.fail("proxy", llm.CodeConnect, "a proxy variable is not a valid URL: "+perr.Error(), "fix or unset "+llm.ProxyVars(getenv))
	case proxyURL != nil:
		d.ok("proxy", fmt.Sprintf("requests go through %s (%s)", proxyURL.Redacted(), llm.ProxyVars(getenv)))
		dialHost, dialPort = proxyURL.Hostname(), proxyURL.Port()
		if dialPort == "" {
			dialPort = map[string]string{"http": "80", "https": "443", "socks5": "1080"}[proxyURL.Scheme]
		}
	case llm.ProxyVars(getenv) != "":
		d.ok("proxy", "proxy variables are set but NO_PROXY excludes this host: "+llm.ProxyVars(getenv))
	default:
		d.ok("proxy", "no proxy variables set; connecting directly")
	}

	// DNS.
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var addrs []string
	var err error
	start := time.Now()
	if ip := net.ParseIP(dialHost); ip != nil {
		addrs = []string{dialHost}
		d.ok("dns", dialHost+" is an IP address; no lookup")
	} else {
		addrs, err = net.DefaultResolver.LookupHost(cctx, dialHost)
		if err != nil {
			return d.fail("dns", llm.CodeConnect, fmt.Sprintf("could not resolve %s: %v", dialHost, err), "check the host name in --llm-base-url (or the proxy's) and this machine's DNS")
		}
		d.ok("dns", fmt.Sprintf("%s → %s in %.1f ms", dialHost, strings.Join(addrs[:min(len(addrs), 3)], ", "), ms(time.Since(start))))
	}

	// TCP, then TLS when the URL is https and no proxy stands between.
	start = time.Now()
	conn, err := (&net.Dialer{}).DialContext(cctx, "tcp", net.JoinHostPort(dialHost, dialPort))
	if err != nil {
		hint := "check the host and port in --llm-base-url and that the server is running"
		if proxyURL != nil {
			hint = "the proxy is not reachable: check " + llm.ProxyVars(getenv) + ", or exclude this host with NO_PROXY"
		}
		return d.fail("connect", llm.CodeConnect, fmt.Sprintf("tcp connect to %s failed: %v", net.JoinHostPort(dialHost, dialPort), err), hint)
	}
	tcpMs := ms(time.Since(start))
	if u.Scheme == "https" && proxyURL == nil {
		start = time.Now()
		tc := tls.Client(conn, &tls.Config{ServerName: u.Hostname(), NextProtos: []string{"h2", "http/1.1"}})
		err := tc.HandshakeContext(cctx)
		tc.Close()
		if err != nil {
			hint := "check the host name in --llm-base-url; a proxy that intercepts TLS needs its CA trusted (SSL_CERT_FILE)"
			var rh tls.RecordHeaderError
			if errors.As(err, &rh) {
				hint = "the server speaks plain http: use http:// in --llm-base-url"
			}
			return d.fail("connect", llm.CodeConnect, fmt.Sprintf("TLS handshake with %s failed: %v", u.Host, err), hint)
		}
		d.ok("connect", fmt.Sprintf("tcp %.1f ms, tls %.1f ms (%s)", tcpMs, ms(time.Since(start)), tc.ConnectionState().NegotiatedProtocol))
	} else {
		conn.Close()
		d.ok("connect", fmt.Sprintf("tcp %.1f ms (%s, no TLS from here)", tcpMs, map[bool]string{true: "via the proxy", false: "plain http"}[proxyURL != nil]))
	}

	if connectOnly {
		return nil
	}

	// The models list.
	models, err := remote.ListModels(cctx)
	if err != nil {
		return d.failErr("models", err)
	}
	model := remote.Model()
	listed := slices.Contains(models, model)
	if !listed && c.provider == llm.ProviderAnthropic {
		// Anthropic lists dated ids; an alias is their prefix.
		listed = slices.ContainsFunc(models, func(m string) bool { return strings.HasPrefix(m, model) })
	}
	if !listed {
		return d.fail("models", llm.CodeModelNotFound, fmt.Sprintf("%q is not among the %d models the provider lists", model, len(models)),
			fmt.Sprintf("set --llm-model (or default_model) to one of: %s", strings.Join(models[:min(len(models), 10)], ", ")))
	}
	d.ok("models", fmt.Sprintf("%d listed, %q among them", len(models), model))

	// One 1-token streaming request.
	gctx, gcancel := context.WithTimeout(ctx, max(timeout, c.ttftTimeout))
	defer gcancel()
	req := pipeline.GenerateRequest{MaxTokens: 1, Messages: []pipeline.Message{{Role: "user", Content: "Say OK."}}}
	var first time.Time
	gen, err := remote.Generate(gctx, req, func(dl pipeline.Delta) error {
		if first.IsZero() {
			first = dl.At
		}
		return nil
	})
	if err != nil {
		return d.failErr("first token", err)
	}
	if first.IsZero() {
		return d.fail("first token", llm.CodeBadStream, "the 1-token request finished without any token", "the provider answered an empty stream; check the model with another client")
	}
	reused := "new connection"
	if gen.Conn.Reused {
		reused = "reused connection"
	}
	line := fmt.Sprintf("TTFT %.1f ms (connect %.1f ms on a %s, prefill %.1f ms), HTTP %d", ms(first.Sub(gen.RequestStart)),
		ms(gen.GotConn.Sub(gen.RequestStart)), reused, ms(first.Sub(gen.WroteRequest)), gen.UpstreamStatus)
	if gen.RequestID != "" {
		line += ", request id " + gen.RequestID
	}
	d.ok("first token", line)
	return nil
}

// ms is a duration in milliseconds.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 }

func firstEnv(getenv func(string) string, names ...string) string {
	for _, n := range names {
		if v := getenv(n); v != "" {
			return v
		}
	}
	return ""
}

// isLoopback reports whether host is localhost or a loopback address.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
