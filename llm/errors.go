package llm

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"ragtime/pipeline"
)

// Error codes the generators return in pipeline.Error.Code.
const (
	// CodeAuth: the provider rejected the API key (HTTP 401 or 403).
	CodeAuth = "llm_auth"
	// CodeModelNotFound: the provider does not serve the requested model.
	CodeModelNotFound = "llm_model_not_found"
	// CodeRateLimited: the provider answered HTTP 429.
	CodeRateLimited = "llm_rate_limited"
	// CodeUnavailable: the provider failed (HTTP 5xx) or dropped the
	// connection before or during the answer.
	CodeUnavailable = "llm_unavailable"
	// CodeTimeout: the provider sent nothing for longer than the configured
	// timeout, or the caller's deadline passed.
	CodeTimeout = "llm_timeout"
	// CodeConnect: no connection could be made (refused, DNS, TLS, proxy).
	CodeConnect = "llm_connect"
	// CodeBadStream: the response was not a well-formed stream of the provider's format,
	// or it carried an error object mid-stream.
	CodeBadStream = "llm_bad_stream"
	// CodeBadRequest: the provider rejected the request itself (another 4xx,
	// such as a prompt longer than the model's context window).
	CodeBadRequest = "llm_bad_request"
	// CodeCancelled: the caller's context was cancelled; the error wraps
	// context.Canceled.
	CodeCancelled = "llm_cancelled"
)

// maxErrorBody bounds how much of an upstream error body is read.
const maxErrorBody = 4 << 10

// secretScrubber removes anything looking like the API key from text that
// came from the network or from errors.
type secretScrubber struct {
	secrets []string
}

// keyLike matches tokens shaped like provider API keys (sk-…, including the
// masked forms providers echo back, such as sk-abc*****wxyz), any masked
// token (four or more asterisks) and bearer credentials.
var keyLike = regexp.MustCompile(`(?i)\b(?:sk|pk|rk)-[A-Za-z0-9_*.\-]{6,}|[A-Za-z0-9_\-.]*\*{4,}[A-Za-z0-9_\-.]*|bearer\s+\S+`)

func newSecretScrubber(key string) secretScrubber {
	var s secretScrubber
	if key == "" {
		return s
	}
	s.secrets = append(s.secrets, key)
	if t := strings.TrimSpace(key); t != key && t != "" {
		s.secrets = append(s.secrets, t)
	}
	// Providers echo a masked key: its first and last few characters.
	if t := strings.TrimSpace(key); len(t) >= 16 {
		s.secrets = append(s.secrets, t[:8], t[len(t)-6:])
	}
	return s
}

func (s secretScrubber) scrub(text string) string {
	// Patterns first: replacing a bare key prefix first would break up a
	// masked key and leave its tail behind.
	text = keyLike.ReplaceAllString(text, "[redacted]")
	for _, k := range s.secrets {
		if strings.Contains(text, k) {
			text = strings.ReplaceAll(text, k, "[redacted]")
		}
	}
	return text
}

// scrubbedError keeps an error's chain for errors.Is/As but scrubs its text.
type scrubbedError struct {
	err error
	s   secretScrubber
}

func (e scrubbedError) Error() string { return e.s.scrub(e.err.Error()) }
func (e scrubbedError) Unwrap() error { return e.err }

func (s secretScrubber) wrap(err error) error {
	if err == nil {
		return nil
	}
	return scrubbedError{err: err, s: s}
}

// upstreamError is the error object of an OpenAI-compatible error body, in
// the shapes seen in the wild: {"error": {...}}, {"error": "text"} and
// {"message": "text"}.
type upstreamError struct {
	Message string
	Type    string
	Code    string
}

func parseUpstreamError(body []byte) upstreamError {
	var env struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
		Detail  string          `json:"detail"`
	}
	var ue upstreamError
	if json.Unmarshal(body, &env) != nil {
		ue.Message = strings.TrimSpace(string(body))
		return ue
	}
	if len(env.Error) > 0 && string(env.Error) != "null" {
		ue = decodeErrorObject(env.Error)
	}
	if ue.Message == "" {
		ue.Message = env.Message
	}
	if ue.Message == "" {
		ue.Message = env.Detail
	}
	return ue
}

// decodeErrorObject reads an "error" value that is an object or a string.
func decodeErrorObject(raw json.RawMessage) upstreamError {
	var obj struct {
		Message string          `json:"message"`
		Type    string          `json:"type"`
		Code    json.RawMessage `json:"code"`
	}
	if json.Unmarshal(raw, &obj) == nil {
		ue := upstreamError{Message: obj.Message, Type: obj.Type}
		if len(obj.Code) > 0 && string(obj.Code) != "null" {
			var s string
			if json.Unmarshal(obj.Code, &s) == nil {
				ue.Code = s
			} else {
				ue.Code = string(obj.Code)
			}
		}
		return ue
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return upstreamError{Message: s}
	}
	return upstreamError{Message: string(raw)}
}

