package main

import (
	"bytes"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"ragtime/llm/sim"
)

// manyFiles is a multipart body of n small Markdown files, named doc0.md…,
// plus the extra files given, in that order.
func manyFiles(t *testing.T, n int, extra ...[2]string) ([]byte, string) {
	t.Helper()
	var buf bytes.Buffer
	w := multipart.NewWriter(&buf)
	add := func(name, text string) {
		fw, err := w.CreateFormFile("file", name)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.WriteString(fw, text)
	}
	for i := range n {
		add(fmt.Sprintf("doc%d.md", i), fmt.Sprintf("# Document %d\n\nPrefill and decode, part %d of the batch.", i, i))
	}
	for _, e := range extra {
		add(e[0], e[1])
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), w.FormDataContentType()
}

// storedDocuments is GET /v1/documents' count.
func storedDocuments(t *testing.T, base string) int {
	t.Helper()
	status, out := doJSON(t, "GET", base+"/v1/documents", "", nil)
	if status != http.StatusOK {
		t.Fatalf("GET /v1/documents: %d %v", status, out)
	}
	return int(out["count"].(float64))
}

var postLogRE = regexp.MustCompile(`method=POST path=/v1/documents status=(\d+)`)

// postStatuses are the statuses the server logged for POST /v1/documents.
func postStatuses(log string) []string {
	var out []string
	for _, m := range postLogRE.FindAllStringSubmatch(log, -1) {
		out = append(out, m[1])
	}
	return out
}

// sendPartially opens a connection, sends the request's headers and the
// first cut bytes of body, and closes the connection: a client that gives
// up mid-upload.
func sendPartially(t *testing.T, base, contentType string, body []byte, cut int) {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "POST /v1/documents HTTP/1.1\r\nHost: %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n", u.Host, contentType, len(body))
	if _, err := conn.Write(body[:cut]); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // let the server read what was sent
	conn.Close()
}

// TestMultipartIsAllOrNothing: a client that gives up mid-upload, a client
// that leaves while its documents are being embedded, and a batch whose
// last file cannot be read each leave zero documents stored and no 500 in
// the server's log; a whole batch is stored whole.
func TestMultipartIsAllOrNothing(t *testing.T) {
	t.Parallel()
	dbURL, _ := testDB(t)
	// A slow embedder (40 ms a request, one text each) keeps a batch in
	// its embedding phase long enough for a client to leave during it.
	simSrv, simURL := startSim(t, func(c *sim.Config) { c.EmbedMs = 40; c.EmbedMsPerInput = 0 })
	srv := startServe(t, map[string]string{"DATABASE_URL": dbURL}, "--data-dir", t.TempDir(),
		"--embedder", "openai", "--embed-base-url", simURL, "--embed-model", "sim-embed", "--embed-batch-size", "1")

	// 1. Mid-upload: 300 files sent, the connection closed at 60 % of the body.
	body, ct := manyFiles(t, 300)
	sendPartially(t, srv.url, ct, body, len(body)*6/10)
	eventually(t, "the cut upload's request to end", func() bool { return len(postStatuses(srv.stderr.String())) == 1 })
	if n := storedDocuments(t, srv.url); n != 0 {
		t.Errorf("after a client gave up mid-upload, %d documents are stored, want 0", n)
	}

	// 2. After the upload, during embedding: the whole body sent, the
	// connection closed once embedding has begun (the 300 files need 12 s
	// of it).
	embeds := simSrv.Stats().Embeds
	u, _ := url.Parse(srv.url)
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "POST /v1/documents HTTP/1.1\r\nHost: %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n", u.Host, ct, len(body))
	if _, err := conn.Write(body); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the batch's embedding to begin", func() bool { return simSrv.Stats().Embeds > embeds+2 })
	conn.Close()
	eventually(t, "the abandoned batch's request to end", func() bool { return len(postStatuses(srv.stderr.String())) == 2 })
	if n := storedDocuments(t, srv.url); n != 0 {
		t.Errorf("after a client left during embedding, %d documents are stored, want 0", n)
	}

	// 3. A batch whose last file is unreadable is refused whole.
	deep := strings.Repeat("<div>", 600) + "x" + strings.Repeat("</div>", 600)
	body3, ct3 := manyFiles(t, 5, [2]string{"deep.html", deep})
	status, out := doJSON(t, "POST", srv.url+"/v1/documents", ct3, body3)
	if status != http.StatusBadRequest || errCode(out) != "document_unreadable" {
		t.Errorf("batch with an unreadable file: %d %v, want 400 document_unreadable", status, out)
	}
	// … and one naming a file twice.
	body4, ct4 := manyFiles(t, 2, [2]string{"doc0.md", "again"})
	if status, out := doJSON(t, "POST", srv.url+"/v1/documents", ct4, body4); status != http.StatusBadRequest || errCode(out) != "duplicate_file" {
		t.Errorf("batch naming a file twice: %d %v, want 400 duplicate_file", status, out)
	}
	if n := storedDocuments(t, srv.url); n != 0 {
		t.Errorf("after refused batches, %d documents are stored, want 0", n)
	}

	// 4. A whole batch is stored whole.
	body5, ct5 := manyFiles(t, 6)
	if status, out := doJSON(t, "POST", srv.url+"/v1/documents", ct5, body5); status != http.StatusOK || len(out["documents"].([]any)) != 6 {
		t.Fatalf("a whole batch: %d %v", status, out)
	}
	if n := storedDocuments(t, srv.url); n != 6 {
		t.Errorf("after a whole batch of 6, %d documents are stored", n)
	}

	log := srv.stderr.String()
	if strings.Contains(log, "status=500") || strings.Contains(log, "request failed") {
		t.Errorf("the server logged a failure:\n%s", log)
	}
	if got := postStatuses(log); len(got) < 2 || got[0] == "200" || got[1] != "499" {
		t.Errorf("logged statuses %v: want the cut upload refused (4xx) and the abandoned batch as 499", got)
	}
}

