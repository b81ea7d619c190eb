package openai

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"ragtime"
	"ragtime/retrieval"
)

// embeddingsServer is a small OpenAI-compatible /v1/embeddings server: the
// vector of a text is [len(text), first byte, dims...], as base64 when
// asked (encoding_format) unless floatsOnly. llm/sim did not serve
// /v1/embeddings when this was written, so the tests bring their own.
type embeddingsServer struct {
	mu         sync.Mutex
	requests   []map[string]any
	auth       []string
	status     int    // answer every request with this status when set
	body       string // and this body
	delay      time.Duration
	floatsOnly bool // ignore encoding_format, as some servers do
	noBase64   bool // answer 400 to encoding_format base64, as some servers might
}

// set changes how the server answers; the handler of a request the client
// gave up on may still be reading these, hence the lock.
func (s *embeddingsServer) set(status int, body string, delay time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.status, s.body, s.delay = status, body, delay
}

func (s *embeddingsServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/embeddings" || r.Method != http.MethodPost {
		http.NotFound(w, r)
		return
	}
	var req struct {
		Model          string   `json:"model"`
		Input          []string `json:"input"`
		Dimensions     int      `json:"dimensions"`
		EncodingFormat string   `json:"encoding_format"`
	}
	raw := map[string]any{}
	json.NewDecoder(r.Body).Decode(&raw)
	b, _ := json.Marshal(raw)
	json.Unmarshal(b, &req)
	s.mu.Lock()
	s.requests = append(s.requests, raw)
	s.auth = append(s.auth, r.Header.Get("Authorization"))
	status, body, delay, floatsOnly := s.status, s.body, s.delay, s.floatsOnly
	if s.noBase64 && req.EncodingFormat == "base64" {
		status, body = http.StatusBadRequest, `{"error":{"message":"encoding_format: unsupported value 'base64'","type":"invalid_request_error"}}`
	}
	s.mu.Unlock()
	if delay > 0 {
		time.Sleep(delay)
	}
	if status != 0 {
		w.WriteHeader(status)
		w.Write([]byte(body))
		return
	}
	dim := req.Dimensions
	if dim == 0 {
		dim = 3
	}
	type item struct {
		Object    string `json:"object"`
		Index     int    `json:"index"`
		Embedding any    `json:"embedding"`
	}
	var data []item
	for i, t := range req.Input {
		v := make([]float32, dim)
		v[0] = float32(len(t))
		if len(t) > 0 {
			v[1] = float32(t[0])
		}
		var e any = v
		if req.EncodingFormat == "base64" && !floatsOnly {
			e = base64Of(v)
		}
		data = append(data, item{"embedding", i, e})
	}
	json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": data, "model": req.Model})
}

// base64Of is OpenAI's encoding_format "base64" of v.
func base64Of(v []float32) string {
	b := make([]byte, 4*len(v))
	for i, f := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f))
	}
	return base64.StdEncoding.EncodeToString(b)
}

func start(t *testing.T) (*embeddingsServer, string) {
	s := &embeddingsServer{}
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	return s, ts.URL + "/v1"
}

