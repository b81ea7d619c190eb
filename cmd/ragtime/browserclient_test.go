package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/chromedp/chromedp"

	"ragtime/llm/sim"
)

// clientPage is a page on another site that imports ragtime's /client.js
// as a module (no build step, no npm) and exposes what it got to the test.
// A classic script before it counts the EventSource connections the client
// opens and the fetches it sends, so the test sees which way it asked.
const clientPage = `<!doctype html>
<meta charset="utf-8"><title>client.js test page</title>
<script>
window.opened = { eventsource: 0, fetch: 0 };
const NativeES = window.EventSource;
window.EventSource = class extends NativeES { constructor(...a) { super(...a); window.opened.eventsource++; } };
const nativeFetch = window.fetch;
window.fetch = (...a) => { window.opened.fetch++; return nativeFetch(...a); };
// cutNow asks the page's own server to cut the ask's connection (uncounted).
window.cutNow = () => nativeFetch("/cut", { method: "POST" });
</script>
<script type="module">
import { ask, RagtimeError } from "%[1]s/client.js";
const key = "%[2]s";
// run asks with opts and returns everything the callbacks saw, and the done
// record or the error; abortAfter aborts through the signal after that
// many tokens, cutAfter has the connection cut once that many arrived.
window.run = async (question, opts = {}) => {
  const got = { tokens: [], stages: [], sources: null, meta: null, reconnects: 0 };
  const ctl = new AbortController();
  const before = { ...window.opened };
  try {
    got.done = await ask(question, { key, signal: ctl.signal, ...opts,
      onMeta: m => { got.meta = m; },
      onStage: s => { got.stages.push(s.name); },
      onSources: s => { got.sources = s; },
      onReconnect: () => { got.reconnects++; },
      onToken: t => {
        got.tokens.push(t);
        if (got.tokens.length === opts.abortAfter) ctl.abort();
        if (got.tokens.length === opts.cutAfter) window.cutNow();
      },
    });
  } catch (e) {
    got.error = { name: e.name, code: typeof e.code === "string" ? e.code : "", status: e.status || 0, field: e.field || "",
      message: e.message, ragtime: e instanceof RagtimeError, queryId: e.queryId || "" };
  }
  got.eventsource = window.opened.eventsource - before.eventsource;
  got.fetch = window.opened.fetch - before.fetch;
  return got;
};
window.ready = true;
</script>`

// clientRun is what window.run returned.
type clientRun struct {
	Tokens  []string `json:"tokens"`
	Stages  []string `json:"stages"`
	Sources []struct {
		Rank  int    `json:"rank"`
		DocID string `json:"doc_id"`
	} `json:"sources"`
	Meta *struct {
		QueryID string `json:"query_id"`
		TopK    int    `json:"top_k"`
	} `json:"meta"`
	Done *struct {
		QueryID string   `json:"query_id"`
		TTFTMs  *float64 `json:"ttft_ms"`
		Stages  []struct {
			Name string `json:"name"`
		} `json:"stages"`
	} `json:"done"`
	Error *struct {
		Name, Code, Field, Message, QueryID string
		Status                              int
		Ragtime                             bool
	} `json:"error"`
	Reconnects  int `json:"reconnects"`
	EventSource int `json:"eventsource"`
	Fetch       int `json:"fetch"`
}

// String shows the run with its error and meta spelled out (not as
// pointers).
func (r clientRun) String() string {
	var e, m any = r.Error, r.Meta
	if r.Error != nil {
		e = *r.Error
	}
	if r.Meta != nil {
		m = *r.Meta
	}
	return fmt.Sprintf("tokens %q, stages %v, %d sources, meta %+v, done %v, error %+v, %d reconnects, %d EventSource, %d fetch",
		r.Tokens, r.Stages, len(r.Sources), m, r.Done != nil, e, r.Reconnects, r.EventSource, r.Fetch)
}