// TestConcurrentIngestsAreBounded: with --max-concurrent-ingests 1, a second
// upload arriving while one is being embedded waits up to --ingest-wait and
// is then answered 503 ingest_busy with Retry-After; once the first is done,
// uploads are accepted again.
func TestConcurrentIngestsAreBounded(t *testing.T) {
	t.Parallel()
	dbURL, _ := testDB(t)
	simSrv, simURL := startSim(t, func(c *sim.Config) { c.EmbedMs = 40; c.EmbedMsPerInput = 0 })
	srv := startServe(t, map[string]string{"DATABASE_URL": dbURL}, "--data-dir", t.TempDir(),
		"--embedder", "openai", "--embed-base-url", simURL, "--embed-model", "sim-embed", "--embed-batch-size", "1",
		"--max-concurrent-ingests", "1", "--ingest-wait", "200ms")
	embeds := simSrv.Stats().Embeds
	slow, ct := manyFiles(t, 40) // ≈ 1.6 s of embedding
	var wg sync.WaitGroup
	var firstStatus int
	wg.Add(1)
	go func() {
		defer wg.Done()
		resp, err := http.Post(srv.url+"/v1/documents", ct, bytes.NewReader(slow))
		if err != nil {
			t.Error(err)
			return
		}
		resp.Body.Close()
		firstStatus = resp.StatusCode
	}()
	eventually(t, "the first upload to start embedding", func() bool { return simSrv.Stats().Embeds > embeds })
	one := []byte(`{"id":"one.md","text":"# One\n\nA single document."}`)
	req, _ := http.NewRequest("POST", srv.url+"/v1/documents", bytes.NewReader(one))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(raw), `"ingest_busy"`) || resp.Header.Get("Retry-After") == "" {
		t.Errorf("second upload while one runs: %d %s (Retry-After %q), want 503 ingest_busy with Retry-After", resp.StatusCode, raw, resp.Header.Get("Retry-After"))
	}
	wg.Wait()
	if firstStatus != http.StatusOK {
		t.Fatalf("the first upload: %d", firstStatus)
	}
	if status, out := doJSON(t, "POST", srv.url+"/v1/documents", "application/json", one); status != http.StatusOK {
		t.Errorf("upload after the first finished: %d %v", status, out)
	}
}
