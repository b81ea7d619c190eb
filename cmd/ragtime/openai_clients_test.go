package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"ragtime/llm/sim"
)

// openAIClientsDir holds the pinned npm clients and the script that drives
// them (testdata/openai-clients/ask.mjs).
const openAIClientsDir = "testdata/openai-clients"

// ensureNPMClients installs the pinned npm clients (npm ci, once per lock
// file) with the same script `make test` runs; it fails the test, never
// skips it, when Node or the registry is missing.
func ensureNPMClients(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "../../scripts/ensure-npm-clients.sh", openAIClientsDir).CombinedOutput()
	if err != nil {
		t.Fatalf("installing the npm clients (scripts/ensure-npm-clients.sh): %v\n%s", err, out)
	}
}

// clientAnswer is what ask.mjs printed for one mode.
type clientAnswer struct {
	Answer        string          `json:"answer"`
	Role          string          `json:"role"`
	Finish        string          `json:"finish"`
	Object        string          `json:"object"`
	ID            string          `json:"id"`
	IDs           []string        `json:"ids"`
	Chunks        int             `json:"chunks"`
	Raw           int             `json:"raw"`
	HeaderQueryID string          `json:"header_query_id"`
	Models        []string        `json:"models"`
	Retrieved     string          `json:"retrieved"`
	Usage         json.RawMessage `json:"usage"`
	Ragtime       *struct {
		QueryID      string   `json:"query_id"`
		TTFTMs       *float64 `json:"ttft_ms"`
		RetrievalMs  float64  `json:"retrieval_ms"`
		LLMPrefillMs float64  `json:"llm_prefill_ms"`
		Usage        struct {
			PromptTokens     int `json:"prompt_tokens"`
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
		Stages []struct {
			Name string `json:"name"`
		} `json:"stages"`
		Sources []struct {
			Rank  int    `json:"rank"`
			DocID string `json:"doc_id"`
		} `json:"sources"`
	} `json:"ragtime"`
}

// runClient runs ask.mjs in mode against base and decodes what it printed.
func runClient(t *testing.T, mode, base, key, model, question string, v any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "ask.mjs", mode)
	cmd.Dir = openAIClientsDir
	cmd.Env = append(cmd.Environ(), "RAGTIME_URL="+base, "RAGTIME_KEY="+key, "RAGTIME_MODEL="+model, "QUESTION="+question,
		"UPSTREAM_REFUSES=sim-13b")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node ask.mjs %s: %v\nstderr:\n%s", mode, err, stderr.String())
	}
	if err := json.Unmarshal(stdout.Bytes(), v); err != nil {
		t.Fatalf("node ask.mjs %s printed %q: %v", mode, stdout.String(), err)
	}
}

// storedQuery is a query's row as the test compares it.
type storedQuery struct {
	keyID, status, question, model string
	ttft, prefill                  float64
	promptTokens, completionTokens int
	stages                         int
}

func readStored(t *testing.T, pool *pgxpool.Pool, id string) storedQuery {
	t.Helper()
	var q storedQuery
	eventually(t, "query "+id+" in Postgres", func() bool {
		err := pool.QueryRow(context.Background(), `SELECT key_id::text, status, question, model, ttft_ms, llm_prefill_ms,
			prompt_tokens, completion_tokens, (SELECT count(*) FROM query_stages s WHERE s.query_id = q.id)
			FROM queries q WHERE id = $1`, id).
			Scan(&q.keyID, &q.status, &q.question, &q.model, &q.ttft, &q.prefill, &q.promptTokens, &q.completionTokens, &q.stages)
		return err == nil
	})
	return q
}

