package main

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// errField is the "field" of an error body.
func errField(m map[string]any) string {
	e, _ := m["error"].(map[string]any)
	s, _ := e["field"].(string)
	return s
}

// TestInputThatUsedToBe500IsA400 sends, to a running serve with a real
// Postgres, the inputs that were answered with 500 (a NUL or invalid UTF-8
// reaching Postgres, an HTML document nested past the parser's limit) and
// their neighbours, and a binary file that was stored as text: each is a 400
// naming the parameter, and the server logs no failed request.
func TestInputThatUsedToBe500IsA400(t *testing.T) {
	t.Parallel()
	dbURL, _ := testDB(t)
	env := map[string]string{"DATABASE_URL": dbURL}
	srv := startServe(t, env, "--data-dir", t.TempDir())
	deep := strings.Repeat("<div>", 600) + "deep" + strings.Repeat("</div>", 600)
	deepJSON := fmt.Sprintf(`{"id":"deep.html","text":%q}`, deep)
	mp, mpType := multipartBody(t, map[string]string{"deep.html": deep})
	// A binary file named .md (every byte value) was stored as 591 chunks.
	var blob strings.Builder
	for b := range 256 {
		blob.WriteByte(byte(b))
	}
	bin, binType := multipartBody(t, map[string]string{"blob.md": strings.Repeat(blob.String(), 50)})
	for _, c := range []struct {
		name, method, path, ct, body string
		code, field                  string
	}{
		{"list model NUL", "GET", "/v1/queries?model=%00", "", "", "model_invalid", "model"},
		{"list model invalid UTF-8", "GET", "/v1/queries?model=%ff", "", "", "model_invalid", "model"},
		{"list model control", "GET", "/v1/queries?model=a%0Ab", "", "", "model_invalid", "model"},
		{"ask doc_id NUL", "GET", "/ask?q=hi&doc_id=%00", "", "", "filters_invalid", "doc_id"},
		{"ask doc_id invalid UTF-8", "GET", "/ask?q=hi&doc_id=%ff", "", "", "filters_invalid", "doc_id"},
		{"ask metadata NUL", "POST", "/ask", "application/json", `{"question":"hi","filters":{"metadata":{"k":"\u0000"}}}`, "filters_invalid", "filters.metadata"},
		{"deep HTML as JSON", "POST", "/v1/documents", "application/json", deepJSON, "document_unreadable", "deep.html"},
		{"deep HTML as a file", "POST", "/v1/documents", mpType, string(mp), "document_unreadable", "deep.html"},
		{"binary file named .md", "POST", "/v1/documents", binType, string(bin), "document_unreadable", "blob.md"},
	} {
		status, out := doJSON(t, c.method, srv.url+c.path, c.ct, []byte(c.body))
		if status != http.StatusBadRequest || errCode(out) != c.code || errField(out) != c.field {
			t.Errorf("%s: %d %v, want 400 %s naming %s", c.name, status, out, c.code, c.field)
		}
		if c.field == "deep.html" && !strings.Contains(fmt.Sprint(out), "512") {
			t.Errorf("%s: %v does not name the parser's limit (512)", c.name, out)
		}
		if c.field == "blob.md" && !strings.Contains(fmt.Sprint(out), "blob.md is not text: it holds a NUL byte") {
			t.Errorf("%s: %v does not say the file is not text", c.name, out)
		}
	}
	// The neighbours still work: a model that exists as a filter, a document
	// nested within the limit.
	if status, out := doJSON(t, "GET", srv.url+"/v1/queries?model=gpt-4o", "", nil); status != http.StatusOK {
		t.Errorf("list with a plain model: %d %v", status, out)
	}
	ok := strings.Repeat("<div>", 400) + "shallow enough" + strings.Repeat("</div>", 400)
	if status, out := doJSON(t, "POST", srv.url+"/v1/documents", "application/json", []byte(fmt.Sprintf(`{"id":"ok.html","text":%q}`, ok))); status != http.StatusOK {
		t.Errorf("HTML nested 400 deep: %d %v", status, out)
	}
	if log := srv.stderr.String(); strings.Contains(log, "request failed") || strings.Contains(log, "status=500") {
		t.Errorf("the server logged a failure:\n%s", log)
	}
}
