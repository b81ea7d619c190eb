package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"ragtime"
	"ragtime/internal/sse"
	"ragtime/internal/upstream"
	"ragtime/pipeline"
)

// Client calls a running ragtime's POST /ask and replays the SSE stream into
// a pipeline.Stream, so a program (the sweep) can run questions against a
// server exactly as it runs them in-process. It is safe for concurrent use.
type Client struct {
	// BaseURL is the server's address, such as http://127.0.0.1:8080.
	BaseURL string
	// HTTP is the client used; nil means http.DefaultClient.
	HTTP *http.Client
	// APIKey, when set, is sent as "Authorization: Bearer" (a key with
	// scope ask, for a server that requires keys).
	APIKey string
	// OnWait, when set, is called each time the server's admission control
	// refuses an ask with Retry-After (429 rate_limited or too_many_streams,
	// 503 server_busy), before Run waits as told and asks again: code is
	// the refusal's error code ("" when its body had none). A sweep uses it
	// to say why it runs at the server's pace.
	OnWait func(status int, code string, wait time.Duration)
}

// Client error codes, for failures before or outside the server's stream,
// declared in package ragtime with the other codes.
const (
	CodeServerUnreachable = ragtime.CodeServerUnreachable
	CodeServerRejected    = ragtime.CodeServerRejected
	CodeStreamBroken      = ragtime.CodeStreamBroken
)

// Run asks req and returns the query's record as the stream told it: the
// done event's figures with Status ok, or Status error with the error
// event's (or the HTTP error's) code, or Status cancelled when ctx ended
// first. Fields the stream does not carry (question hash, created_at) stay
// empty; the server stores the full record itself. SweepID and
// MaxContextTokens of req are not sent: the API does not take them.
// TTFTBudgetMs is sent unless it is pipeline.Unset: 0 asks with no budget,
// whatever the server's or the key's default.
func (c *Client) Run(ctx context.Context, req *pipeline.Request, out pipeline.Stream) *ragtime.Record {
	rec := c.run(ctx, req, out)
	return &rec
}

func (c *Client) run(ctx context.Context, req *pipeline.Request, out pipeline.Stream) ragtime.Record {
	rec := ragtime.Record{TopK: req.TopK, RerankTopN: req.RerankTopN, MaxTokens: req.MaxTokens, Model: req.Model}
	fail := func(e *ragtime.Error) ragtime.Record {
		if ctx.Err() != nil {
			rec.Status, rec.ErrorCode, rec.ErrorMessage = ragtime.StatusCancelled, ragtime.CodeCancelled, "cancelled"
			return rec
		}
		rec.Status, rec.ErrorCode, rec.ErrorMessage = ragtime.StatusError, e.Code, e.Message
		_ = out.Fail(e)
		return rec
	}
	body := map[string]any{"question": req.Question, "top_k": req.TopK, "rerank_top_n": req.RerankTopN,
		"max_tokens": req.MaxTokens, "model": req.Model, "filters": req.Filter}
	if req.PromptNonce != "" {
		body["prompt_nonce"] = req.PromptNonce
	}
	if req.Retrieval != "" {
		body["retrieval"] = req.Retrieval
	}
	if req.Collapse != "" {
		body["collapse"] = req.Collapse
	}
	if req.VectorK > 0 {
		body["vector_k"] = req.VectorK
	}
	if req.LexicalK > 0 {
		body["lexical_k"] = req.LexicalK
	}
	if req.TTFTBudgetMs != pipeline.Unset {
		body["ttft_budget_ms"] = req.TTFTBudgetMs
	}
	b, err := json.Marshal(body)
	if err != nil {
		return fail(&ragtime.Error{Kind: ragtime.KindInternal, Code: CodeServerRejected, Message: "encoding the request: " + err.Error(), Err: err})
	}
	resp, perr := c.send(ctx, http.MethodPost, "/ask", "text/event-stream", b)
	if perr != nil {
		return fail(perr)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fail(rejection(resp))
	}
	return c.replay(ctx, resp.Body, out, rec, fail)
}

// send sends a request with body (nil for none) to path with the key,
// waiting and asking again as told while the server's admission control
// refuses with Retry-After (it refuses before any work is done, so a retry
// costs nothing and a measurement must not be lost to it). The caller
// closes the response.
func (c *Client) send(ctx context.Context, method, path, accept string, body []byte) (*http.Response, *ragtime.Error) {
	url := strings.TrimRight(c.BaseURL, "/") + path
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	for attempt := 0; ; attempt++ {
		var rd io.Reader
		if body != nil {
			rd = bytes.NewReader(body)
		}
		hreq, err := http.NewRequestWithContext(ctx, method, url, rd)
		if err != nil {
			return nil, &ragtime.Error{Kind: ragtime.KindUpstream, Code: CodeServerUnreachable, Message: fmt.Sprintf("building %s %s: %v", method, url, err), Err: err}
		}
		if body != nil {
			hreq.Header.Set("Content-Type", "application/json")
		}
		hreq.Header.Set("Accept", accept)
		if c.APIKey != "" {
			hreq.Header.Set("Authorization", "Bearer "+c.APIKey)
		}
		resp, err := hc.Do(hreq)
		if err != nil {
			return nil, &ragtime.Error{Kind: ragtime.KindUpstream, Code: CodeServerUnreachable, Message: fmt.Sprintf("%s %s: %v", method, url, err),
				Hint: "is `ragtime serve` running at that address?", Err: err}
		}
		wait, ok := retryAfter(resp)
		if !ok || attempt == maxAdmissionRetries {
			return resp, nil
		}
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		if c.OnWait != nil {
			var eb struct {
				Error apiError `json:"error"`
			}
			_ = json.Unmarshal(raw, &eb)
			c.OnWait(resp.StatusCode, eb.Error.Code, wait)
		}
		select {
		case <-ctx.Done():
			return nil, &ragtime.Error{Kind: ragtime.KindCancelled, Code: CodeServerRejected, Message: "cancelled while waiting for the server's Retry-After"}
		case <-time.After(wait):
		}
	}
}

