package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func doJSON(t *testing.T, method, url, contentType string, body []byte) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &out); err != nil {
			t.Fatalf("%s %s: %d %s: not JSON", method, url, resp.StatusCode, raw)
		}
	}
	return resp.StatusCode, out
}

func multipartBody(t *testing.T, files map[string]string) ([]byte, string) {
	t.Helper()
	var buf bytes.Buffer
	w := multipart.NewWriter(&buf)
	for name, content := range files {
		fw, err := w.CreateFormFile("file", name)
		if err != nil {
			t.Fatal(err)
		}
		fw.Write([]byte(content))
	}
	w.WriteField("metadata", `{"team":"infra"}`)
	w.Close()
	return buf.Bytes(), w.FormDataContentType()
}

func errCode(m map[string]any) string {
	e, _ := m["error"].(map[string]any)
	s, _ := e["code"].(string)
	return s
}

// TestDocumentsAPI adds, replaces, lists and deletes documents through a
// running serve, asks with filters, and checks that `ragtime ingest` is
// refused with a clear message while serve holds the index.
func TestDocumentsAPI(t *testing.T) {
	t.Parallel()
	dbURL, _ := testDB(t)
	env := map[string]string{"DATABASE_URL": dbURL}
	dataDir := t.TempDir()
	srv := startServe(t, env, "--data-dir", dataDir, "--max-document-bytes", "2000")
	base := srv.url + "/v1/documents"

	doc := `{"id":"kv.md","title":"KV cache","text":"# KV cache\n\nThe KV cache keeps attention keys and values so decode does not recompute them.","metadata":{"team":"serving"}}`
	status, out := doJSON(t, "POST", base, "application/json", []byte(doc))
	if status != 200 {
		t.Fatalf("POST json: %d %v", status, out)
	}
	first := out["documents"].([]any)[0].(map[string]any)
	if first["doc_id"] != "kv.md" || first["chunks"].(float64) < 1 || first["title"] != "KV cache" {
		t.Errorf("POST json answered %v", out)
	}
	status, out = doJSON(t, "POST", base, "application/json", []byte(doc))
	if status != 200 || !out["documents"].([]any)[0].(map[string]any)["unchanged"].(bool) {
		t.Errorf("re-POST of the same document: %d %v, want unchanged", status, out)
	}

	body, ct := multipartBody(t, map[string]string{
		"prefill.md": "# Prefill\n\nPrefill reads the whole prompt in one pass before the first token.",
		"notes.txt":  "Batching many requests raises throughput but can delay the first token.",
	})
	if status, out = doJSON(t, "POST", base, ct, body); status != 200 || len(out["documents"].([]any)) != 2 {
		t.Fatalf("POST multipart: %d %v", status, out)
	}

	for _, c := range []struct {
		name, ct string
		body     []byte
		status   int
		code     string
	}{
		{"unsupported file", "", nil, 415, "unsupported_file_type"},
		{"oversized file", "", nil, 400, "document_too_large"},
		{"too many files at once", "", nil, 413, "body_too_large"},
		{"oversized text", "application/json", []byte(`{"id":"big.txt","text":"` + strings.Repeat("x", 2100) + `"}`), 400, "document_too_large"},
		{"no id", "application/json", []byte(`{"text":"x"}`), 400, "id_required"},
		{"trailing data", "application/json", []byte(`{"id":"t.md","text":"x"}]`), 400, "body_invalid"},
		{"no text", "application/json", []byte(`{"id":"a.md"}`), 400, "text_required"},
		{"unknown field", "application/json", []byte(`{"id":"a.md","text":"x","body":"y"}`), 400, "unknown_field"},
		{"bad kind", "application/json", []byte(`{"id":"a","text":"x","kind":"pdf"}`), 415, "unsupported_kind"},
		{"plain body", "text/plain", []byte("hello"), 415, "unsupported_media_type"},
	} {
		b, ctype := c.body, c.ct
		switch c.name {
		case "unsupported file":
			b, ctype = multipartBody(t, map[string]string{"slides.pdf": "%PDF"})
		case "oversized file":
			b, ctype = multipartBody(t, map[string]string{"huge.md": strings.Repeat("y", 2100)})
		case "too many files at once": // each under the limit, together over 8 × it
			files := map[string]string{}
			for i := range 10 {
				files[fmt.Sprintf("part%d.md", i)] = strings.Repeat("z", 1900)
			}
			b, ctype = multipartBody(t, files)
		}
		status, out := doJSON(t, "POST", base, ctype, b)
		if status != c.status || errCode(out) != c.code {
			t.Errorf("%s: %d %v, want %d %s", c.name, status, out, c.status, c.code)
		}
	}

	status, out = doJSON(t, "GET", base, "", nil)
	if status != 200 || out["count"].(float64) != 3 {
		t.Fatalf("GET: %d %v", status, out)
	}
	for _, d := range out["documents"].([]any) {
		if d.(map[string]any)["chunks"].(float64) < 1 {
			t.Errorf("document without a chunk count: %v", d)
		}
	}

	// Filters reach the store: metadata from the multipart field, doc ids.
	events := ask(t, srv.url, "q=first+token&top_k=5")
	if eventNames(events) == "" {
		t.Fatal("no events")
	}
	resp := postAsk(t, srv.url, `{"question":"what does the KV cache keep?","filters":{"metadata":{"team":"infra"}}}`)
	for _, s := range sourcesOf(t, resp) {
		if s == "kv.md" {
			t.Errorf("metadata filter team=infra returned kv.md")
		}
	}
	resp = postAsk(t, srv.url, `{"question":"what does the KV cache keep?","filters":{"doc_id":["kv.md"]}}`)
	if src := sourcesOf(t, resp); len(src) == 0 || src[0] != "kv.md" {
		t.Errorf("doc_id filter: sources %v", src)
	}

	if status, out = doJSON(t, "DELETE", base+"/kv.md", "", nil); status != 204 {
		t.Errorf("DELETE: %d %v", status, out)
	}
	if status, out = doJSON(t, "DELETE", base+"/kv.md", "", nil); status != 404 || errCode(out) != "not_found" {
		t.Errorf("second DELETE: %d %v", status, out)
	}
	if _, out = doJSON(t, "GET", base, "", nil); out["count"].(float64) != 2 {
		t.Errorf("after DELETE: %v", out)
	}

	// A second serve on the same data dir serves it read-only.
	second := startServe(t, env, "--data-dir", dataDir)
	if status, out = doJSON(t, "POST", second.url+"/v1/documents", "application/json", []byte(doc)); status != 503 || errCode(out) != "read_only" {
		t.Errorf("POST to the second serve: %d %v", status, out)
	}
	if !strings.Contains(second.stderr.String(), "read-only") {
		t.Errorf("the second serve did not say it serves read-only: %s", second.stderr.String())
	}

	// serve holds the writer lock: ingest is refused and says what to do.
	var stdout, stderr syncBuffer
	err := run(context.Background(), []string{"ingest", "--data-dir", dataDir, "testdata/corpus"}, envMap(env), &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "POST /v1/documents") || !strings.Contains(err.Error(), "--read-only") {
		t.Errorf("ingest while serve runs: %v", err)
	}
}

