package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"ragtime"
	"ragtime/pipeline"
)

// The fuzz targets drive the real handler (NewServer) in-process with
// httptest recorders, for speed. Their invariants: nothing is a 500; an
// error is JSON with a code and a message, naming the field when it is about
// one; what is accepted satisfies every documented bound; and an accepted
// request, written out again, is accepted as the same request.

// errorBody is a decoded error answer.
type errorBody struct {
	Error struct {
		Code, Message, Field string
	}
}

// serve runs one request through h.
func serve(h http.Handler, req *http.Request) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w
}

// checkErrorAnswer fails unless w is a well-formed error answer with one
// of the statuses allowed.
func checkErrorAnswer(t *testing.T, w *httptest.ResponseRecorder, allowed ...int) errorBody {
	t.Helper()
	var e errorBody
	if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || e.Error.Code == "" || e.Error.Message == "" {
		t.Fatalf("status %d with body %q: want a JSON error with a code and a message", w.Code, w.Body.String())
	}
	for _, s := range allowed {
		if w.Code == s {
			return e
		}
	}
	t.Fatalf("status %d (%s: %s), want one of %v", w.Code, e.Error.Code, e.Error.Message, allowed)
	return e
}

// checkAccepted fails unless req is within every documented bound.
func checkAccepted(t *testing.T, req pipeline.Request) {
	t.Helper()
	q := req.Question
	switch {
	case q == "" || q != strings.TrimSpace(q) || !utf8.ValidString(q) || strings.ContainsRune(q, 0) || utf8.RuneCountInString(q) > pipeline.DefaultMaxQuestion:
		t.Fatalf("accepted question %q", q)
	case req.TopK < 1 || req.TopK > pipeline.MaxTopK:
		t.Fatalf("accepted top_k %d", req.TopK)
	case req.RerankTopN < 0 || req.RerankTopN > req.TopK:
		t.Fatalf("accepted rerank_top_n %d with top_k %d", req.RerankTopN, req.TopK)
	case req.MaxTokens < 1 || req.MaxTokens > pipeline.MaxMaxTokens:
		t.Fatalf("accepted max_tokens %d", req.MaxTokens)
	case pipeline.CheckModel(req.Model) != nil:
		t.Fatalf("accepted model %q", req.Model)
	case req.Filter.Check() != nil:
		t.Fatalf("accepted filter %+v: %v", req.Filter, req.Filter.Check())
	}
}

// fieldCodes are the error codes about one field, which must name it.
func aboutAField(code string) bool {
	return code != "body_invalid" && code != "body_too_large" && code != "unsupported_media_type"
}

func FuzzAskGet(f *testing.F) {
	for _, s := range []string{
		"q=hi", "q=What+is+prefill%3F&top_k=7&rerank_top_n=0&max_tokens=9&model=m&doc_id=a.md&doc_id=b.md",
		"question=x", "q=hi&topk=3", "q=%00", "q=%ff", "q=hi&top_k=-1", "q=hi&top_k=1e3", "q=hi&doc_id=%00",
		"q=hi&model=%0A", "q=+++", "q=hi&top_k=%20%205", "q=hi&rerank_top_n=101&top_k=100", "q=a;b", "q=hi&q=there",
	} {
		f.Add(s)
	}
	asker := &scriptedAsker{}
	var mu sync.Mutex
	h := NewServer(Deps{Asker: asker})
	f.Fuzz(func(t *testing.T, rawQuery string) {
		mu.Lock() // the asker records the last request
		defer mu.Unlock()
		req, err := http.NewRequest(http.MethodGet, "/ask", nil)
		if err != nil {
			t.Skip()
		}
		req.URL.RawQuery = rawQuery
		asker.got = pipeline.Request{}
		w := serve(h, req)
		if w.Code != http.StatusOK {
			e := checkErrorAnswer(t, w, http.StatusBadRequest)
			if aboutAField(e.Error.Code) && e.Error.Field == "" {
				t.Fatalf("%s (%s) names no field", e.Error.Code, e.Error.Message)
			}
			return
		}
		got := asker.got
		checkAccepted(t, got)
		// Round trip: the accepted request, as a query string, is the same.
		again := url.Values{"q": {got.Question}, "top_k": {strconv.Itoa(got.TopK)},
			"rerank_top_n": {strconv.Itoa(got.RerankTopN)}, "max_tokens": {strconv.Itoa(got.MaxTokens)}}
		if got.Model != "" {
			again.Set("model", got.Model)
		}
		again["doc_id"] = got.Filter.DocIDs
		req2, _ := http.NewRequest(http.MethodGet, "/ask?"+again.Encode(), nil)
		asker.got = pipeline.Request{}
		if w := serve(h, req2); w.Code != http.StatusOK {
			t.Fatalf("the accepted request %+v, sent again, was answered %d %s", got, w.Code, w.Body.String())
		}
		if !reflect.DeepEqual(asked(asker.got), asked(got)) {
			t.Fatalf("round trip changed the request:\n%+v\n%+v", got, asker.got)
		}
	})
}