// TestClientJSInHeadlessChromium loads a page from another origin that
// imports /client.js from a real `ragtime serve` (with a publishable key
// for that origin; upstream: the simulator) and asks through it: over
// EventSource (GET) and over fetch (POST, for filters), getting meta,
// stages, sources, tokens and the done record, which must be the query
// stored in Postgres; aborted through its signal mid-answer (the query is
// stored cancelled); and refused (the error carries ragtime's code).
func TestClientJSInHeadlessChromium(t *testing.T) {
	t.Parallel()
	dbURL, pool := testDB(t)
	env := map[string]string{"DATABASE_URL": dbURL}
	dataDir := ingestCorpus(t, env)
	_, simURL := startSim(t, func(c *sim.Config) {
		// 200 tokens, 4 s: twice as long as a query waits for its client
		// to resume (twice --sse-retry), so an abort cancels it and a cut
		// connection resumes while it still runs, with a second to spare
		// for a loaded machine. Other asks take 20.
		c.PrefillMs, c.PrefillMsPerToken, c.ITLMs, c.OutputTokens = 20, 0, 20, 200
		c.Model = "sim-7b" // another model is refused: an error event mid-stream
	})
	// The page's own server, on another origin; POST /cut cuts the ask
	// under way (the page asks for it once it has a token).
	var page string
	var proxy *cutProxy
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/cut" {
			proxy.cut()
			w.WriteHeader(http.StatusNoContent)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, page)
	}))
	t.Cleanup(site.Close)
	key := createKey(t, env, "--name", "site", "--kind", "publishable", "--origins", site.URL)
	// A short --sse-retry: an aborted ask's query is cancelled after twice
	// it (the wait for a resume). A cut client reconnects after it, so the
	// other half is what a loaded machine has to reconnect in.
	srv := startServe(t, env, "--data-dir", dataDir, "--llm-provider", "openai", "--llm-base-url", simURL,
		"--llm-model", "sim-7b", "--sse-retry", "1s")
	// The page reaches ragtime through a proxy that can cut an /ask
	// connection mid-answer.
	proxy = startCutProxy(t, strings.TrimPrefix(srv.url, "http://"))
	page = fmt.Sprintf(clientPage, proxy.url, key.token)

	// The module is served as JavaScript, to any origin.
	resp, err := http.Get(srv.url + "/client.js")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || ct != "text/javascript; charset=utf-8" ||
		resp.Header.Get("Access-Control-Allow-Origin") != "*" || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
		t.Fatalf("/client.js: %d %v", resp.StatusCode, resp.Header)
	}

	ctx := newBrowser(t)
	if err := chromedp.Do(ctx, chromedp.Navigate(site.URL+"/")); err != nil {
		t.Fatalf("loading the page that imports /client.js: %v", err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool]("window.ready === true")); err != nil {
		t.Fatalf("the page did not import /client.js: %v", err)
	}
	run := func(question, opts string) clientRun {
		t.Helper()
		got, err := chromedp.Run(ctx, chromedp.Evaluate[clientRun](fmt.Sprintf("run(%q, %s)", question, opts), chromedp.EvalAwaitPromise))
		if err != nil {
			t.Fatalf("run(%q, %s): %v", question, opts, err)
		}
		return got
	}
	wantStages := []string{"accept", "queue", "embed", "search", "rerank", "assemble", "llm_connect", "llm_prefill", "llm_decode"}
	checkAnswered := func(how string, got clientRun) {
		t.Helper()
		if got.Error != nil || got.Done == nil || got.Meta == nil {
			t.Fatalf("%s: %s", how, got)
		}
		if len(got.Tokens) == 0 || len(got.Sources) == 0 || !slices.Equal(got.Stages, wantStages) ||
			got.Done.QueryID != got.Meta.QueryID || got.Done.TTFTMs == nil || len(got.Done.Stages) != len(wantStages) {
			t.Errorf("%s: tokens %d, sources %d, stages %v, done %+v", how, len(got.Tokens), len(got.Sources), got.Stages, got.Done)
		}
		var ttft float64
		var keyID string
		eventually(t, "the query in Postgres", func() bool {
			return pool.QueryRow(context.Background(), `SELECT ttft_ms, key_id::text FROM queries WHERE id = $1 AND status = 'ok'`,
				got.Done.QueryID).Scan(&ttft, &keyID) == nil
		})
		if ttft != *got.Done.TTFTMs || keyID != key.id {
			t.Errorf("%s: stored ttft %v key %s; the client saw %v, key %s", how, ttft, keyID, *got.Done.TTFTMs, key.id)
		}
	}

	// GET over EventSource, the publishable key as ?key=.
	got := run("How does prefill time grow with prompt tokens?", `{topK: 3, maxTokens: 20}`)
	checkAnswered("GET", got)
	if got.EventSource != 1 || got.Fetch != 0 || got.Meta.TopK != 3 {
		t.Errorf("GET: %d EventSource, %d fetch, top_k %d; want one EventSource", got.EventSource, got.Fetch, got.Meta.TopK)
	}

	// POST over fetch, with a document filter.
	got = run("How does prefill time grow with prompt tokens?", `{method: "POST", maxTokens: 20, filters: {doc_id: ["prefill.md"]}}`)
	checkAnswered("POST", got)
	if got.Fetch != 1 || got.EventSource != 0 {
		t.Errorf("POST: %d fetch, %d EventSource; want one fetch", got.Fetch, got.EventSource)
	}
	for _, s := range got.Sources {
		if s.DocID != "prefill.md" {
			t.Errorf("POST with filters.doc_id [prefill.md] got a source of %s", s.DocID)
		}
	}

	// Aborted through the signal after two tokens, both ways: the promise
	// rejects with an AbortError, and the server stores the query
	// cancelled once its client did not come back.
	for _, method := range []string{"GET", "POST"} {
		got = run("What is decode?", `{method: "`+method+`", abortAfter: 2}`)
		if got.Error == nil || got.Error.Name != "AbortError" || got.Done != nil || len(got.Tokens) != 2 || got.Meta == nil {
			t.Fatalf("abort over %s: %s", method, got)
		}
		var status string
		eventually(t, "the aborted query stored", func() bool {
			return pool.QueryRow(context.Background(), `SELECT status FROM queries WHERE id = $1`, got.Meta.QueryID).Scan(&status) == nil
		})
		if status != "cancelled" {
			t.Errorf("abort over %s: stored status %q, want cancelled", method, status)
		}
	}

	// The connection cut once the page has its first token, both ways:
	// the client resumes from the last event id after the retry delay
	// (EventSource by itself, fetch by the client's own loop), and gets the
	// whole answer from the one query the server ran: the model was not
	// asked again. (A cut before the page has read any event leaves it
	// nothing to resume from: the proxy waits for the page to say so.)
	for _, method := range []string{"GET", "POST"} {
		question := "How is decode timed, asked over " + method + "?"
		got = run(question, `{method: "`+method+`", cutAfter: 1}`)
		checkAnswered("resumed "+method, got)
		if proxy.cuts.Load() == 0 || got.Reconnects != 1 {
			t.Errorf("resumed %s: %d cuts, %d reconnects; want the connection cut and one reconnect", method, proxy.cuts.Load(), got.Reconnects)
		}
		proxy.cuts.Store(0)
		var rows, completion int
		if err := pool.QueryRow(context.Background(), `SELECT count(*), max(completion_tokens) FROM queries WHERE question = $1`,
			question).Scan(&rows, &completion); err != nil || rows != 1 || completion != len(got.Tokens) {
			t.Errorf("resumed %s: %d stored queries (want 1) with %d completion tokens; the client got %d tokens (%v)",
				method, rows, completion, len(got.Tokens), err)
		}
	}

	// Refused before the stream: EventSource cannot read why, so the
	// client reads the refusal over fetch and rejects with ragtime's code.
	got = run("What is decode?", `{topK: 0}`)
	if e := got.Error; e == nil || !e.Ragtime || e.Code != "top_k_out_of_range" || e.Status != 400 || e.Field != "top_k" ||
		!strings.Contains(e.Message, "top_k") || got.Meta != nil {
		t.Errorf("top_k 0: %+v", got.Error)
	}
	// Refused by the model server after the stream started: ragtime's
	// error event ends it, both ways, with the query id.
	for _, method := range []string{"GET", "POST"} {
		got = run("What is decode?", `{method: "`+method+`", model: "sim-13b"}`)
		if e := got.Error; e == nil || !e.Ragtime || e.Code != "llm_model_not_found" || got.Meta == nil ||
			e.QueryID != got.Meta.QueryID || got.Reconnects != 0 {
			t.Errorf("an error event over %s: %+v (meta %+v)", method, got.Error, got.Meta)
		}
	}
	// A secret key is never put in a URL.
	got = run("What is decode?", `{method: "GET", key: "rt_sk_aaaaaaaaaaaa_`+strings.Repeat("A", 43)+`"}`)
	if e := got.Error; e == nil || e.Code != "key_in_url" || got.EventSource+got.Fetch != 0 {
		t.Errorf("a secret key over GET: %+v, %d requests", got.Error, got.EventSource+got.Fetch)
	}
}