// postAsk sends POST /ask and returns the events.
func postAsk(t *testing.T, base, body string) []sseEvent {
	t.Helper()
	resp, err := http.Post(base+"/ask", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("POST /ask: %d %s", resp.StatusCode, b)
	}
	return readEvents(t, resp.Body, nil)
}

func sourcesOf(t *testing.T, events []sseEvent) []string {
	t.Helper()
	var ids []string
	for _, e := range events {
		if e.Name == "sources" {
			var s struct {
				Sources []struct {
					DocID string `json:"doc_id"`
				} `json:"sources"`
			}
			e.decode(t, &s)
			for _, x := range s.Sources {
				ids = append(ids, x.DocID)
			}
		}
	}
	return ids
}

// TestServeReadOnlyLetsIngestWrite checks the other mode: serve
// --read-only leaves the lock to ingest and refuses API writes with 503.
func TestServeReadOnlyLetsIngestWrite(t *testing.T) {
	t.Parallel()
	dbURL, _ := testDB(t)
	env := map[string]string{"DATABASE_URL": dbURL}
	dataDir := ingestCorpus(t, env)
	srv := startServe(t, env, "--data-dir", dataDir, "--read-only")
	status, out := doJSON(t, "POST", srv.url+"/v1/documents", "application/json", []byte(`{"id":"a.md","text":"x"}`))
	if status != 503 || errCode(out) != "read_only" {
		t.Errorf("POST to a read-only serve: %d %v", status, out)
	}
	if _, out = doJSON(t, "GET", srv.url+"/v1/documents", "", nil); out["count"].(float64) != 4 {
		t.Errorf("GET: %v", out)
	}
	out2 := runCmd(t, env, "ingest", "--data-dir", dataDir, "--concurrency", "3", "testdata/corpus")
	if !strings.Contains(out2, "documents/s") || !strings.Contains(out2, "chunks/s") {
		t.Errorf("ingest output %q lacks the rates", out2)
	}
}

