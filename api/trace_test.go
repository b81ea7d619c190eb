package api

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"ragtime"
	"ragtime/pipeline"
)

type traceKey struct{}

// TestTraceContextReachesTheAsker: the middleware hands every route's
// request context the caller's trace context (here a stand-in reader that
// keeps the header), and leaves requests without traceparent alone.
func TestTraceContextReachesTheAsker(t *testing.T) {
	t.Parallel()
	var got []string
	asker := askerFunc(func(ctx context.Context, req *pipeline.Request, out pipeline.Stream) *ragtime.Record {
		v, _ := ctx.Value(traceKey{}).(string)
		got = append(got, v)
		rec := ragtime.Record{QueryID: "q1"}
		_ = out.Done(rec)
		return &rec
	})
	ts := newTestServer(t, Deps{Asker: asker, TraceContext: func(ctx context.Context, h http.Header) context.Context {
		return context.WithValue(ctx, traceKey{}, h.Get("traceparent"))
	}})
	const parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	for _, tp := range []string{parent, ""} {
		req, _ := http.NewRequest(http.MethodGet, ts.URL+"/ask?q=what", nil)
		if tp != "" {
			req.Header.Set("traceparent", tp)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if len(got) != 2 || got[0] != parent || got[1] != "" {
		t.Errorf("the asker saw trace contexts %q", got)
	}
}

func TestTraceURLFromTemplate(t *testing.T) {
	t.Parallel()
	const id = "0af7651916cd43dd8448eb211c80319c"
	reader := mapReader{"a": {QueryID: "a", TraceID: id}, "b": {QueryID: "b"}}
	ts := newTestServer(t, Deps{Queries: reader, TraceURLTemplate: "http://localhost:16686/trace/{trace_id}"})
	for qid, want := range map[string]string{"a": "http://localhost:16686/trace/" + id, "b": ""} {
		code, body, _ := get(t, ts.URL+"/v1/queries/"+qid)
		var out struct {
			QueryID  string  `json:"query_id"`
			TraceID  string  `json:"trace_id"`
			TraceURL *string `json:"trace_url"`
		}
		if err := json.Unmarshal([]byte(body), &out); err != nil || code != http.StatusOK {
			t.Fatalf("%d %s: %v", code, body, err)
		}
		if out.QueryID != qid || (want == "") != (out.TraceURL == nil) || (out.TraceURL != nil && *out.TraceURL != want) {
			t.Errorf("query %s: %s", qid, body)
		}
	}
	for _, bad := range []string{"http://localhost:16686/trace/", "javascript:alert(1)//{trace_id}", "/trace/{trace_id}"} {
		if err := ValidateTraceURLTemplate(bad); err == nil {
			t.Errorf("%q accepted", bad)
		} else if !strings.Contains(err.Error(), "trace") {
			t.Errorf("%q: %v", bad, err)
		}
	}
	if err := ValidateTraceURLTemplate("https://grafana.example.com/explore?traceId={trace_id}"); err != nil {
		t.Error(err)
	}
}
