package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// getJSON GETs base+path and decodes the JSON body, returning the status.
func getJSON(t *testing.T, base, path string, v any) int {
	t.Helper()
	resp, err := http.Get(base + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if v != nil {
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatalf("GET %s: %v in %s", path, err, b)
		}
	}
	return resp.StatusCode
}

type apiErr struct {
	Error struct{ Code, Message, Field string } `json:"error"`
}

// uuidZero is a query id no query has.
const uuidZero = "00000000-0000-0000-0000-000000000000"

func TestListStatsMetricsAndPagesOverHTTP(t *testing.T) {
	t.Parallel()
	dbURL, pool := testDB(t)
	env := map[string]string{"DATABASE_URL": dbURL}
	srv := startServe(t, env, "--data-dir", ingestCorpus(t, env))
	for _, k := range []string{"2", "3", "4"} {
		ask(t, srv.url, "q="+url.QueryEscape("what is prefill?")+"&top_k="+k)
	}
	eventually(t, "three stored queries", func() bool { return countRows(t, pool, "queries") == 3 })

	// Paging: 2 + 1, newest first, following "next".
	type page struct {
		Queries []struct {
			QueryID string             `json:"query_id"`
			TopK    int                `json:"top_k"`
			Stages  map[string]float64 `json:"stages"`
		} `json:"queries"`
		NextCursor string `json:"next_cursor"`
		Next       string `json:"next"`
	}
	var p1, p2 page
	if code := getJSON(t, srv.url, "/v1/queries?limit=2&since=1h", &p1); code != 200 || len(p1.Queries) != 2 || p1.Next == "" {
		t.Fatalf("page 1: %d %+v", code, p1)
	}
	if p1.Queries[0].TopK != 4 || p1.Queries[1].TopK != 3 || p1.Queries[0].Stages["search"] <= 0 {
		t.Errorf("page 1 not newest first with stages: %+v", p1.Queries)
	}
	if code := getJSON(t, srv.url, p1.Next, &p2); code != 200 || len(p2.Queries) != 1 || p2.Queries[0].TopK != 2 || p2.NextCursor != "" {
		t.Fatalf("page 2 (%s): %d %+v", p1.Next, code, p2)
	}
	var filtered page
	if getJSON(t, srv.url, "/v1/queries?top_k=3&status=ok", &filtered); len(filtered.Queries) != 1 || filtered.Queries[0].TopK != 3 {
		t.Errorf("filtered: %+v", filtered)
	}

	for _, tc := range []struct{ path, field, code string }{
		{"/v1/queries?since=yesterday", "since", "since_invalid"},
		{"/v1/queries?until=-5m", "until", "until_invalid"},
		{"/v1/queries?status=done", "status", "status_invalid"},
		{"/v1/queries?top_k=0", "top_k", "top_k_out_of_range"},
		{"/v1/queries?limit=501", "limit", "limit_invalid"},
		{"/v1/queries?cursor=bm9wZQ", "", "cursor_invalid"},
		{"/v1/queries?sort=asc", "sort", "unknown_parameter"},
		{"/v1/stats?since=0s", "since", "since_invalid"},
		{"/v1/stats?since=91d", "since", "since_out_of_range"},
		{"/v1/stats?window=1h", "window", "unknown_parameter"},
		{"/v1/stats?provider=%00", "provider", "provider_invalid"},
		{"/v1/stats?model=a%0Ab", "model", "model_invalid"},
		{"/v1/queries?provider=%07", "provider", "provider_invalid"},
	} {
		var e apiErr
		if code := getJSON(t, srv.url, tc.path, &e); code != 400 || e.Error.Code != tc.code || e.Error.Field != tc.field || e.Error.Message == "" {
			t.Errorf("%s: %d %+v, want 400 %s naming %q", tc.path, code, e.Error, tc.code, tc.field)
		}
	}

	var st struct {
		Provider string `json:"provider"`
		Model    string `json:"model"`
		Models   []struct {
			Provider, Model string
			Queries         int
		} `json:"models"`
		Totals struct {
			Queries int `json:"queries"`
			OK      int `json:"ok"`
		} `json:"totals"`
		StagePercentiles []struct{ Stage string } `json:"stage_percentiles"`
		TopK             []struct {
			TopK int `json:"top_k"`
		} `json:"topk_tradeoff"`
		SlowQueries []struct {
			DominantStage string `json:"dominant_stage"`
		} `json:"slow_queries"`
	}
	if code := getJSON(t, srv.url, "/v1/stats?since=1h", &st); code != 200 || st.Totals.Queries != 3 || st.Totals.OK != 3 ||
		len(st.TopK) != 3 || len(st.SlowQueries) != 3 || len(st.StagePercentiles) < 5 || st.SlowQueries[0].DominantStage == "" {
		t.Errorf("stats: %d %+v", code, st)
	}
	if len(st.Models) != 1 || st.Models[0].Provider != "extractive" || st.Models[0].Queries != 3 {
		t.Fatalf("stats models %+v, want the one extractive model with 3 queries", st.Models)
	}
	// Filtered to the model that answered, and to one that did not.
	only := "/v1/stats?since=1h&provider=extractive&model=" + url.QueryEscape(st.Models[0].Model)
	if code := getJSON(t, srv.url, only, &st); code != 200 || st.Totals.Queries != 3 || len(st.TopK) != 3 || st.Provider != "extractive" || st.Model == "" {
		t.Errorf("stats of %s: %d %+v", only, code, st)
	}
	st.TopK, st.SlowQueries = nil, nil
	if code := getJSON(t, srv.url, "/v1/stats?since=1h&provider=openai", &st); code != 200 || st.Totals.Queries != 0 || len(st.TopK) != 0 ||
		len(st.SlowQueries) != 0 || len(st.Models) != 1 {
		t.Errorf("stats of provider openai (no queries): %d %+v, want nothing but the window's models", code, st)
	}
	var models struct {
		Models []struct{ Provider, Model string } `json:"models"`
	}
	if code := getJSON(t, srv.url, "/v1/stats/models?since=1h", &models); code != 200 || len(models.Models) != 1 || models.Models[0].Provider != "extractive" {
		t.Errorf("/v1/stats/models: %d %+v, want the extractive model", code, models)
	}
	for prov, want := range map[string]int{"extractive": 3, "openai": 0} {
		var p page
		if getJSON(t, srv.url, "/v1/queries?provider="+prov, &p); len(p.Queries) != want {
			t.Errorf("/v1/queries?provider=%s: %d queries, want %d", prov, len(p.Queries), want)
		}
	}

	resp, err := http.Get(srv.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`ragtime_queries_total{status="ok"} 3`, `ragtime_ttft_seconds_count 3`, `ragtime_stage_duration_seconds_count{stage="search"} 3`, "ragtime_recorder_queue_depth "} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	for path, want := range map[string]string{
		"/": "<title>ragtime · ask</title>", "/queries": "queries.js", "/queries/" + uuidZero: "query.js",
		"/dashboard": "dashboard.js", "/static/common.js": "class Waterfall", "/static/app.css": "--accent",
	} {
		resp, err := http.Get(srv.url + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(b), want) {
			t.Errorf("GET %s: %d, want a body with %q", path, resp.StatusCode, want)
		}
	}
	// A page for an id that cannot be a query's is a 404 (its script says
	// "no query with id ..."); for a UUID the script asks the API.
	if code := getJSON(t, srv.url, "/queries/abc", nil); code != 404 {
		t.Errorf("GET /queries/abc: %d, want 404", code)
	}
	for _, path := range []string{"/static/", "/static/nope.js", "/static/../pages.go"} {
		if code := getJSON(t, srv.url, path, nil); code != 404 {
			t.Errorf("GET %s: %d, want 404", path, code)
		}
	}
}

