package llm

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"ragtime"
	"ragtime/pipeline"
)

// TestRequestIDIsKeptOnlyWhenSafe serves streams and errors over real HTTP
// with request ids a hostile or broken upstream could send: only an id
// shaped like one survives, in the generation and in the error alike.
func TestRequestIDIsKeptOnlyWhenSafe(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, header, want string
	}{
		{"plain", "req_0123abc-DEF.9:1", "req_0123abc-DEF.9:1"},
		{"cf-ray", "8f2a1b3c4d5e6f70-FRA", "8f2a1b3c4d5e6f70-FRA"},
		{"markup", "<script>alert(1)</script>", ""},
		{"spaces", "req 1; drop table queries", ""},
		{"too long", strings.Repeat("a", pipeline.MaxRequestIDBytes+1), ""},
		{"longest", strings.Repeat("a", pipeline.MaxRequestIDBytes), strings.Repeat("a", pipeline.MaxRequestIDBytes)},
		{"the key echoed", testKey, ""},
		{"a key-like token", "sk-abcdefghijklmnop", ""},
		{"a masked key", "sk-tes****6789", ""},
		{"non-ASCII", "req_é", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			for _, status := range []int{http.StatusOK, http.StatusInternalServerError} {
				ok := replay(t, "basic.sse")
				srv := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if status == http.StatusOK {
						ok(&idWriter{ResponseWriter: w, id: tt.header}, r)
						return
					}
					_, _ = io.Copy(io.Discard, r.Body)
					w.Header()["X-Request-Id"] = []string{tt.header}
					w.Header().Set("Content-Type", "application/json")
					w.WriteHeader(status)
					_, _ = io.WriteString(w, `{"error":{"message":"boom"}}`)
				}))
				g := newOpenAIClient(t, srv.URL+"/v1", func(c *OpenAIConfig) { c.MaxRetries = 0 })
				_, gen, err := collect(t, g, context.Background(), testRequest)
				if gen.RequestID != tt.want {
					t.Errorf("HTTP %d: generation request id %q, want %q", status, gen.RequestID, tt.want)
				}
				var pe *ragtime.Error
				if status != http.StatusOK {
					if !errors.As(err, &pe) {
						t.Fatalf("HTTP %d: error %v, want a *ragtime.Error", status, err)
					}
					if pe.RequestID != tt.want {
						t.Errorf("HTTP %d: error request id %q, want %q", status, pe.RequestID, tt.want)
					}
				} else if err != nil {
					t.Fatalf("HTTP 200: %v", err)
				}
			}
		})
	}
}

// idWriter replaces the X-Request-Id a handler sets with id.
type idWriter struct {
	http.ResponseWriter
	id string
}

func (w *idWriter) WriteHeader(code int) {
	w.Header()["X-Request-Id"] = []string{w.id}
	w.ResponseWriter.WriteHeader(code)
}

func (w *idWriter) Flush() { w.ResponseWriter.(http.Flusher).Flush() }