// mentionsMissingModel reports whether an upstream error says the model does
// not exist (OpenAI: code model_not_found; vLLM, Ollama, llama.cpp: a message
// naming the model as not found or not existing).
func (ue upstreamError) mentionsMissingModel() bool {
	if ue.Code == "model_not_found" {
		return true
	}
	m := strings.ToLower(ue.Message)
	if !strings.Contains(m, "model") {
		return false
	}
	for _, p := range []string{"not found", "does not exist", "not exist", "no such model", "unknown model", "invalid model", "not supported", "not available"} {
		if strings.Contains(m, p) {
			return true
		}
	}
	return false
}

// statusError classifies an HTTP error response.
func (c *client) statusError(gen *pipeline.Generation, status int, header map[string][]string, body []byte, model string) *pipeline.Error {
	ue := parseUpstreamError(body)
	detail := c.scrubber.scrub(truncate(ue.Message, 300))
	if detail == "" {
		detail = "(no error message)"
	}
	e := &pipeline.Error{
		Stage:     pipeline.StageLLMPrefill,
		Status:    status,
		RequestID: gen.RequestID,
	}
	host := c.redactedBase
	switch {
	case status == 401 || status == 403:
		e.Code = CodeAuth
		e.Message = fmt.Sprintf("the model provider at %s rejected the API key (HTTP %d): %s", host, status, detail)
		if c.key != "" {
			e.Hint = fmt.Sprintf("check that %s holds the key itself (no quotes, whitespace or newline) and that it is a key for this provider", c.keyEnv)
			if other := keyProvider(c.key); other != "" && other != c.d.provider() {
				e.Hint += fmt.Sprintf("; it looks like an %s key, but --llm-provider is %s", other, c.d.provider())
			}
		} else {
			e.Hint = fmt.Sprintf("%s is not set; set it to this provider's API key (or name another variable with --llm-api-key-env)", c.keyEnv)
		}
	case status == 404 || ue.mentionsMissingModel():
		e.Code = CodeModelNotFound
		e.Message = fmt.Sprintf("the model provider at %s does not serve model %q (HTTP %d): %s", host, model, status, detail)
		e.Hint = fmt.Sprintf("check --llm-model (now %q) against the provider's model list: `ragtime doctor` lists it", model)
		if status == 404 && !ue.mentionsMissingModel() {
			e.Message = fmt.Sprintf("%s%s or model %q was not found (HTTP 404): %s", host, c.d.chatPath(), model, detail)
			e.Hint += "; if the path is wrong, check --llm-base-url (OpenAI-compatible servers usually need the /v1 suffix)"
		}
	case status == 429:
		e.Code = CodeRateLimited
		e.Message = fmt.Sprintf("the model provider at %s is rate limiting requests (HTTP 429): %s", host, detail)
		e.Hint = "send fewer concurrent requests or raise the provider's rate limit"
		if ra := retryAfter(header); ra != "" {
			e.Message += "; retry after " + ra
			e.Hint = "retry after " + ra + "; " + e.Hint
		}
	case status == 408:
		e.Code = CodeTimeout
		e.Message = fmt.Sprintf("the model provider at %s timed out the request (HTTP 408): %s", host, detail)
		e.Hint = "retry; if it persists, the provider is overloaded"
	case status >= 500:
		e.Code = CodeUnavailable
		e.Message = fmt.Sprintf("the model provider at %s failed (HTTP %d): %s", host, status, detail)
		e.Hint = "the provider is failing or overloaded; retry later or check its status page"
	default:
		e.Code = CodeBadRequest
		e.Message = fmt.Sprintf("the model provider at %s rejected the request (HTTP %d): %s", host, status, detail)
		e.Hint = "if the prompt is too long for the model, lower top_k or max_tokens"
	}
	return e
}

// retryAfter renders a Retry-After header (seconds or an HTTP date).
func retryAfter(header map[string][]string) string {
	v := ""
	if vs := header["Retry-After"]; len(vs) > 0 {
		v = strings.TrimSpace(vs[0])
	}
	if v == "" {
		return ""
	}
	if n, err := strconv.Atoi(v); err == nil && n >= 0 {
		return (time.Duration(n) * time.Second).String()
	}
	if t, err := time.Parse(time.RFC1123, v); err == nil {
		return t.UTC().Format(time.RFC3339)
	}
	return truncate(v, 40)
}