// cutProxy forwards TCP connections to a server; cut closes those that
// carry an /ask request.
type cutProxy struct {
	url  string
	cuts atomic.Int32
	mu   sync.Mutex
	asks map[net.Conn]net.Conn // client side → server side, of /ask connections
}

// cut closes every open /ask connection, both sides.
func (p *cutProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for client, server := range p.asks {
		client.Close()
		server.Close()
		delete(p.asks, client)
		p.cuts.Add(1)
	}
}

func startCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	p := &cutProxy{url: "http://" + ln.Addr().String(), asks: map[net.Conn]net.Conn{}}
	go func() {
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			go p.serve(client, target)
		}
	}()
	return p
}

func (p *cutProxy) serve(client net.Conn, target string) {
	defer client.Close()
	server, err := net.Dial("tcp", target)
	if err != nil {
		return
	}
	defer server.Close()
	defer func() {
		p.mu.Lock()
		delete(p.asks, client)
		p.mu.Unlock()
	}()
	go func() {
		buf := make([]byte, 32<<10)
		for {
			n, err := client.Read(buf)
			if n > 0 {
				if bytes.Contains(buf[:n], []byte(" /ask")) {
					p.mu.Lock()
					p.asks[client] = server
					p.mu.Unlock()
				}
				if _, werr := server.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				server.Close()
				return
			}
		}
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := server.Read(buf)
		if n > 0 {
			if _, werr := client.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
