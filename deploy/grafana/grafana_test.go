package grafana_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"ragtime"
	"ragtime/postgres"
	"ragtime/postgres/postgrestest"
)

// dashboard is the part of a Grafana dashboard JSON the test reads.
type dashboard struct {
	UID        string  `json:"uid"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
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

// loadDashboardAndVariables returns the dashboard's panels and the SQL of
// its query variables by name.
func loadDashboardAndVariables(t *testing.T) ([]panel, map[string]string) {
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
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		if q, ok := v.Query.(string); ok && v.Type == "query" {
			vars[v.Name] = q
		}
	}
	return all, vars
}

// variableRE is a variable reference in Grafana's ${name:format} form.
var variableRE = regexp.MustCompile(`\$\{([a-z_]+):sqlstring\}`)

// expandVariables substitutes the dashboard variables as Grafana's
// sqlstring format does: each value quoted, its quotes doubled, joined by
// commas. Every ${name:sqlstring} must have a value.
func expandVariables(t *testing.T, sql string, values map[string][]string) string {
	t.Helper()
	return variableRE.ReplaceAllStringFunc(sql, func(m string) string {
		name := variableRE.FindStringSubmatch(m)[1]
		vs, ok := values[name]
		if !ok {
			t.Fatalf("no value for the variable %s in:\n%s", name, sql)
		}
		quoted := make([]string, len(vs))
		for i, v := range vs {
			quoted[i] = "'" + strings.ReplaceAll(v, "'", "''") + "'"
		}
		return strings.Join(quoted, ",")
	})
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
	if strings.Contains(sql, "$") {
		t.Fatalf("a macro or variable this test does not know is left in:\n%s", sql)
	}
	return sql
}

// record makes one finished query i minutes ago with every field set.
func record(i int, now time.Time) ragtime.Record {
	ttft := 120 + float64(i%7)*40
	if i%10 == 0 {
		ttft *= 6 // the tail
	}
	reused := i%4 != 0
	// Every part of the identity is there: ttft = accept + queue +
	// retrieval + gen_ttft + overhead + reasoning.
	reasoning := 0.0
	if i%3 == 0 {
		reasoning = 30
	}
	return ragtime.Record{
		QueryID:        uuid.NewString(),
		CreatedAt:      now.Add(-time.Duration(i) * 7 * time.Minute),
		Question:       fmt.Sprintf("question %d", i),
		QuestionSHA256: fmt.Sprintf("%064x", i),
		TopK:           []int{3, 5, 8}[i%3],
		RerankTopN:     3,
		MaxTokens:      256,
		Model:          []string{"sim-a", "sim-b"}[i%2],
		Provider:       "llmsim",
		Status:         ragtime.StatusOK,
		ConnReused:     &reused,
		UpstreamStatus: 200,
		Stages: []ragtime.Span{
			{Name: "embed", Seq: 0, DurationMs: 2},
			{Name: "search", Seq: 1, StartMs: 2, DurationMs: 4},
			{Name: "rerank", Seq: 2, StartMs: 6, DurationMs: 3},
			{Name: "assemble", Seq: 3, StartMs: 9, DurationMs: 3},
			{Name: "llm_connect", Seq: 4, StartMs: 12, DurationMs: 2, Attrs: map[string]any{"reused": reused}},
			{Name: "llm_prefill", Seq: 5, StartMs: 14, DurationMs: ttft - 14.5},
			{Name: "llm_decode", Seq: 6, StartMs: ttft, DurationMs: 500},
		},
		Figures: ragtime.Figures{
			TTFTMs:         &ttft,
			FirstTokenMs:   ptr(ttft - reasoning),
			E2EMs:          ttft + 500,
			RetrievalMs:    12,
			AcceptMs:       6,
			QueueMs:        1.5,
			GenTTFTMs:      ttft - 20.5 - reasoning,
			LLMPrefillMs:   ttft - 22.5 - reasoning,
			OverheadMs:     ptr(1.0),
			ReasoningMs:    &reasoning,
			RetrievalShare: ptr(12 / ttft),
			PrefillShare:   ptr((ttft - 22.5 - reasoning) / ttft),
			Usage:          ragtime.Usage{PromptTokens: 800, CompletionTokens: 60, CachedTokens: new(200 * (i % 3))},
		},
	}
}

func ptr[T any](v T) *T { return &v }

// TestDashboardPanelsRunAgainstTheSchema runs every panel's SQL against a
// freshly migrated database holding three hours of queries, and checks
// that each returns rows with the columns its panel format needs.
func TestDashboardPanelsRunAgainstTheSchema(t *testing.T) {
	t.Parallel()
	panels, vars := loadDashboardAndVariables(t)

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

	// The variables offer what the window holds: the provider, then its models.
	choices := func(name string, values map[string][]string) []string {
		t.Helper()
		q, ok := vars[name]
		if !ok {
			t.Fatalf("the dashboard has no query variable %q", name)
		}
		rows, err := pool.Query(ctx, expandMacros(t, expandVariables(t, q, values), from, to, 5*time.Minute))
		if err != nil {
			t.Fatalf("variable %s: %v", name, err)
		}
		list, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatalf("variable %s: %v", name, err)
		}
		return list
	}
	if got := choices("provider", nil); !slices.Equal(got, []string{"llmsim"}) {
		t.Errorf("provider choices %v, want [llmsim]", got)
	}
	models := choices("model", map[string][]string{"provider": {"llmsim"}})
	if !slices.Equal(models, []string{"sim-a", "sim-b"}) {
		t.Errorf("model choices %v, want [sim-a sim-b]", models)
	}

	// Every panel, for each model: rows of that model alone.
	for _, model := range models {
		values := map[string][]string{"provider": {"llmsim"}, "model": {model}}
		for _, p := range panels {
			runPanel(t, ctx, pool, p, values, from, to, model)
		}
	}
	// A provider and model with no queries: every panel still runs.
	for _, p := range panels {
		for _, tg := range p.Targets {
			sql := expandMacros(t, expandVariables(t, tg.RawSQL, map[string][]string{"provider": {"extractive"}, "model": {"it's"}}), from, to, 5*time.Minute)
			rows, err := pool.Query(ctx, sql)
			if err == nil {
				n := 0
				for rows.Next() {
					n++
				}
				rows.Close()
				err = rows.Err()
				if err == nil && n != 0 {
					err = fmt.Errorf("%d rows for a model with no queries", n)
				}
			}
			if err != nil {
				t.Errorf("panel %q for an unknown model: %v\n%s", p.Title, err, sql)
			}
		}
	}
}

// TestShareOfTTFTCoversTheIdentity: the "Share of TTFT by stage" panel has a
// column for every part of the TTFT identity, and on queries that have each
// of them its stack adds up to 1 in every bucket.
func TestShareOfTTFTCoversTheIdentity(t *testing.T) {
	t.Parallel()
	panels, _ := loadDashboardAndVariables(t)
	var share *panel
	for i := range panels {
		if panels[i].Title == "Share of TTFT by stage" {
			share = &panels[i]
		}
	}
	if share == nil || len(share.Targets) != 1 {
		t.Fatalf("no single-query panel \"Share of TTFT by stage\"")
	}
	pool := postgrestest.NewPool(t)
	rec := postgres.NewRecorder(pool, postgres.RecorderOptions{Logger: slog.New(slog.DiscardHandler)})
	now := time.Now()
	for i := range 12 {
		rec.Record(record(i, now))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := rec.Close(ctx); err != nil {
		t.Fatal(err)
	}
	values := map[string][]string{"provider": {"llmsim"}, "model": {"sim-a"}}
	sql := expandMacros(t, expandVariables(t, share.Targets[0].RawSQL, values), now.Add(-3*time.Hour), now.Add(time.Minute), 20*time.Minute)
	rows, err := pool.Query(ctx, sql)
	if err != nil {
		t.Fatalf("%v\n%s", err, sql)
	}
	defer rows.Close()
	var cols []string
	for _, f := range rows.FieldDescriptions()[1:] { // after the time
		cols = append(cols, f.Name)
	}
	// The identity's parts: the stages before the first token that are
	// parts on their own, the groups of the others, and what is not a stage.
	want := []string{ragtime.StageAccept, ragtime.StageQueue, "retrieval", ragtime.StageLLMConnect, ragtime.StageLLMPrefill,
		"overhead", "reasoning"}
	if !slices.Equal(cols, want) {
		t.Errorf("the panel's parts %v, want the TTFT identity's %v", cols, want)
	}
	n := 0
	for rows.Next() {
		var at float64 // the bucket's epoch seconds
		shares := make([]*float64, len(cols))
		dest := []any{&at}
		for i := range shares {
			dest = append(dest, &shares[i])
		}
		if err := rows.Scan(dest...); err != nil {
			t.Fatal(err)
		}
		sum := 0.0
		for i, f := range shares {
			if f == nil {
				t.Fatalf("bucket %v: no %s share", at, cols[i])
			}
			sum += *f
		}
		if math.Abs(sum-1) > 0.001 {
			t.Errorf("bucket %v: the shares of %v add up to %.4f, not 1", at, cols, sum)
		}
		n++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatalf("no bucket\n%s", sql)
	}
}

// runPanel runs one panel's SQL with the variables' values and checks that
// it returns rows, the columns its format needs, and no other model's.
func runPanel(t *testing.T, ctx context.Context, pool *pgxpool.Pool, p panel, values map[string][]string, from, to time.Time, model string) {
	t.Helper()
	if p.Datasource.UID != "ragtime-postgres" {
		t.Errorf("panel %q: data source %q, want ragtime-postgres", p.Title, p.Datasource.UID)
	}
	if len(p.Targets) == 0 {
		t.Errorf("panel %q has no query", p.Title)
	}
	for _, tg := range p.Targets {
		if !strings.Contains(tg.RawSQL, "${provider:sqlstring}") || !strings.Contains(tg.RawSQL, "${model:sqlstring}") {
			t.Errorf("panel %q does not filter on the provider and model variables", p.Title)
		}
		sql := expandMacros(t, expandVariables(t, tg.RawSQL, values), from, to, 5*time.Minute)
		rows, err := pool.Query(ctx, sql)
		if err != nil {
			t.Errorf("panel %q: %v\n%s", p.Title, err, sql)
			continue
		}
		var cols []string
		modelCol := -1
		for i, f := range rows.FieldDescriptions() {
			cols = append(cols, f.Name)
			if f.Name == "model" || f.Name == "metric" {
				modelCol = i
			}
		}
		count := 0
		for rows.Next() {
			count++
			if modelCol >= 0 {
				vals, err := rows.Values()
				if err != nil {
					t.Fatal(err)
				}
				if s, _ := vals[modelCol].(string); !strings.HasPrefix(s, model) {
					t.Errorf("panel %q for model %s has a row of %q", p.Title, model, s)
				}
			}
		}
		if err := rows.Err(); err != nil {
			t.Errorf("panel %q: %v\n%s", p.Title, err, sql)
		}
		rows.Close()
		if count == 0 {
			t.Errorf("panel %q returned no rows for model %s\n%s", p.Title, model, sql)
		}
		if tg.Format == "time_series" && (len(cols) == 0 || cols[0] != "time") {
			t.Errorf("panel %q: a time series needs \"time\" first, has %v", p.Title, cols)
		}
		t.Logf("panel %q, model %s: %d rows, columns %v", p.Title, model, count, cols)
	}
}