// transportError classifies a failure to get a response or to read the
// stream. parent is the caller's context, call the per-call one.
func (c *client) transportError(parent, call context.Context, gen *pipeline.Generation, err error) *pipeline.Error {
	if e := contextError(parent, call, gen); e != nil {
		return e
	}
	stage := gen.FailedStage()
	e := &pipeline.Error{Stage: stage, Status: gen.UpstreamStatus, RequestID: gen.RequestID, Err: c.scrubber.wrap(err)}
	var te interface{ Timeout() bool }
	var dnsErr *net.DNSError
	var recErr tls.RecordHeaderError
	var certErr *tls.CertificateVerificationError
	switch {
	case stage == pipeline.StageLLMConnect && errors.As(err, &dnsErr):
		e.Code = CodeConnect
		e.Message = fmt.Sprintf("could not resolve the host of the model provider at %s: %s", c.redactedBase, c.scrubber.scrub(dnsErr.Error()))
		e.Hint = "check the host name in --llm-base-url and this machine's DNS"
	case stage == pipeline.StageLLMConnect && errors.As(err, &recErr):
		e.Code = CodeConnect
		e.Message = fmt.Sprintf("the model provider at %s answered the TLS handshake with plain HTTP", c.redactedBase)
		e.Hint = "the server speaks http, not https: use http:// in --llm-base-url"
	case stage == pipeline.StageLLMConnect && errors.As(err, &certErr):
		e.Code = CodeConnect
		e.Message = fmt.Sprintf("the TLS certificate of the model provider at %s is not trusted: %s", c.redactedBase, c.scrubber.scrub(certErr.Error()))
		e.Hint = "check the host name in --llm-base-url; a proxy that intercepts TLS needs its CA in the system trust store (SSL_CERT_FILE)"
	case errors.As(err, &te) && te.Timeout():
		e.Code = CodeTimeout
		e.Message = fmt.Sprintf("the model provider at %s did not answer in time", c.redactedBase)
		e.Hint = "check the provider is reachable and not overloaded"
	case stage == pipeline.StageLLMConnect:
		e.Code = CodeConnect
		e.Message = fmt.Sprintf("could not connect to the model provider at %s", c.redactedBase)
		e.Hint = "check --llm-base-url (host, port, http vs https) and that the server is running"
		if strings.HasPrefix(c.base, "https://") && strings.Contains(err.Error(), "server gave HTTP response") {
			e.Hint = "the server speaks http, not https: use http:// in --llm-base-url"
		}
	default:
		e.Code = CodeUnavailable
		e.Message = fmt.Sprintf("the connection to the model provider at %s failed", c.redactedBase)
		e.Hint = "the provider closed the connection; retry, and check its logs if it persists"
	}
	if e.Code == CodeConnect {
		if p := ProxyVars(c.getenv); p != "" {
			e.Hint += "; proxy variables are set (" + p + "): check the proxy is reachable, or exclude this host with NO_PROXY"
		}
	}
	return e
}

// keyProvider guesses whose key this is from its well-known prefix.
func keyProvider(key string) string {
	switch {
	case strings.HasPrefix(key, "sk-ant-"):
		return ProviderAnthropic
	case strings.HasPrefix(key, "sk-proj-"), strings.HasPrefix(key, "sk-svcacct-"):
		return ProviderOpenAI
	}
	return ""
}

// contextError returns the error for a call ended by the caller's context or
// by the idle timeout, or nil when neither ended it.
func contextError(parent, call context.Context, gen *pipeline.Generation) *pipeline.Error {
	stage := gen.FailedStage()
	if err := parent.Err(); err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return &pipeline.Error{Stage: stage, Code: CodeTimeout, Message: "the deadline for the answer passed before the model finished", Hint: "the request's deadline is shorter than the answer takes; raise it or lower max_tokens", Status: gen.UpstreamStatus, RequestID: gen.RequestID, Err: err}
		}
		return &pipeline.Error{Stage: stage, Code: CodeCancelled, Message: "the request was cancelled before the model finished", Status: gen.UpstreamStatus, RequestID: gen.RequestID, Err: err}
	}
	if call == nil {
		return nil
	}
	switch cause := context.Cause(call); {
	case errors.Is(cause, errTTFTTimeout):
		return &pipeline.Error{Stage: stage, Code: CodeTimeout, Message: "the model sent no first token within --llm-ttft-timeout", Hint: "raise --llm-ttft-timeout for long prompts or slow models, or check the provider is not overloaded (its queue and prefill)", Status: gen.UpstreamStatus, RequestID: gen.RequestID, Err: cause}
	case errors.Is(cause, errOverallTimeout):
		return &pipeline.Error{Stage: stage, Code: CodeTimeout, Message: "the generation took longer than --llm-timeout", Hint: "raise --llm-timeout, or lower max_tokens", Status: gen.UpstreamStatus, RequestID: gen.RequestID, Err: cause}
	}
	return nil
}

// ProxyVars lists the proxy environment variables that are set, as
// NAME=value with any password in the value masked ("" when none is set).
// getenv nil means os.Getenv.
func ProxyVars(getenv func(string) string) string {
	if getenv == nil {
		getenv = os.Getenv
	}
	var set []string
	proxied := false
	for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "all_proxy", "no_proxy"} {
		if v := getenv(k); v != "" {
			if u, err := url.Parse(v); err == nil && u.User != nil {
				v = u.Redacted()
			}
			set = append(set, k+"="+truncate(v, 120))
			proxied = proxied || !strings.EqualFold(k, "NO_PROXY")
		}
	}
	if !proxied {
		return ""
	}
	return strings.Join(set, ", ")
}

// truncate shortens s to at most n bytes without splitting a UTF-8 sequence.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && n < len(s) && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n] + "…"
}