func FuzzAskPost(f *testing.F) {
	for _, s := range []string{
		`{"question":"q","top_k":4,"rerank_top_n":0,"filters":{"doc_id":["a.md"],"metadata":{"type":"html"}}}`,
		`{"question":"What is prefill?","max_tokens":256,"model":""}`, `{}`, ``, `[]`, `{"question":1}`,
		`{"question":"q"}]`, `{"question":"q","extra":1}`, `{"question":"\u0000"}`, `{"question":"q","top_k":1e2}`,
		`{"question":"q","filters":{"metadata":{"":"x"}}}`, `{"question":"q","filters":null}`, `{"question":"q","top_k":null}`,
	} {
		f.Add([]byte(s))
	}
	asker := &scriptedAsker{}
	var mu sync.Mutex
	h := NewServer(Deps{Asker: asker, MaxBodyBytes: 64 << 10, AllowedHosts: []string{"example.com"}}) // httptest.NewRequest's Host
	post := func(body []byte) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, "/ask", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		return serve(h, req)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		mu.Lock()
		defer mu.Unlock()
		asker.got = pipeline.Request{}
		w := post(body)
		if w.Code != http.StatusOK {
			e := checkErrorAnswer(t, w, http.StatusBadRequest, http.StatusRequestEntityTooLarge)
			if aboutAField(e.Error.Code) && e.Error.Field == "" {
				t.Fatalf("%s (%s) names no field", e.Error.Code, e.Error.Message)
			}
			return
		}
		got := asker.got
		checkAccepted(t, got)
		filters := got.Filter
		again, err := json.Marshal(map[string]any{"question": got.Question, "top_k": got.TopK, "rerank_top_n": got.RerankTopN,
			"max_tokens": got.MaxTokens, "model": got.Model, "filters": filters})
		if err != nil {
			t.Fatal(err)
		}
		asker.got = pipeline.Request{}
		if w := post(again); w.Code != http.StatusOK {
			t.Fatalf("the accepted request %s, sent again, was answered %d %s", again, w.Code, w.Body.String())
		}
		if !reflect.DeepEqual(asked(asker.got), asked(got)) {
			t.Fatalf("round trip changed the request:\n%+v\n%+v", got, asker.got)
		}
	})
}

// asked is what the caller chose of a request (the server adds the rest,
// such as its admission), with an empty list or map as absent (JSON's
// omitempty).
func asked(r pipeline.Request) pipeline.Request {
	out := pipeline.Request{Question: r.Question, TopK: r.TopK, RerankTopN: r.RerankTopN, MaxTokens: r.MaxTokens,
		Model: r.Model, Filter: r.Filter}
	if len(out.Filter.DocIDs) == 0 {
		out.Filter.DocIDs = nil
	}
	if len(out.Filter.Metadata) == 0 {
		out.Filter.Metadata = nil
	}
	return out
}