// TestIngestSkipsBadFiles: `ragtime ingest DIR` over a good file, an HTML
// nested 300,000 deep and a binary file named .md stores the good one, lists
// the other two with their reasons after the summary, and exits 1.
func TestIngestSkipsBadFiles(t *testing.T) {
	t.Parallel()
	src := t.TempDir()
	blob := bytes.Repeat([]byte{0, 1, 2, 'a', 0xfe, 0xff, '\n'}, 10_000)
	for name, content := range map[string][]byte{
		"good.md":   []byte("# Good\n\nPrefill and decode are the two phases."),
		"deep.html": []byte(strings.Repeat("<div>", 300_000) + strings.Repeat("</div>", 300_000)),
		"blob.md":   blob,
	} {
		if err := os.WriteFile(filepath.Join(src, name), content, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	dataDir := filepath.Join(t.TempDir(), "index")
	cmd := exec.Command(ragtimeBinary(t), "ingest", "--data-dir", dataDir, src)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("ingest: %v, want exit status 1\nstdout: %s\nstderr: %s", err, stdout.String(), stderr.String())
	}
	if !strings.HasPrefix(stdout.String(), "ingested 1 documents") {
		t.Errorf("stdout %q, want the good file ingested", stdout.String())
	}
	errOut := stderr.String()
	for _, want := range []string{
		"2 files were left out:",
		"deep.html: the HTML nests elements deeper than 512 levels",
		"blob.md is not text: it holds a NUL byte",
		"ragtime: ingest: 2 of 3 files were left out",
	} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
	// What was stored is searchable by the next command.
	listed := runCmd(t, nil, "ingest", "--data-dir", dataDir, filepath.Join(src, "good.md"))
	if !strings.Contains(listed, "1 unchanged") {
		t.Errorf("re-ingesting good.md: %q, want it unchanged (stored by the first run)", listed)
	}
}

// TestIngestChecksPathsFirst: a missing path fails before anything is
// opened (no index directory, no summary), and a quick ingest prints its
// summary without progress lines.
func TestIngestChecksPathsFirst(t *testing.T) {
	t.Parallel()
	dataDir := filepath.Join(t.TempDir(), "index")
	var stdout, stderr syncBuffer
	err := run(context.Background(), []string{"ingest", "--data-dir", dataDir, "testdata/corpus", "testdata/no-such-folder"}, envMap(nil), &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "testdata/no-such-folder does not exist") {
		t.Errorf("ingest of a missing path: %v, want an error naming it", err)
	}
	if stdout.String() != "" {
		t.Errorf("ingest of a missing path printed %q", stdout.String())
	}
	if _, serr := os.Stat(dataDir); !errors.Is(serr, os.ErrNotExist) {
		t.Errorf("ingest of a missing path created %s (stat: %v)", dataDir, serr)
	}

	var out, errOut syncBuffer
	if err := run(context.Background(), []string{"ingest", "--data-dir", dataDir, "testdata/corpus"}, envMap(nil), &out, &errOut); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.String(), "ingested 4 documents") {
		t.Errorf("ingest said %q", out.String())
	}
	if strings.Contains(errOut.String(), "files") {
		t.Errorf("a quick ingest printed progress: %q", errOut.String())
	}
}