// PostJSON sends in as JSON to path (such as "/v1/search") and decodes a
// 200 answer into out, retrying refusals with Retry-After as Run does. An
// other status is a *ragtime.Error carrying the status and the server's
// error code and message.
func (c *Client) PostJSON(ctx context.Context, path string, in, out any) error {
	b, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("encoding the request to %s: %w", path, err)
	}
	return c.callJSON(ctx, http.MethodPost, path, b, out)
}

// GetJSON gets path (such as "/v1/documents") and decodes a 200 answer
// into out, as PostJSON does.
func (c *Client) GetJSON(ctx context.Context, path string, out any) error {
	return c.callJSON(ctx, http.MethodGet, path, nil, out)
}

func (c *Client) callJSON(ctx context.Context, method, path string, body []byte, out any) error {
	resp, perr := c.send(ctx, method, path, "application/json", body)
	if perr != nil {
		// The message already quotes the cause; say what to check instead.
		return fmt.Errorf("%s: %s (%s)", perr.Code, perr.Message, perr.Hint)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return rejection(resp)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(out); err != nil {
		return fmt.Errorf("decoding the answer of %s %s: %w", method, resp.Request.URL, err)
	}
	return nil
}

// rejection is the error of a non-200 answer: its status and the server's
// error code, message and hint.
func rejection(resp *http.Response) *ragtime.Error {
	var eb struct {
		Error apiError `json:"error"`
	}
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	msg := strings.TrimSpace(string(raw))
	if json.Unmarshal(raw, &eb) == nil && eb.Error.Message != "" {
		msg = eb.Error.Code + ": " + eb.Error.Message
	}
	return &ragtime.Error{Kind: ragtime.KindUpstreamRejected, Code: CodeServerRejected, Status: resp.StatusCode, Hint: eb.Error.Hint,
		Message: fmt.Sprintf("%s %s answered %d: %s", resp.Request.Method, resp.Request.URL, resp.StatusCode, msg)}
}

// maxAdmissionRetries bounds how often Run asks again after a 429 or 503
// with Retry-After.
const maxAdmissionRetries = 10

// retryAfter says whether resp is a refusal to retry (429 or 503 with a
// Retry-After) and how long to wait, at most a minute.
func retryAfter(resp *http.Response) (time.Duration, bool) {
	if resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode != http.StatusServiceUnavailable {
		return 0, false
	}
	wait, _, ok := upstream.RetryAfter(resp.Header)
	return min(wait, time.Minute), ok
}

// replay reads the event stream (the one api/sse.go writes) and calls out
// for each event.
func (c *Client) replay(ctx context.Context, body io.Reader, out pipeline.Stream, rec ragtime.Record,
	fail func(*ragtime.Error) ragtime.Record) ragtime.Record {
	broken := func(msg string, err error) ragtime.Record {
		return fail(&ragtime.Error{Kind: ragtime.KindUpstream, Code: CodeStreamBroken, Message: msg, Err: err})
	}
	var end *ragtime.Record // the record of the done or error event, or of a malformed event
	finish := func(r ragtime.Record) { end = &r }
	decode := func(what string, d []byte, v any) error {
		if err := json.Unmarshal(d, v); err != nil {
			finish(broken("decoding "+what+": "+err.Error(), err))
			return err
		}
		return nil
	}
	r := sse.Reader{MaxLine: 16 << 20, Handle: func(ev string, d []byte, _ time.Time) (bool, error) {
		switch ev {
		case EventMeta:
			var m pipeline.Meta
			if err := decode("the meta event", d, &m); err != nil {
				return false, err
			}
			rec.QueryID, rec.Model, rec.Provider, rec.MaxContextTokens = m.QueryID, m.Model, m.Provider, m.MaxContextTokens
			_ = out.Meta(m)
		case EventStage:
			var s ragtime.Span
			if err := decode("a stage event", d, &s); err != nil {
				return false, err
			}
			_ = out.Stage(pipeline.StageSpan{Span: s})
		case EventSources:
			var s sourcesEvent
			if err := decode("the sources event", d, &s); err != nil {
				return false, err
			}
			_ = out.Sources(s.Sources)
		case EventToken, EventReasoning:
			var dl pipeline.Delta
			if err := decode("a "+ev+" event", d, &dl); err != nil {
				return false, err
			}
			dl.Reasoning, dl.At = ev == EventReasoning, time.Now()
			_ = out.Delta(dl)
		case EventDone:
			var e ragtime.DoneEvent
			if err := decode("the done event", d, &e); err != nil {
				return false, err
			}
			done := rec
			done.QueryID, done.Model, done.Figures, done.Stages = e.QueryID, e.Model, e.Figures, e.Stages
			done.Status = ragtime.StatusOK
			_ = out.Done(done)
			finish(done)
			return true, nil
		case EventError:
			var e ragtime.Error
			if err := decode("the error event", d, &e); err != nil {
				return false, err
			}
			finish(fail(&e))
			return true, nil
		}
		return false, nil
	}}
	_, err := r.Run(body)
	if end != nil {
		return *end
	}
	if err == nil {
		err = io.ErrUnexpectedEOF
	}
	if ctx.Err() != nil || errors.Is(err, context.Canceled) {
		return fail(&ragtime.Error{Kind: ragtime.KindCancelled, Code: ragtime.CodeCancelled, Message: "cancelled", Err: err})
	}
	return broken("the stream ended before a done or error event: "+err.Error(), err)
}