// memDocuments is a Documents that keeps the last batch it was given,
// reading spooled files while they exist.
type memDocuments struct {
	calls int
	got   []pipeline.DocumentInput
}

func (m *memDocuments) PutDocuments(ctx context.Context, ins []pipeline.DocumentInput) ([]pipeline.DocumentResult, error) {
	m.calls++
	m.got = nil
	out := make([]pipeline.DocumentResult, len(ins))
	for i, in := range ins {
		if in.File != "" {
			b, err := os.ReadFile(in.File)
			if err != nil {
				return nil, err
			}
			in.Body, in.File = b, ""
		}
		m.got = append(m.got, in)
		out[i] = pipeline.DocumentResult{DocID: in.DocID, Title: in.Title, Chunks: 1}
	}
	return out, nil
}

func (m *memDocuments) DeleteDocument(context.Context, string) (bool, error) { return false, nil }
func (m *memDocuments) ListDocuments(context.Context) ([]ragtime.DocumentInfo, error) {
	return nil, nil
}

const fuzzDocLimit = 2048

// checkStoredInput fails unless in is a document the API may store.
func checkStoredInput(t *testing.T, in pipeline.DocumentInput) {
	t.Helper()
	if validID(in.DocID, "id") != nil {
		t.Fatalf("stored id %q", in.DocID)
	}
	if !pipeline.ValidKind(in.Kind) {
		t.Fatalf("stored kind %q", in.Kind)
	}
	if len(in.Body) > fuzzDocLimit {
		t.Fatalf("stored %d bytes, over the limit %d", len(in.Body), fuzzDocLimit)
	}
	for k := range in.Metadata {
		if k == "" {
			t.Fatalf("stored metadata with an empty key")
		}
	}
}

func FuzzDocumentsJSON(f *testing.F) {
	for _, s := range []string{
		`{"id":"kv.md","title":"KV cache","text":"# KV\n\ntext","metadata":{"team":"serving"}}`,
		`{"id":"a","text":"x","kind":"html"}`, `{"id":"a","text":"x","kind":"pdf"}`, `{"text":"x"}`, `{"id":"a.md"}`,
		`{"id":"a\u0000","text":"x"}`, `{"id":"a.md","text":"x"}]`, `{"id":"a.md","text":"x","metadata":{"":"v"}}`,
		`{"id":"a.md","text":"x","body":"y"}`, `{"id":"` + strings.Repeat("i", 513) + `","text":"x"}`,
	} {
		f.Add([]byte(s))
	}
	docs := &memDocuments{}
	var mu sync.Mutex
	h := NewServer(Deps{Documents: docs, MaxDocumentBytes: fuzzDocLimit, AllowedHosts: []string{"example.com"}}) // httptest.NewRequest's Host
	post := func(body []byte) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, "/v1/documents", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		return serve(h, req)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		mu.Lock()
		defer mu.Unlock()
		docs.calls = 0
		w := post(body)
		if w.Code != http.StatusOK {
			checkErrorAnswer(t, w, http.StatusBadRequest, http.StatusUnsupportedMediaType)
			if docs.calls != 0 {
				t.Fatalf("a refused body reached the store")
			}
			return
		}
		if docs.calls != 1 || len(docs.got) != 1 {
			t.Fatalf("accepted: %d calls, %d documents", docs.calls, len(docs.got))
		}
		in := docs.got[0]
		checkStoredInput(t, in)
		again, _ := json.Marshal(map[string]any{"id": in.DocID, "title": in.Title, "text": string(in.Body), "kind": in.Kind, "metadata": in.Metadata})
		if !utf8.Valid(in.Body) {
			return // JSON text is UTF-8: the round trip would change it
		}
		if w := post(again); w.Code != http.StatusOK || !reflect.DeepEqual(docs.got[0], in) {
			t.Fatalf("the accepted document, sent again: %d %s\n%+v\n%+v", w.Code, w.Body.String(), in, docs.got[0])
		}
	})
}

