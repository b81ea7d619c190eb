package llm

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"ragtime"
	"ragtime/internal/upstream"
	"ragtime/pipeline"
)

// Error codes the generators return in ragtime.Error.Code, declared in
// package ragtime with the other codes.
const (
	// CodeAuth: the provider rejected the API key (HTTP 401 or 403).
	CodeAuth = ragtime.CodeLLMAuth
	// CodeModelNotFound: the provider does not serve the requested model.
	CodeModelNotFound = ragtime.CodeLLMModelNotFound
	// CodeRateLimited: the provider answered HTTP 429.
	CodeRateLimited = ragtime.CodeLLMRateLimited
	// CodeUnavailable: the provider failed (HTTP 5xx) or dropped the
	// connection before or during the answer.
	CodeUnavailable = ragtime.CodeLLMUnavailable
	// CodeTimeout: the provider sent nothing for longer than the configured
	// timeout, or the caller's deadline passed.
	CodeTimeout = ragtime.CodeLLMTimeout
	// CodeConnect: no connection could be made (refused, DNS, TLS, proxy).
	CodeConnect = ragtime.CodeLLMConnect
	// CodeBadStream: the response was not a well-formed stream of the provider's format,
	// or it carried an error object mid-stream.
	CodeBadStream = ragtime.CodeLLMBadStream
	// CodeBadRequest: the provider rejected the request itself (another 4xx,
	// such as a prompt longer than the model's context window).
	CodeBadRequest = ragtime.CodeLLMBadRequest
	// CodeCancelled: the caller's context was cancelled; the error wraps
	// context.Canceled.
	CodeCancelled = ragtime.CodeLLMCancelled
)