// TestOpenAIClients points the real OpenAI-compatible clients, installed
// from npm, at a real `ragtime serve` with API keys (upstream: the
// simulator): the official openai SDK streaming and not, the Vercel AI
// SDK's streamText and LangChain.js' ChatOpenAI. Each must get the answer
// and, from ragtime's final chunk (or the completion), the query id and
// its timings, which must be those stored in Postgres for the key that
// asked. The SDK must also see ragtime's refusals as its own typed errors
// with ragtime's codes, and list the key's models.
func TestOpenAIClients(t *testing.T) {
	t.Parallel()
	ensureNPMClients(t)
	dbURL, pool := testDB(t)
	env := map[string]string{"DATABASE_URL": dbURL}
	dataDir := ingestCorpus(t, env)
	_, simURL := startSim(t, func(c *sim.Config) {
		c.PrefillMs, c.PrefillMsPerToken, c.ITLMs, c.OutputTokens = 15, 0, 1, 40
		c.Model = "sim-7b" // sim-13b, which the key may name, the simulator refuses: a failure mid-stream
	})
	key := createKey(t, env, "--name", "app", "--scopes", "ask", "--models", "sim-13b")
	srv := startServe(t, env, "--data-dir", dataDir, "--llm-provider", "openai", "--llm-base-url", simURL,
		"--llm-model", "sim-7b", "--allowed-models", "sim-13b,sim-70b")
	const question = "How does prefill time grow with prompt tokens?"

	for _, mode := range []string{"openai-stream", "openai-complete", "vercel", "langchain"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			var got clientAnswer
			runClient(t, mode, srv.url, key.token, "sim-7b", question, &got)
			if strings.TrimSpace(got.Answer) == "" {
				t.Fatalf("no answer: %+v", got)
			}
			rt := got.Ragtime
			if rt == nil || rt.QueryID == "" || rt.TTFTMs == nil || *rt.TTFTMs <= 0 || len(rt.Sources) == 0 || len(rt.Stages) < 8 {
				t.Fatalf("the ragtime object is missing or incomplete: %+v", rt)
			}
			if got.HeaderQueryID != rt.QueryID {
				t.Errorf("X-Ragtime-Query-Id %q, ragtime.query_id %q", got.HeaderQueryID, rt.QueryID)
			}
			stored := readStored(t, pool, rt.QueryID)
			if stored.keyID != key.id || stored.status != "ok" || stored.question != question || stored.model != "sim-7b" {
				t.Errorf("stored %+v; want key %s, status ok, the last user message as the question, model sim-7b", stored, key.id)
			}
			if stored.ttft != *rt.TTFTMs || stored.prefill != rt.LLMPrefillMs || stored.stages != len(rt.Stages) ||
				stored.promptTokens != rt.Usage.PromptTokens || stored.completionTokens != rt.Usage.CompletionTokens {
				t.Errorf("the client saw ttft %v prefill %v, %d stages, usage %+v; Postgres holds %+v",
					*rt.TTFTMs, rt.LLMPrefillMs, len(rt.Stages), rt.Usage, stored)
			}
			switch mode {
			case "openai-stream":
				if got.Role != "assistant" || got.Finish == "" || len(got.IDs) != 1 || got.IDs[0] != "chatcmpl-"+rt.QueryID {
					t.Errorf("chunks: role %q finish %q ids %v", got.Role, got.Finish, got.IDs)
				}
				if !bytes.Contains(got.Usage, []byte(`"prompt_tokens":`)) {
					t.Errorf("no usage chunk with stream_options.include_usage: %s", got.Usage)
				}
				if strings.Join(got.Models, ",") != "sim-7b,sim-13b" || got.Retrieved != "sim-13b" {
					t.Errorf("models.list() = %v, models.retrieve(sim-13b) = %q; want the default and the key's sim-13b", got.Models, got.Retrieved)
				}
				if len(rt.Sources) != 2 {
					t.Errorf("ragtime.rerank_top_n 2 gave %d sources", len(rt.Sources))
				}
			case "openai-complete":
				if got.Object != "chat.completion" || got.Role != "assistant" || got.ID != "chatcmpl-"+rt.QueryID {
					t.Errorf("completion: object %q role %q id %q", got.Object, got.Role, got.ID)
				}
				// The history (a system message and a first turn) reached
				// the model: the same question alone counts fewer prompt
				// tokens at the simulator.
				alone := chatCompletion(t, srv.url, key.token, `{"model":"sim-7b","max_tokens":24,"messages":[{"role":"user","content":"`+question+`"}]}`)
				if stored.promptTokens <= alone.Ragtime.Usage.PromptTokens {
					t.Errorf("with history %d prompt tokens, without %d", stored.promptTokens, alone.Ragtime.Usage.PromptTokens)
				}
			case "vercel":
				if got.Raw == 0 || got.Finish == "" {
					t.Errorf("streamText: %d raw chunks, finish %q", got.Raw, got.Finish)
				}
			}
		})
	}

	t.Run("openai-errors", func(t *testing.T) {
		t.Parallel()
		type seen struct {
			OK                                bool
			Class, Code, Param, Type, Message string
			Status                            int
		}
		var got map[string]seen
		runClient(t, "openai-errors", srv.url, key.token, "sim-7b", question, &got)
		want := map[string]seen{
			"top_k":     {Class: "BadRequestError", Status: 400, Code: "top_k_out_of_range", Param: "ragtime.top_k", Type: "invalid_request_error"},
			"unknown":   {Class: "BadRequestError", Status: 400, Code: "unsupported_parameter", Param: "tools", Type: "invalid_request_error"},
			"model":     {Class: "PermissionDeniedError", Status: 403, Code: "model_denied", Param: "model", Type: "permission_error"},
			"last_role": {Class: "BadRequestError", Status: 400, Code: "messages_invalid", Param: "messages[1].role", Type: "invalid_request_error"},
			"auth":      {Class: "AuthenticationError", Status: 401, Code: "auth_invalid", Type: "authentication_error"},
			"upstream":  {Class: "APIError", Code: "llm_model_not_found", Type: "server_error"},
		}
		for name, w := range want {
			g := got[name]
			g.Message = ""
			if g != w {
				t.Errorf("%s: the SDK saw %+v; want %+v", name, got[name], w)
			}
		}
		var failed string
		eventually(t, "the failed query stored", func() bool {
			return pool.QueryRow(context.Background(), `SELECT error_code FROM queries WHERE status = 'error' AND key_id = $1`, key.id).Scan(&failed) == nil
		})
		if failed != "llm_model_not_found" {
			t.Errorf("the failed query is stored with %q", failed)
		}
	})
}