func TestPrune(t *testing.T) {
	t.Parallel()
	dbURL, pool := testDB(t)
	env := map[string]string{"DATABASE_URL": dbURL}
	srv := startServe(t, env, "--data-dir", ingestCorpus(t, env))
	ask(t, srv.url, "q=prefill")
	eventually(t, "a stored query", func() bool { return countRows(t, pool, "queries") == 1 })
	// A stage carries its query's created_at (and so its day partition).
	if _, err := pool.Exec(context.Background(), "UPDATE queries SET created_at = now() - interval '40 days'; UPDATE query_stages SET created_at = now() - interval '40 days'"); err != nil {
		t.Fatal(err)
	}
	if out := runCmd(t, env, "prune", "--older-than", "30d", "--dry-run"); !strings.HasPrefix(out, "dry run: would delete 1 queries (") || !strings.Contains(out, "nothing deleted") {
		t.Errorf("prune --dry-run said %q", out)
	}
	if n := countRows(t, pool, "queries"); n != 1 {
		t.Fatalf("--dry-run left %d queries, want 1", n)
	}
	out := runCmd(t, env, "prune", "--older-than", "30d")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 2 || !strings.HasPrefix(lines[0], "deleting 1 queries (") || !strings.HasPrefix(lines[1], "pruned 1 queries created before ") {
		t.Errorf("prune said %q, want what will go, then what went", out)
	}
	if n := countRows(t, pool, "query_stages"); n != 0 {
		t.Errorf("%d stages left", n)
	}
	if out := runCmd(t, env, "prune", "--older-than", "36h"); !strings.Contains(out, "pruned 0 queries") {
		t.Errorf("second prune said %q", out)
	}

	for _, args := range [][]string{{"prune"}, {"prune", "--older-than", "soon"}, {"prune", "--older-than", "-3d"}, {"prune", "--older-than", "1m"}, {"prune", "--older-than", "90m"}, {"prune", "--older-than", "30"}, {"prune", "--older-than", "1d", "--batch", "0"}} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		var out, errOut syncBuffer
		err := run(ctx, args, envMap(env), &out, &errOut)
		cancel()
		var ue *usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error()+errOut.String(), "older-than") && !strings.Contains(err.Error(), "--batch") {
			t.Errorf("ragtime %v: %v (%s), want a usage error naming the flag", args, err, errOut.String())
		}
	}
}

func TestParseAge(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]time.Duration{"36h": 36 * time.Hour, "30d": 30 * 24 * time.Hour, "1.5d": 36 * time.Hour, "2w": 14 * 24 * time.Hour, " 1h ": time.Hour} {
		if got, err := parseAge(in); err != nil || got != want {
			t.Errorf("parseAge(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"1m", "1M", "90m", "1mo", "1y", "30", "-3d", "0d", "d", "1s", "1h30m", ""} {
		_, err := parseAge(in)
		if err == nil {
			t.Errorf("parseAge(%q) accepted an ambiguous or bad age", in)
			continue
		}
		if !strings.Contains(err.Error(), "h (hours), d (days) or w (weeks)") {
			t.Errorf("parseAge(%q) error %q does not name the units", in, err)
		}
	}
	if _, err := parseAge("1m"); err == nil || !strings.Contains(err.Error(), "minutes or months") {
		t.Errorf("parseAge(1m) error %v does not say why m is refused", err)
	}
	var out, errOut syncBuffer
	err := run(context.Background(), []string{"prune", "--older-than", "1m"}, envMap(nil), &out, &errOut)
	if msg := err.Error() + errOut.String(); !strings.Contains(msg, "older-than") || !strings.Contains(msg, "d (days)") {
		t.Errorf("prune --older-than 1m: %q, want the flag and the units named", msg)
	}
}
