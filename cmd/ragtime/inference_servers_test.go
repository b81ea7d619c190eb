package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"ragtime/llm/sim"
)

// The suites in this file run against real inference servers when their
// address is set, like the Qdrant contract suite, and say they skipped
// otherwise (none can be installed on the project's machines):
//
//	LLAMACPP_URL=http://127.0.0.1:8080 [LLAMACPP_MODEL=any] go test ./cmd/ragtime -run LlamaCpp
//	OLLAMA_URL=http://127.0.0.1:11434 [OLLAMA_MODEL=rnd] go test ./cmd/ragtime -run Ollama
//
// Each ingests the labelled sweep corpus, asks at top_k 1, 4 and 16 through a
// recording proxy, and checks that the stored server timings equal what the
// server sent, that its cached tokens are stored as it reported them (NULL
// when it reports none), and that llm_prefill ≥ the server's prefill.

// sentTimings is what a server said about one answer, read from the bytes
// it sent.
type sentTimings struct {
	prefillMs *float64 // llama.cpp timings.prompt_ms; Ollama prompt_eval_duration
	cached    *int     // llama.cpp timings.cache_n (Ollama sends none)
}

// serverUnderTest is one real inference server.
type serverUnderTest struct {
	provider string // --llm-provider
	base     string // --llm-base-url of the server itself
	model    string
	chatPath string
	parse    func(body []byte) (sentTimings, error)
}

// recordingProxy forwards to target, streaming, and keeps the body of every
// chat answer.
type recordingProxy struct {
	mu     sync.Mutex
	bodies [][]byte
}

func (p *recordingProxy) start(t *testing.T, target, chatPath string) string {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The request body is read whole before forwarding: handing r.Body
		// itself to the transport races the first Flush below. The server
		// closes r.Body when the handler first writes its answer, while the
		// transport's write loop may not yet have made its last read (after
		// Content-Length bytes it reads once more to check for extra bytes);
		// that read then fails with http.ErrBodyReadAfterClose, the
		// transport takes it for a broken request and closes the connection
		// to the server, cutting the answer it is streaming ("use of closed
		// network connection" after the first chunk).
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		out := r.Clone(r.Context())
		out.URL.Scheme, out.URL.Host, out.Host, out.RequestURI = u.Scheme, u.Host, u.Host, ""
		out.Body, out.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
		resp, err := tr.RoundTrip(out)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		var kept bytes.Buffer
		buf := make([]byte, 32<<10)
		for {
			n, rerr := resp.Body.Read(buf)
			if n > 0 {
				kept.Write(buf[:n])
				if _, werr := w.Write(buf[:n]); werr != nil {
					return
				}
				w.(http.Flusher).Flush()
			}
			if rerr != nil {
				break
			}
		}
		if strings.HasSuffix(r.URL.Path, chatPath) {
			p.mu.Lock()
			p.bodies = append(p.bodies, kept.Bytes())
			p.mu.Unlock()
		}
	}))
	t.Cleanup(ts.Close)
	return ts.URL + u.Path
}

func (p *recordingProxy) last(t *testing.T) []byte {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.bodies) == 0 {
		t.Fatal("the proxy saw no chat answer")
	}
	return p.bodies[len(p.bodies)-1]
}

// parseLlamaCpp reads the timings object llama-server puts on its final
// chunk.
func parseLlamaCpp(body []byte) (sentTimings, error) {
	var st sentTimings
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var c struct {
			Timings *struct {
				PromptMS *float64 `json:"prompt_ms"`
				CacheN   *int     `json:"cache_n"`
			} `json:"timings"`
		}
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			return st, fmt.Errorf("chunk %.80q: %w", data, err)
		}
		if c.Timings != nil {
			st.prefillMs, st.cached = c.Timings.PromptMS, c.Timings.CacheN
		}
	}
	if st.prefillMs == nil {
		return st, fmt.Errorf("no timings.prompt_ms in the stream (is this llama-server?)")
	}
	return st, sc.Err()
}

// parseOllama reads prompt_eval_duration (ns) off Ollama's final line.
func parseOllama(body []byte) (sentTimings, error) {
	var st sentTimings
	for line := range bytes.SplitSeq(bytes.TrimSpace(body), []byte("\n")) {
		var c struct {
			Done               bool   `json:"done"`
			PromptEvalDuration *int64 `json:"prompt_eval_duration"`
			PromptEvalCached   *int   `json:"prompt_eval_cached_count"`
		}
		if err := json.Unmarshal(line, &c); err != nil {
			return st, fmt.Errorf("line %.80q: %w", line, err)
		}
		if c.Done && c.PromptEvalDuration != nil {
			v := float64(*c.PromptEvalDuration) / 1e6
			st.prefillMs, st.cached = &v, c.PromptEvalCached
		}
	}
	if st.prefillMs == nil {
		return st, fmt.Errorf("no prompt_eval_duration on the final line (is this Ollama?)")
	}
	return st, nil
}

func TestLlamaCppServerEndToEnd(t *testing.T) {
	root := strings.TrimRight(os.Getenv("LLAMACPP_URL"), "/")
	if root == "" {
		t.Skip("LLAMACPP_URL is not set (the root of a running llama-server, e.g. http://127.0.0.1:8080); skipped the llama.cpp integration suite")
	}
	if !strings.HasSuffix(root, "/v1") {
		root += "/v1"
	}
	model := orDefault(os.Getenv("LLAMACPP_MODEL"), "any")
	runInferenceServerSuite(t, serverUnderTest{provider: "openai", base: root, model: model, chatPath: "/chat/completions", parse: parseLlamaCpp})
}