// statusError classifies an HTTP error response.
func (c *client) statusError(gen *pipeline.Generation, status int, header map[string][]string, body []byte, model string) *ragtime.Error {
	ue := upstream.ParseError(body)
	detail := ue.Detail(c.scrubber)
	e := &ragtime.Error{
		Stage:     ragtime.StageLLMPrefill,
		Status:    status,
		RequestID: gen.RequestID,
	}
	host := c.redactedBase
	e.Kind = upstream.Classify(status, ue)
	switch e.Kind {
	case ragtime.KindUpstreamAuth:
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
	case ragtime.KindUpstreamNotFound:
		e.Code = CodeModelNotFound
		e.Message = fmt.Sprintf("the model provider at %s does not serve model %q (HTTP %d): %s", host, model, status, detail)
		e.Hint = fmt.Sprintf("check --llm-model (now %q) against the provider's model list: `ragtime doctor` lists it", model)
		if model != c.model {
			e.Hint = fmt.Sprintf("the request asked for model %q (--llm-model is %q): `ragtime doctor --llm-model %s` checks it; --allowed-models limits the models requests may name", model, c.model, model)
		}
		if status == 404 && !ue.MentionsMissingModel() {
			e.Message = fmt.Sprintf("%s%s or model %q was not found (HTTP 404): %s", host, c.d.chatPath(), model, detail)
			e.Hint += "; if the path is wrong, check --llm-base-url (OpenAI-compatible servers usually need the /v1 suffix)"
		}
	case ragtime.KindRateLimited:
		e.Code = CodeRateLimited
		e.Message = fmt.Sprintf("the model provider at %s is rate limiting requests (HTTP 429): %s", host, detail)
		e.Hint = "send fewer concurrent requests or raise the provider's rate limit"
		if ra := retryAfter(header); ra != "" {
			e.Message += "; retry after " + ra
			e.Hint = "retry after " + ra + "; " + e.Hint
		}
	case ragtime.KindTimeout:
		e.Code = CodeTimeout
		e.Message = fmt.Sprintf("the model provider at %s timed out the request (HTTP %d): %s", host, status, detail)
		e.Hint = "retry; if it persists, the provider is overloaded"
	case ragtime.KindUpstream:
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

// retryAfter renders a Retry-After header (seconds or an HTTP date), or
// the header as sent when it is neither.
func retryAfter(header http.Header) string {
	wait, at, ok := upstream.RetryAfter(header)
	switch {
	case ok && at.IsZero():
		return wait.String()
	case ok:
		return at.UTC().Format(time.RFC3339)
	}
	return upstream.Truncate(strings.TrimSpace(header.Get("Retry-After")), 40)
}

// transportError classifies a failure to get a response or to read the
// stream. parent is the caller's context, call the per-call one.
func (c *client) transportError(parent, call context.Context, gen *pipeline.Generation, err error) *ragtime.Error {
	if e := contextError(parent, call, gen); e != nil {
		return e
	}
	stage := gen.FailedStage()
	e := &ragtime.Error{Stage: stage, Kind: ragtime.KindUpstream, Status: gen.UpstreamStatus, RequestID: gen.RequestID, Err: c.scrubber.Wrap(err)}
	var te interface{ Timeout() bool }
	var dnsErr *net.DNSError
	var recErr tls.RecordHeaderError
	var certErr *tls.CertificateVerificationError
	switch {
	case stage == ragtime.StageLLMConnect && errors.As(err, &dnsErr):
		e.Code = CodeConnect
		e.Message = fmt.Sprintf("could not resolve the host of the model provider at %s: %s", c.redactedBase, c.scrubber.Scrub(dnsErr.Error()))
		e.Hint = "check the host name in --llm-base-url and this machine's DNS"
	case stage == ragtime.StageLLMConnect && errors.As(err, &recErr):
		e.Code = CodeConnect
		e.Message = fmt.Sprintf("the model provider at %s answered the TLS handshake with plain HTTP", c.redactedBase)
		e.Hint = "the server speaks http, not https: use http:// in --llm-base-url"
	case stage == ragtime.StageLLMConnect && errors.As(err, &certErr):
		e.Code = CodeConnect
		e.Message = fmt.Sprintf("the TLS certificate of the model provider at %s is not trusted: %s", c.redactedBase, c.scrubber.Scrub(certErr.Error()))
		e.Hint = "check the host name in --llm-base-url; a proxy that intercepts TLS needs its CA in the system trust store (SSL_CERT_FILE)"
	case errors.As(err, &te) && te.Timeout():
		e.Kind, e.Code = ragtime.KindTimeout, CodeTimeout
		e.Message = fmt.Sprintf("the model provider at %s did not answer in time", c.redactedBase)
		e.Hint = "check the provider is reachable and not overloaded"
	case stage == ragtime.StageLLMConnect:
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
func contextError(parent, call context.Context, gen *pipeline.Generation) *ragtime.Error {
	stage := gen.FailedStage()
	if err := parent.Err(); err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return &ragtime.Error{Stage: stage, Kind: ragtime.KindTimeout, Code: CodeTimeout, Message: "the deadline for the answer passed before the model finished", Hint: "the request's deadline is shorter than the answer takes; raise it or lower max_tokens", Status: gen.UpstreamStatus, RequestID: gen.RequestID, Err: err}
		}
		return &ragtime.Error{Stage: stage, Kind: ragtime.KindCancelled, Code: CodeCancelled, Message: "the request was cancelled before the model finished", Status: gen.UpstreamStatus, RequestID: gen.RequestID, Err: err}
	}
	if call == nil {
		return nil
	}
	switch cause := context.Cause(call); {
	case errors.Is(cause, errTTFTTimeout):
		return &ragtime.Error{Stage: stage, Kind: ragtime.KindTimeout, Code: CodeTimeout, Message: "the model sent no first token within --llm-ttft-timeout", Hint: "raise --llm-ttft-timeout for long prompts or slow models, or check the provider is not overloaded (its queue and prefill)", Status: gen.UpstreamStatus, RequestID: gen.RequestID, Err: cause}
	case errors.Is(cause, errOverallTimeout):
		return &ragtime.Error{Stage: stage, Kind: ragtime.KindTimeout, Code: CodeTimeout, Message: "the generation took longer than --llm-timeout", Hint: "raise --llm-timeout, or lower max_tokens", Status: gen.UpstreamStatus, RequestID: gen.RequestID, Err: cause}
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
			set = append(set, k+"="+upstream.Truncate(v, 120))
			proxied = proxied || !strings.EqualFold(k, "NO_PROXY")
		}
	}
	if !proxied {
		return ""
	}
	return strings.Join(set, ", ")
}
