package grafana_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"ragtime/pipeline"
	"ragtime/postgres"
	"ragtime/postgres/postgrestest"
)

// dashboard is the part of a Grafana dashboard JSON the test reads.
type dashboard struct {
	UID    string  `json:"uid"`
	Panels []panel `json:"panels"`
}

type panel struct {
	ID         int        `json:"id"`
	Type       string     `json:"type"`
	Title      string     `json:"title"`
	Datasource datasource `json:"datasource"`
	Targets    []struct {
		RefID      string     `json:"refId"`
		Datasource datasource `json:"datasource"`
		Format     string     `json:"format"`
		RawSQL     string     `json:"rawSql"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // inside a row
}

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

func loadDashboard(t *testing.T) []panel {
	t.Helper()
	b, err := os.ReadFile("dashboards/ragtime.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("dashboards/ragtime.json: %v", err)
	}
	var all []panel
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if p.Type == "row" {
				walk(p.Panels)
				continue
			}
			all = append(all, p)
		}
	}
	walk(d.Panels)
	return all
}

var (
	timeFilterRE = regexp.MustCompile(`\$__timeFilter\(([^)]+)\)`)
	timeGroupRE  = regexp.MustCompile(`\$__timeGroup(Alias)?\(([^,]+),\s*([^)]+)\)`)
)

// expandMacros substitutes Grafana's PostgreSQL macros the way Grafana
// does for the range [from, to] and the interval.
func expandMacros(t *testing.T, sql string, from, to time.Time, interval time.Duration) string {
	t.Helper()
	lit := func(at time.Time) string { return "'" + at.UTC().Format(time.RFC3339Nano) + "'" }
	sql = strings.ReplaceAll(sql, "$__interval", fmt.Sprintf("'%s'", interval))
	sql = timeFilterRE.ReplaceAllStringFunc(sql, func(m string) string {
		col := timeFilterRE.FindStringSubmatch(m)[1]
		return fmt.Sprintf("%s BETWEEN %s AND %s", col, lit(from), lit(to))
	})
	sql = timeGroupRE.ReplaceAllStringFunc(sql, func(m string) string {
		sub := timeGroupRE.FindStringSubmatch(m)
		d, err := time.ParseDuration(strings.Trim(sub[3], "' "))
		if err != nil {
			t.Fatalf("macro %s: interval %q: %v", m, sub[3], err)
		}
		s := int64(d.Seconds())
		expr := fmt.Sprintf("floor(extract(epoch from %s)/%d)*%d", sub[2], s, s)
		if sub[1] == "Alias" {
			expr += ` AS "time"`
		}
		return expr
	})
	sql = strings.ReplaceAll(sql, "$__timeFrom()", lit(from))
	sql = strings.ReplaceAll(sql, "$__timeTo()", lit(to))
	if strings.Contains(sql, "$__") {
		t.Fatalf("a macro this test does not know is left in:\n%s", sql)
	}
	return sql
}

// record makes one finished query i minutes ago with every field set.
func record(i int, now time.Time) pipeline.Record {
	ttft := 120 + float64(i%7)*40
	if i%10 == 0 {
		ttft *= 6 // the tail
	}
	reused := i%4 != 0
	return pipeline.Record{
		QueryID:        uuid.NewString(),
		CreatedAt:      now.Add(-time.Duration(i) * 7 * time.Minute),
		Question:       fmt.Sprintf("question %d", i),
		QuestionSHA256: fmt.Sprintf("%064x", i),
		TopK:           []int{3, 5, 8}[i%3],
		RerankTopN:     3,
		MaxTokens:      256,
		Model:          []string{"sim-a", "sim-b"}[i%2],
		Provider:       "llmsim",
		Status:         pipeline.StatusOK,
		ConnReused:     &reused,
		UpstreamStatus: 200,
		Stages: []pipeline.Span{
			{Name: "embed", Seq: 0, DurationMs: 2},
			{Name: "search", Seq: 1, StartMs: 2, DurationMs: 4},
			{Name: "rerank", Seq: 2, StartMs: 6, DurationMs: 3},
			{Name: "assemble", Seq: 3, StartMs: 9, DurationMs: 3},
			{Name: "llm_connect", Seq: 4, StartMs: 12, DurationMs: 2, Attrs: map[string]any{"reused": reused}},
			{Name: "llm_prefill", Seq: 5, StartMs: 14, DurationMs: ttft - 14.5},
			{Name: "llm_decode", Seq: 6, StartMs: ttft, DurationMs: 500},
		},
		Figures: pipeline.Figures{
			TTFTMs:         &ttft,
			FirstTokenMs:   &ttft,
			E2EMs:          ttft + 500,
			RetrievalMs:    12,
			GenTTFTMs:      ttft - 12.5,
			LLMPrefillMs:   ttft - 14.5,
			OverheadMs:     ptr(0.5),
			RetrievalShare: ptr(12 / ttft),
			PrefillShare:   ptr((ttft - 14.5) / ttft),
			Usage:          pipeline.Usage{PromptTokens: 800, CompletionTokens: 60, CachedTokens: new(200 * (i % 3))},
		},
	}
}

func ptr[T any](v T) *T { return &v }

// TestDashboardPanelsRunAgainstTheSchema runs every panel's SQL against a
// freshly migrated database holding three hours of queries, and checks
// that each returns rows with the columns its panel format needs.
func TestDashboardPanelsRunAgainstTheSchema(t *testing.T) {
	t.Parallel()
	panels := loadDashboard(t)

	prov, err := os.ReadFile("provisioning/datasources/ragtime.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(prov), "uid: ragtime-postgres") || !strings.Contains(string(prov), "type: grafana-postgresql-datasource") {
		t.Fatalf("the provisioned data source is not ragtime-postgres of type grafana-postgresql-datasource:\n%s", prov)
	}

	want := []string{"TTFT p50 / p95 / p99", "Share of TTFT by stage", "Stage percentiles", "Top-k trade-off",
		"Prefix-cache hit rate", "Network health: reused connections", "Network health: llm_connect p95", "Slowest queries"}
	titles := map[string]bool{}
	for _, p := range panels {
		titles[p.Title] = true
	}
	for _, w := range want {
		if !titles[w] {
			t.Errorf("no panel %q", w)
		}
	}

	pool := postgrestest.NewPool(t)
	rec := postgres.NewRecorder(pool, postgres.RecorderOptions{Logger: slog.New(slog.DiscardHandler)})
	now := time.Now()
	const n = 26 // 26 × 7 min: three hours
	for i := range n {
		rec.Record(record(i, now))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := rec.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if st := rec.Stats(); st.Written != n {
		t.Fatalf("recorder wrote %d of %d", st.Written, n)
	}

	from, to := now.Add(-6*time.Hour), now.Add(time.Minute)
	for _, p := range panels {
		if p.Datasource.UID != "ragtime-postgres" {
			t.Errorf("panel %q: data source %q, want ragtime-postgres", p.Title, p.Datasource.UID)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			sql := expandMacros(t, tg.RawSQL, from, to, 5*time.Minute)
			rows, err := pool.Query(ctx, sql)
			if err != nil {
				t.Errorf("panel %q: %v\n%s", p.Title, err, sql)
				continue
			}
			var cols []string
			for _, f := range rows.FieldDescriptions() {
				cols = append(cols, f.Name)
			}
			count := 0
			for rows.Next() {
				count++
			}
			if err := rows.Err(); err != nil {
				t.Errorf("panel %q: %v\n%s", p.Title, err, sql)
			}
			rows.Close()
			if count == 0 {
				t.Errorf("panel %q returned no rows\n%s", p.Title, sql)
			}
			if tg.Format == "time_series" && (len(cols) == 0 || cols[0] != "time") {
				t.Errorf("panel %q: a time series needs \"time\" first, has %v", p.Title, cols)
			}
			t.Logf("panel %q: %d rows, columns %v", p.Title, count, cols)
		}
	}
}