// TestOpenServerWithTheSDKsDefaults: against a server without keys (the
// first steps), the README's openai snippet runs as written, with
// RAGTIME_KEY unset, and prints the answer and then the TTFT on a line of
// its own; and the Vercel AI SDK's default model, openai(model), which
// posts to /v1/responses, raises an error carrying ragtime's message that
// names the chat completions route and openai.chat(model).
func TestOpenServerWithTheSDKsDefaults(t *testing.T) {
	t.Parallel()
	ensureNPMClients(t)
	env, dataDir, _ := corpusDB(t)
	srv := startServe(t, env, "--data-dir", dataDir)

	t.Run("readme", func(t *testing.T) {
		readme, err := os.ReadFile("../../README.md")
		if err != nil {
			t.Fatal(err)
		}
		_, after, _ := strings.Cut(string(readme), "```js\n")
		snippet, _, _ := strings.Cut(after, "```")
		if !strings.Contains(snippet, "new OpenAI(") {
			t.Fatalf("the README's first js block is not the openai snippet:\n%s", snippet)
		}
		snippet = strings.ReplaceAll(snippet, "http://localhost:8080", srv.url)
		file := filepath.Join(openAIClientsDir, fmt.Sprintf("readme-%d.mjs", os.Getpid()))
		if err := os.WriteFile(file, []byte(`import OpenAI from "openai";`+"\n"+snippet), 0o600); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove(file) })
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "node", filepath.Base(file))
		cmd.Dir = openAIClientsDir
		for _, kv := range cmd.Environ() {
			if !strings.HasPrefix(kv, "RAGTIME_KEY=") && !strings.HasPrefix(kv, "OPENAI_API_KEY=") {
				cmd.Env = append(cmd.Env, kv)
			}
		}
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("the README snippet: %v\nstderr:\n%s", err, stderr.String())
		}
		lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
		if len(lines) < 2 || !regexp.MustCompile(`^ttft_ms: [0-9.]+$`).MatchString(lines[len(lines)-1]) ||
			strings.TrimSpace(strings.Join(lines[:len(lines)-1], "\n")) == "" {
			t.Errorf("the README snippet printed %q; want the answer, then ttft_ms on a line of its own", stdout.String())
		}
	})

	t.Run("vercel-default", func(t *testing.T) {
		var got struct {
			OK      bool   `json:"ok"`
			Status  int    `json:"status"`
			URL     string `json:"url"`
			Message string `json:"message"`
		}
		runClient(t, "vercel-default", srv.url, "any-value", "extractive", "What is TTFT?", &got)
		t.Logf("the Vercel AI SDK's openai(model) raised: %d %s: %s", got.Status, got.URL, got.Message)
		if got.OK || got.Status != 404 || !strings.HasSuffix(got.URL, "/v1/responses") ||
			!strings.Contains(got.Message, "POST /v1/chat/completions") || !strings.Contains(got.Message, "openai.chat(model)") {
			t.Errorf("the SDK raised %+v; want a 404 whose message names /v1/chat/completions and openai.chat(model)", got)
		}
	})
}

// chatCompletion sends one non-streamed chat completion with key and
// decodes it.
func chatCompletion(t *testing.T, base, key, body string) clientAnswer {
	t.Helper()
	status, h, b := call(t, "POST", base+"/v1/chat/completions", key, strings.NewReader(body),
		map[string]string{"Content-Type": "application/json"})
	var got clientAnswer
	if status != 200 || json.Unmarshal(b, &got) != nil || got.Ragtime == nil || h.Get("X-Ragtime-Query-Id") != got.Ragtime.QueryID {
		t.Fatalf("chat completion: %d %s", status, b)
	}
	return got
}