func TestEmbedBatchesInOrderWithoutTouchingInput(t *testing.T) {
	t.Parallel()
	srv, url := start(t)
	e, err := New(Config{BaseURL: url, Model: "text-embedding-3-small", Dimensions: 8, APIKey: "sk-test-key-123456", KeyVar: "RAGTIME_EMBED_API_KEY", BatchSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	texts := []string{"a\nb", "bb", "ccc", "dddd", "e"}
	orig := slices.Clone(texts)
	vecs, err := e.Embed(context.Background(), texts)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(texts, orig) {
		t.Errorf("input changed to %q", texts)
	}
	if len(vecs) != 5 {
		t.Fatalf("%d vectors", len(vecs))
	}
	for i, v := range vecs {
		if len(v) != 8 || v[0] != float32(len(orig[i])) || v[1] != float32(orig[i][0]) {
			t.Errorf("vector %d = %v: not the embedding of %q", i, v, orig[i])
		}
	}
	if len(srv.requests) != 3 {
		t.Fatalf("%d requests, want 3 batches of at most 2", len(srv.requests))
	}
	r0 := srv.requests[0]
	if r0["model"] != "text-embedding-3-small" || r0["dimensions"] != float64(8) || r0["input"].([]any)[0] != "a\nb" {
		t.Errorf("request %v: want model, dimensions and the text verbatim (newline kept)", r0)
	}
	if srv.auth[0] != "Bearer sk-test-key-123456" {
		t.Errorf("authorization %q", srv.auth[0])
	}
	if e.Name() != "openai:text-embedding-3-small" {
		t.Errorf("Name = %q", e.Name())
	}
}

func TestEmbedErrorsAreClassified(t *testing.T) {
	t.Parallel()
	cases := []struct {
		status int
		body   string
		code   string
		hint   string
	}{
		{401, `{"error":{"message":"Incorrect API key provided: sk-te****3456"}}`, retrieval.CodeEmbedAuth, "RAGTIME_EMBED_API_KEY"},
		{404, `{"error":{"message":"The model 'nope' does not exist","code":"model_not_found"}}`, retrieval.CodeEmbedModelNotFound, "--embed-model"},
		{400, `{"error":{"message":"model nope not found"}}`, retrieval.CodeEmbedModelNotFound, "--embed-model"},
		{503, `overloaded`, retrieval.CodeEmbedUnavailable, "retry"},
		{429, `{"error":"slow down"}`, retrieval.CodeEmbedRateLimited, "--embed-concurrency"},
		{400, `{"error":{"message":"dimensions not supported"}}`, retrieval.CodeEmbedBadRequest, "--embed-dimensions"},
	}
	for _, c := range cases {
		srv, url := start(t)
		srv.set(c.status, c.body, 0)
		e, err := New(Config{BaseURL: url, Model: "nope", KeyVar: "RAGTIME_EMBED_API_KEY", APIKey: "sk-test-key-123456"})
		if err != nil {
			t.Fatal(err)
		}
		_, err = e.Embed(context.Background(), []string{"x"})
		var pe *ragtime.Error
		if !errors.As(err, &pe) || pe.Code != c.code || pe.Status != c.status || !strings.Contains(pe.Hint, c.hint) {
			t.Errorf("HTTP %d %s: got %v (hint %q), want %s", c.status, c.body, err, hintOf(pe), c.code)
		}
		if strings.Contains(err.Error(), "sk-te") || strings.Contains(err.Error(), "3456") {
			t.Errorf("error %q leaks the key", err)
		}
	}
}

func hintOf(pe *ragtime.Error) string {
	if pe == nil {
		return ""
	}
	return pe.Hint
}

func TestEmbedTransportErrors(t *testing.T) {
	t.Parallel()
	srv, url := start(t)
	srv.set(0, "", 300*time.Millisecond)
	e, _ := New(Config{BaseURL: url, Model: "m", Timeout: 50 * time.Millisecond})
	_, err := e.Embed(context.Background(), []string{"x"})
	var pe *ragtime.Error
	if !errors.As(err, &pe) || pe.Code != retrieval.CodeEmbedTimeout {
		t.Errorf("slow server: %v, want embed_timeout", err)
	}
	down, _ := New(Config{BaseURL: "http://127.0.0.1:1/v1", Model: "m"})
	_, err = down.Embed(context.Background(), []string{"x"})
	if !errors.As(err, &pe) || pe.Code != retrieval.CodeEmbedUnavailable || !strings.Contains(pe.Message, "127.0.0.1:1") {
		t.Errorf("no server: %v, want embed_unavailable naming the address", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := e.Embed(ctx, []string{"x"}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
	srv.set(0, "", 0)
	e8, _ := New(Config{BaseURL: url, Model: "m", Dimensions: 0})
	if v, err := e8.Embed(context.Background(), []string{"x"}); err != nil || len(v[0]) != 3 {
		t.Errorf("model's own dimension: %v %v", v, err)
	}
}

func TestNewNamesTheFlag(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		cfg  Config
		flag string
	}{
		{Config{Model: "m"}, "--embed-base-url"},
		{Config{BaseURL: "localhost:1234", Model: "m"}, "--embed-base-url"},
		{Config{BaseURL: "http://x/v1"}, "--embed-model"},
		{Config{BaseURL: "http://x/v1", Model: "m", Dimensions: -1}, "--embed-dimensions"},
	} {
		if _, err := New(c.cfg); err == nil || !strings.Contains(err.Error(), c.flag) {
			t.Errorf("%+v: %v, want an error naming %s", c.cfg, err, c.flag)
		}
	}
}

// TestEmbedAsksForBase64AndReadsNumbersToo: vectors are asked for as
// base64 (encoding_format) and decoded exactly; a server that ignores the
// format and answers with numbers is read just the same.
func TestEmbedAsksForBase64AndReadsNumbersToo(t *testing.T) {
	t.Parallel()
	for _, floatsOnly := range []bool{false, true} {
		srv, url := start(t)
		srv.floatsOnly = floatsOnly
		e, err := New(Config{BaseURL: url, Model: "m", Dimensions: 5})
		if err != nil {
			t.Fatal(err)
		}
		vecs, err := e.Embed(context.Background(), []string{"héllo", "x"})
		if err != nil {
			t.Fatalf("floatsOnly=%v: %v", floatsOnly, err)
		}
		want := [][]float32{{6, 'h', 0, 0, 0}, {1, 'x', 0, 0, 0}}
		if !slices.EqualFunc(vecs, want, slices.Equal) {
			t.Errorf("floatsOnly=%v: vectors %v, want %v", floatsOnly, vecs, want)
		}
		if f := srv.requests[0]["encoding_format"]; f != "base64" {
			t.Errorf("encoding_format %v, want base64", f)
		}
	}
}

// TestDecodeBase64Vectors: the base64 of little-endian float32s, padded or
// not and with JSON escapes, in data's order or by index; a vector that is
// not such base64 is a bad response naming the field.
func TestDecodeBase64Vectors(t *testing.T) {
	t.Parallel()
	v := []float32{1.5, -0.25, float32(math.Pi), 0, -1e-30, 3e38}
	b64 := base64Of(v)
	escaped := strings.ReplaceAll(b64, "/", `\/`)
	for _, body := range []string{
		fmt.Sprintf(`{"object":"list","data":[{"object":"embedding","index":0,"embedding":%q}],"model":"m"}`, b64),
		fmt.Sprintf(`{"data":[{"embedding":%q}]}`, strings.TrimRight(b64, "=")),
		fmt.Sprintf(`{"data":[{"embedding":"%s","index":0}]}`, escaped),
	} {
		var res response
		if err := res.DecodeBody([]byte(body)); err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		if len(res.Data) != 1 || !slices.Equal(res.Data[0].Embedding, v) {
			t.Errorf("%s: decoded %+v, want %v", body, res.Data, v)
		}
	}
	var res response
	if err := res.DecodeBody([]byte(fmt.Sprintf(`{"data":[{"index":1,"embedding":%q},{"index":0,"embedding":%q}]}`, base64Of(v[:2]), base64Of(v[2:4])))); err != nil {
		t.Fatal(err)
	}
	if byIndex, ok := orderByIndex(res, 2); !ok || !slices.Equal(byIndex[0], v[2:4]) || !slices.Equal(byIndex[1], v[:2]) {
		t.Errorf("out-of-order answer placed as %v", byIndex)
	}
	for body, want := range map[string]string{
		`{"data":[{"embedding":"AACAPw=="},{"embedding":"not*base64"}]}`: "data[1].embedding is not the base64 of little-endian float32s",
		`{"data":[{"embedding":"AACAPwA="}]}`:                            "data[0].embedding is not the base64 of little-endian float32s (encoding_format base64): 5 bytes",
	} {
		var res response
		err := res.DecodeBody([]byte(body))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want one saying %q", body, err, want)
		}
	}
}

// TestBadBase64IsABadResponse: a server whose base64 does not decode is
// reported as embed_bad_response naming the field, not as a vector.
func TestBadBase64IsABadResponse(t *testing.T) {
	t.Parallel()
	srv, url := start(t)
	srv.set(http.StatusOK, `{"object":"list","data":[{"object":"embedding","index":0,"embedding":"@@@@"}]}`, 0)
	e, err := New(Config{BaseURL: url, Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.Embed(context.Background(), []string{"x"})
	var pe *ragtime.Error
	if !errors.As(err, &pe) || pe.Code != retrieval.CodeEmbedBadResponse || !strings.Contains(pe.Message, "data[0].embedding") {
		t.Fatalf("error %v, want %s naming data[0].embedding", err, retrieval.CodeEmbedBadResponse)
	}
}

// TestServerRefusingBase64GetsNumbers: a server that rejects
// encoding_format base64 is asked again for numbers, and from then on asked
// for numbers only.
func TestServerRefusingBase64GetsNumbers(t *testing.T) {
	t.Parallel()
	srv, url := start(t)
	srv.noBase64 = true
	e, err := New(Config{BaseURL: url, Model: "m", Dimensions: 3})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		vecs, err := e.Embed(context.Background(), []string{"ab"})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(vecs[0], []float32{2, 'a', 0}) {
			t.Errorf("vector %v", vecs[0])
		}
	}
	var formats []any
	for _, r := range srv.requests {
		formats = append(formats, r["encoding_format"])
	}
	if !slices.Equal(formats, []any{"base64", nil, nil}) {
		t.Errorf("encoding_format per request %v, want base64 once, then none", formats)
	}
}

// BenchmarkDecodeResponse is the decoding of one question's embedding (512
// dimensions) as numbers and as base64.
func BenchmarkDecodeResponse(b *testing.B) {
	v := make([]float32, 512)
	for i := range v {
		v[i] = float32(math.Sin(float64(i))) / 22.6
	}
	nums, _ := json.Marshal(map[string]any{"object": "list", "model": "m", "data": []map[string]any{{"object": "embedding", "index": 0, "embedding": v}}})
	b64, _ := json.Marshal(map[string]any{"object": "list", "model": "m", "data": []map[string]any{{"object": "embedding", "index": 0, "embedding": base64Of(v)}}})
	for _, bc := range []struct {
		name string
		body []byte
	}{{"floats", nums}, {"base64", b64}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(bc.body)))
			for b.Loop() {
				var res response
				if err := res.DecodeBody(bc.body); err != nil || len(res.Data[0].Embedding) != 512 {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestVectorsOutliveTheResponseBuffer: the response buffer is reused by the
// next call, so vectors returned before must not share its memory.
func TestVectorsOutliveTheResponseBuffer(t *testing.T) {
	t.Parallel()
	for _, floatsOnly := range []bool{false, true} {
		srv, url := start(t)
		srv.floatsOnly = floatsOnly
		e, err := New(Config{BaseURL: url, Model: "m", Dimensions: 4})
		if err != nil {
			t.Fatal(err)
		}
		first, err := e.Embed(context.Background(), []string{"abc"})
		if err != nil {
			t.Fatal(err)
		}
		kept := slices.Clone(first[0])
		for _, text := range []string{"zzzzzzzz", "y", "qq"} {
			if _, err := e.Embed(context.Background(), []string{text}); err != nil {
				t.Fatal(err)
			}
		}
		if !slices.Equal(first[0], kept) {
			t.Errorf("floatsOnly=%v: the first vector changed to %v after later calls, was %v", floatsOnly, first[0], kept)
		}
	}
}