func TestOllamaServerEndToEnd(t *testing.T) {
	root := strings.TrimRight(os.Getenv("OLLAMA_URL"), "/")
	if root == "" {
		t.Skip("OLLAMA_URL is not set (the root of a running Ollama, e.g. http://127.0.0.1:11434); skipped the Ollama integration suite")
	}
	model := os.Getenv("OLLAMA_MODEL")
	if model == "" {
		model = firstOllamaModel(t, root)
	}
	runInferenceServerSuite(t, serverUnderTest{provider: "ollama", base: root, model: model, chatPath: "/api/chat", parse: parseOllama})
}

// firstOllamaModel is the first model Ollama lists.
func firstOllamaModel(t *testing.T, root string) string {
	t.Helper()
	resp, err := http.Get(root + "/api/tags")
	if err != nil {
		t.Fatalf("OLLAMA_URL %s: %v", root, err)
	}
	defer resp.Body.Close()
	var tags struct {
		Models []struct {
			Name string `json:"name"`
		} `json:"models"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&tags); err != nil || len(tags.Models) == 0 {
		t.Fatalf("OLLAMA_URL %s lists no model (%v): pull one, or set OLLAMA_MODEL", root, err)
	}
	return tags.Models[0].Name
}

// show prints a figure that may be missing.
func show[T any](p *T) string {
	if p == nil {
		return "none"
	}
	return fmt.Sprint(*p)
}

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

func runInferenceServerSuite(t *testing.T, s serverUnderTest) {
	dbURL, pool := testDB(t)
	env := map[string]string{"DATABASE_URL": dbURL}
	dataDir := ingestSweepCorpus(t, env)
	var proxy recordingProxy
	through := proxy.start(t, s.base, s.chatPath)
	srv := startServe(t, env, "--data-dir", dataDir, "--llm-provider", s.provider, "--llm-base-url", through, "--llm-model", s.model,
		"--llm-ttft-timeout", "5m", "--llm-timeout", "10m")
	for _, k := range []int{1, 4, 16} {
		t.Run(fmt.Sprintf("top_k=%d", k), func(t *testing.T) {
			d := lastDone(t, ask(t, srv.url, fmt.Sprintf("q=why+does+prefill+grow+with+the+prompt&top_k=%d&rerank_top_n=%d&max_tokens=8", k, k)))
			sent, err := s.parse(proxy.last(t))
			if err != nil {
				t.Fatal(err)
			}
			row := storedTimings(t, pool, d.QueryID)
			t.Logf("top_k %d: prompt %d tokens, server prefill %.3f ms (stored %s), cached sent %s stored %s, llm_prefill %.3f ms, before the server's prefill %s ms",
				k, row.promptTokens, *sent.prefillMs, show(row.serverPrefill), show(sent.cached), show(row.cached), row.llmPrefill, show(row.unexplained))
			if row.serverPrefill == nil || math.Abs(*row.serverPrefill-*sent.prefillMs) > 0.0005 {
				t.Errorf("stored server_prefill_ms %v, the server sent %.6f", row.serverPrefill, *sent.prefillMs)
			}
			switch {
			case sent.cached != nil && (row.cached == nil || *row.cached != *sent.cached):
				t.Errorf("stored cached_tokens %v, the server sent %d", row.cached, *sent.cached)
			case sent.cached == nil && row.cached != nil && *row.cached != 0:
				t.Errorf("stored cached_tokens %d, the server sent none", *row.cached)
			}
			if row.serverPrefill != nil && (row.unexplained == nil || math.Abs(*row.unexplained-(row.llmPrefill-*row.serverPrefill)) > 0.0015) {
				t.Errorf("stored prefill_unexplained_ms %s, want llm_prefill − server prefill = %.3f", show(row.unexplained), row.llmPrefill-*row.serverPrefill)
			}
			// The client cannot see the first token before the server made
			// it: from llm_connect's start (before the request went out) to
			// the first token is at least the server's prefill. (llm_prefill
			// alone is not: it starts when the client's httptrace hook stamped
			// the request written, which a loaded machine can run after the
			// server already has the request.)
			if toFirst := connectToFirstTokenMs(d.Stages); row.serverPrefill != nil && toFirst+0.0005 < *row.serverPrefill {
				t.Errorf("llm_connect's start to the first token %.3f ms (llm_prefill %.3f) < the server's own prefill %.3f ms: the client cannot see the first token before the server made it",
					toFirst, row.llmPrefill, *row.serverPrefill)
			}
		})
	}
}

// storedRow is what the queries table holds about one ask.
type storedRow struct {
	serverPrefill *float64
	unexplained   *float64
	cached        *int
	llmPrefill    float64
	promptTokens  int
}

func storedTimings(t *testing.T, pool *pgxpool.Pool, id string) storedRow {
	t.Helper()
	var r storedRow
	eventually(t, "the query row", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err := pool.QueryRow(ctx, `SELECT server_prefill_ms, prefill_unexplained_ms, cached_tokens, llm_prefill_ms, prompt_tokens FROM queries WHERE id = $1`, id).
			Scan(&r.serverPrefill, &r.unexplained, &r.cached, &r.llmPrefill, &r.promptTokens)
		return err == nil
	})
	return r
}

// TestInferenceServerSuiteAgainstLLMSim runs the llama.cpp suite against
// llmsim's llama.cpp-style timings, so the suite itself is tested on every
// run even where no real server is.
func TestInferenceServerSuiteAgainstLLMSim(t *testing.T) {
	_, simURL := startSim(t, func(c *sim.Config) {
		c.ServerTimings, c.PrefillMs, c.PrefillMsPerToken, c.ITLMs, c.OutputTokens = true, 2, 0.01, 0.5, 4
	})
	runInferenceServerSuite(t, serverUnderTest{provider: "openai", base: simURL, model: "any", chatPath: "/chat/completions", parse: parseLlamaCpp})
}