// FuzzDocumentsMultipart sends either the fuzzer's raw bytes as a
// multipart body (boundary "B") or, built from them, a well-formed body of
// several files; refused bodies never reach the store (all or nothing) and
// accepted ones reach it byte for byte.
func FuzzDocumentsMultipart(f *testing.F) {
	f.Add([]byte("--B\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.md\"\r\n\r\n# A\r\n--B--\r\n"), "a.md", "x.txt", []byte("hello"), uint8(2))
	f.Add([]byte("--B\r\nContent-Disposition: form-data; name=\"metadata\"\r\n\r\n{\"k\":\"v\"}\r\n--B\r\nContent-Disposition: form-data; name=\"file\"; filename=\"../../b.html\"\r\n\r\n<p>x</p>\r\n--B--\r\n"), "b.html", "b.html", []byte{}, uint8(0))
	f.Add([]byte("--B\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.pdf\"\r\n\r\n%PDF\r\n--B--"), "a.pdf", "c.md", bytes.Repeat([]byte("z"), fuzzDocLimit+1), uint8(1))
	f.Add([]byte("--B\r\n"), "", "d\x00.md", []byte("\xff"), uint8(3))
	docs := &memDocuments{}
	var mu sync.Mutex
	h := NewServer(Deps{Documents: docs, MaxDocumentBytes: fuzzDocLimit, AllowedHosts: []string{"example.com"}}) // httptest.NewRequest's Host
	post := func(body []byte, contentType string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, "/v1/documents", bytes.NewReader(body))
		req.Header.Set("Content-Type", contentType)
		return serve(h, req)
	}
	f.Fuzz(func(t *testing.T, raw []byte, name1, name2 string, content []byte, mode uint8) {
		mu.Lock()
		defer mu.Unlock()
		check := func(w *httptest.ResponseRecorder) {
			if w.Code != http.StatusOK {
				checkErrorAnswer(t, w, http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusUnsupportedMediaType)
				if docs.calls != 0 {
					t.Fatalf("a refused body reached the store")
				}
				return
			}
			if docs.calls != 1 || len(docs.got) == 0 {
				t.Fatalf("accepted: %d calls, %d documents", docs.calls, len(docs.got))
			}
			seen := map[string]bool{}
			for _, in := range docs.got {
				checkStoredInput(t, in)
				if seen[in.DocID] {
					t.Fatalf("%s stored twice in one batch", in.DocID)
				}
				seen[in.DocID] = true
			}
		}
		docs.calls = 0
		check(post(raw, "multipart/form-data; boundary=B"))

		// A well-formed body of up to three files built from the inputs.
		var buf bytes.Buffer
		mw := multipart.NewWriter(&buf)
		files := [][2]string{{name1, string(content)}, {name2, string(raw)}}[:1+int(mode%2)]
		if mode%4 >= 2 {
			files = append(files, [2]string{name1 + ".txt", "tail"})
		}
		for _, fl := range files {
			fw, err := mw.CreateFormFile("file", fl[0])
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.WriteString(fw, fl[1])
		}
		_ = mw.WriteField("metadata", fmt.Sprintf(`{"n":%q}`, strings.ToValidUTF8(name2, "")))
		_ = mw.Close()
		docs.calls = 0
		w := post(buf.Bytes(), mw.FormDataContentType())
		check(w)
		if w.Code == http.StatusOK {
			for i, in := range docs.got {
				if string(in.Body) != files[i][1] {
					t.Fatalf("file %d (%s) stored as %d bytes, sent as %d", i, in.DocID, len(in.Body), len(files[i][1]))
				}
			}
		}
	})
}
