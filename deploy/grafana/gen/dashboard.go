package main

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/table"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"
)

// UID is the dashboard's uid; the provisioned data source's is DatasourceUID.
const (
	UID           = "ragtime-ttft"
	DatasourceUID = "ragtime-postgres"
)

// ModelFilter is the condition every panel's SQL carries: the provider and
// model chosen in the dashboard's variables. sqlstring quotes each value
// (and doubles its quotes), for one value or several.
const ModelFilter = "provider IN (${provider:sqlstring}) AND model IN (${model:sqlstring})"

func ragtimeDS() common.DataSourceRef {
	typ, uid := postgresType, DatasourceUID
	return common.DataSourceRef{Type: &typ, Uid: &uid}
}

// sql fills the %F placeholders of a panel's SQL with ModelFilter.
func sql(s string) string { return strings.ReplaceAll(s, "%F", ModelFilter) }

func pos(x, y, w, h uint32) dashboard.GridPos { return dashboard.GridPos{X: x, Y: y, W: w, H: h} }

// noFooter is a table footer that is off; the SDK's default footer has a
// null reducer, which its own strict reader refuses.
func noFooter() *common.TableFooterOptionsBuilder {
	return common.NewTableFooterOptionsBuilder().Show(false).Reducer([]string{})
}

func unit(u string) dashboard.DynamicConfigValue {
	return dashboard.DynamicConfigValue{Id: "unit", Value: u}
}

// Dashboard builds ragtime's dashboard: where TTFT went, for one provider
// and model at a time (the provider and model variables), so that an
// extractive 3 ms answer and a 150 ms model never share a percentile.
func Dashboard() (dashboard.Dashboard, error) {
	ds := ragtimeDS()
	provider, model, url := variables(ds)
	b := dashboard.NewDashboardBuilder("ragtime: where did TTFT go?").
		Uid(UID).
		Tags([]string{"ragtime", "ttft"}).
		Timezone("browser").
		Editable().
		Refresh("30s").
		Time("now-6h", "now").
		WithVariable(provider).
		WithVariable(model).
		WithVariable(url)
	ttftPanels(b, ds)
	stagePanels(b, ds)
	cacheAndNetworkPanels(b, ds)
	tailPanels(b, ds)

	d, err := b.Build()
	if err != nil {
		return dashboard.Dashboard{}, fmt.Errorf("building the dashboard: %w", err)
	}
	return d, nil
}

// variables are the dashboard's: the provider and the model every panel
// reads, and where ragtime serves (for the slow queries' links).
func variables(ds common.DataSourceRef) (provider, model *dashboard.QueryVariableBuilder, url *dashboard.TextBoxVariableBuilder) {
	provider = dashboard.NewQueryVariableBuilder("provider").
		Label("provider").
		Description("The generator backend whose queries every panel reads (queries.provider).").
		Datasource(ds).
		Query(dashboard.StringOrMap{String: cog.ToPtr("SELECT DISTINCT provider FROM queries WHERE $__timeFilter(created_at) ORDER BY 1")}).
		Refresh(dashboard.VariableRefreshOnTimeRangeChanged).
		Sort(dashboard.VariableSortAlphabeticalAsc)
	model = dashboard.NewQueryVariableBuilder("model").
		Label("model").
		Description("The model whose queries every panel reads (queries.model), among the chosen provider's. One at a time: percentiles over two models describe neither.").
		Datasource(ds).
		Query(dashboard.StringOrMap{String: cog.ToPtr("SELECT DISTINCT model FROM queries WHERE $__timeFilter(created_at) AND provider IN (${provider:sqlstring}) ORDER BY 1")}).
		Refresh(dashboard.VariableRefreshOnTimeRangeChanged).
		Sort(dashboard.VariableSortAlphabeticalAsc)
	url = dashboard.NewTextBoxVariableBuilder("ragtime_url").
		Label("ragtime URL").
		Description("Where ragtime serves its pages; the slow-query ids link to its waterfall.").
		DefaultValue(dashboard.StringOrMap{String: cog.ToPtr("http://localhost:8080")}).
		Current(dashboard.VariableOption{Text: dashboard.StringOrArrayOfString{String: cog.ToPtr("http://localhost:8080")}, Value: dashboard.StringOrArrayOfString{String: cog.ToPtr("http://localhost:8080")}})
	return provider, model, url
}

// ttftPanels are the first row: TTFT's percentiles and its share by stage.
func ttftPanels(b *dashboard.DashboardBuilder, ds common.DataSourceRef) {
	b.WithPanel(timeseries.NewPanelBuilder().Id(1).
		Title("TTFT p50 / p95 / p99").
		Description("Time to first answer token of the chosen model, percentiles per interval. p99 far above p50 (5x or more) is the bimodal signature of head-of-line blocking behind long prefills.").
		Datasource(ds).GridPos(pos(0, 0, 12, 8)).Unit("ms").
		WithTarget(NewSQL("time_series", sql(`SELECT $__timeGroupAlias(created_at, $__interval),
  percentile_cont(0.5) WITHIN GROUP (ORDER BY ttft_ms) AS p50,
  percentile_cont(0.95) WITHIN GROUP (ORDER BY ttft_ms) AS p95,
  percentile_cont(0.99) WITHIN GROUP (ORDER BY ttft_ms) AS p99
FROM queries
WHERE $__timeFilter(created_at) AND ttft_ms IS NOT NULL AND %F
GROUP BY 1
ORDER BY 1`))))

	b.WithPanel(timeseries.NewPanelBuilder().Id(2).
		Title("Share of TTFT by stage").
		Description("Mean share of TTFT per part, over the chosen model's answered queries: " + ttftPartNames() +
			" (retrieval is embed+search+rerank+assemble, overhead the service's own glue, reasoning the model's thinking before its first answer token). The parts add up to TTFT.").
		Datasource(ds).GridPos(pos(12, 0, 12, 8)).Unit("percentunit").Min(0).Max(1).
		DrawStyle(common.GraphDrawStyleBars).FillOpacity(70).LineWidth(0).
		Stacking(common.NewStackingConfigBuilder().Mode(common.StackingModeNormal).Group("A")).
		WithTarget(NewSQL("time_series", sql(`SELECT $__timeGroupAlias(created_at, $__interval),
`+ttftShareColumns()+`
FROM queries
WHERE $__timeFilter(created_at) AND ttft_ms IS NOT NULL AND %F
GROUP BY 1
ORDER BY 1`))))
}

// stagePanels are the second row: the stages' percentiles and the top-k
// trade-off.
func stagePanels(b *dashboard.DashboardBuilder, ds common.DataSourceRef) {
	b.WithPanel(table.NewPanelBuilder().Id(3).Footer(noFooter()).
		Title("Stage percentiles").
		Description("stage_percentiles(since) for the chosen model: per stage, count and p50/p90/p95/p99/max milliseconds since the start of the time range.").
		Datasource(ds).GridPos(pos(0, 8, 12, 8)).Unit("ms").
		OverrideByName("n", []dashboard.DynamicConfigValue{unit("none")}).
		WithTarget(NewSQL("table", sql(`SELECT stage, n, p50_ms, p90_ms, p95_ms, p99_ms, max_ms
FROM stage_percentiles($__timeFrom())
WHERE %F`))))

	b.WithPanel(table.NewPanelBuilder().Id(4).Footer(noFooter()).
		Title("Top-k trade-off").
		Description("topk_tradeoff(since) for the chosen model: per top_k, TTFT p50/p95, retrieval p50, llm_prefill p50 (ms), mean prompt tokens and mean retrieval share over ok queries.").
		Datasource(ds).GridPos(pos(12, 8, 12, 8)).Unit("ms").
		OverrideByRegexp("top_k|queries|ok|prompt_tokens_mean", []dashboard.DynamicConfigValue{unit("none")}).
		OverrideByName("retrieval_share_mean", []dashboard.DynamicConfigValue{unit("percentunit")}).
		WithTarget(NewSQL("table", sql(`SELECT top_k, queries, ok, ttft_p50_ms, ttft_p95_ms, retrieval_p50_ms, llm_prefill_p50_ms,
  prompt_tokens_mean, retrieval_share_mean
FROM topk_tradeoff($__timeFrom())
WHERE %F
ORDER BY top_k`))))
}

// cacheAndNetworkPanels are the third row: the prefix cache's hit rate and
// the connections to the model.
func cacheAndNetworkPanels(b *dashboard.DashboardBuilder, ds common.DataSourceRef) {
	b.WithPanel(timeseries.NewPanelBuilder().Id(5).
		Title("Prefix-cache hit rate").
		Description("cache_hit_rate for the chosen model, per hour: prompt tokens served from the provider's prefix cache over the prompt tokens of the queries whose provider reports cached tokens (Ollama does not: no point, unknown rather than 0 %). Round-robin across replicas dilutes it.").
		Datasource(ds).GridPos(pos(0, 16, 8, 8)).Unit("percentunit").Min(0).Max(1).
		WithTarget(NewSQL("time_series", sql(`SELECT hour AS time, model AS metric, hit_rate
FROM cache_hit_rate
WHERE $__timeFilter(hour) AND %F
ORDER BY 1`))))

	b.WithPanel(timeseries.NewPanelBuilder().Id(6).
		Title("Network health: reused connections").
		Description("network_health for the chosen model, per hour: the share of LLM calls that reused a keep-alive connection (a new one pays DNS+TCP+TLS). Empty for extractive, which answers in-process.").
		Datasource(ds).GridPos(pos(8, 16, 8, 8)).Unit("percentunit").Min(0).Max(1).
		WithTarget(NewSQL("time_series", sql(`SELECT hour AS time, model AS metric, reused_share
FROM network_health
WHERE $__timeFilter(hour) AND %F
ORDER BY 1`))))

	b.WithPanel(timeseries.NewPanelBuilder().Id(7).
		Title("Network health: llm_connect p95").
		Description("network_health for the chosen model, per hour: llm_connect p95 over all calls and over new connections only. Empty for extractive, which answers in-process.").
		Datasource(ds).GridPos(pos(16, 16, 8, 8)).Unit("ms").
		WithTarget(NewSQL("time_series", sql(`SELECT hour AS time, model || ' all' AS metric, llm_connect_p95_ms AS value
FROM network_health
WHERE $__timeFilter(hour) AND %F
UNION ALL
SELECT hour, model || ' new connections', new_conn_connect_p95_ms
FROM network_health
WHERE $__timeFilter(hour) AND new_conn_connect_p95_ms IS NOT NULL AND %F
ORDER BY 1`))))
}

// tailPanels are the last rows: TTFT's tail by hour and the slowest
// queries.
func tailPanels(b *dashboard.DashboardBuilder, ds common.DataSourceRef) {
	b.WithPanel(table.NewPanelBuilder().Id(8).Footer(noFooter()).
		Title("TTFT tail by hour").
		Description("ttft_tail for the chosen model: TTFT p50/p95/p99 per hour and p99/p50; 5 or more is the bimodal signature.").
		Datasource(ds).GridPos(pos(0, 24, 24, 8)).Unit("ms").
		OverrideByRegexp("answered|p99_over_p50", []dashboard.DynamicConfigValue{unit("none"), {Id: "decimals", Value: 1}}).
		OverrideByName("p99_over_p50", []dashboard.DynamicConfigValue{
			{Id: "thresholds", Value: map[string]any{"mode": "absolute", "steps": []any{
				map[string]any{"color": "green", "value": nil}, map[string]any{"color": "red", "value": 5}}}},
			{Id: "custom.cellOptions", Value: map[string]any{"type": "color-text"}},
		}).
		WithTarget(NewSQL("table", sql(`SELECT hour AS time, provider, model, answered, ttft_p50_ms, ttft_p95_ms, ttft_p99_ms, p99_over_p50
FROM ttft_tail
WHERE $__timeFilter(hour) AND %F
ORDER BY hour DESC`))))

	b.WithPanel(table.NewPanelBuilder().Id(9).Footer(noFooter()).
		Title("Slowest queries").
		Description("slow_queries for the chosen model: the slowest queries of the time range with the stage that dominated each. The query_id opens ragtime's waterfall page (set the ragtime_url variable to where ragtime serves).").
		Datasource(ds).GridPos(pos(0, 32, 24, 10)).Unit("ms").
		OverrideByName("query_id", []dashboard.DynamicConfigValue{{Id: "links", Value: []any{
			map[string]any{"title": "waterfall", "url": "${ragtime_url}/queries/${__value.raw}", "targetBlank": true}}}}).
		OverrideByName("top_k", []dashboard.DynamicConfigValue{unit("none")}).
		WithTarget(NewSQL("table", sql(`SELECT created_at AS time, query_id, ttft_ms, dominant_stage, dominant_ms, top_k, model, status, question
FROM slow_queries
WHERE $__timeFilter(created_at) AND %F
ORDER BY ttft_ms DESC NULLS LAST
LIMIT 20`))))
}

// DashboardJSON is Dashboard as the JSON file Grafana provisions: indented,
// with a final newline.
func DashboardJSON() ([]byte, error) {
	d, err := Dashboard()
	if err != nil {
		return nil, err
	}
	b, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encoding the dashboard: %w", err)
	}
	return append(b, '\n'), nil
}

// TTFTParts are the parts of the TTFT identity (docs/design.md), in
// pipeline order, each with its share of one query's TTFT from the columns
// of queries: ttft_ms = accept_ms + queue_ms + retrieval_ms +
// llm_connect + llm_prefill_ms + overhead_ms + reasoning_ms.
var TTFTParts = []struct{ Name, Share string }{
	{"accept", "accept_ms / nullif(ttft_ms, 0)"},
	{"queue", "queue_ms / nullif(ttft_ms, 0)"},
	{"retrieval", "retrieval_share"},
	{"llm_connect", "(gen_ttft_ms - llm_prefill_ms) / nullif(ttft_ms, 0)"},
	{"llm_prefill", "prefill_share"},
	{"overhead", "overhead_ms / nullif(ttft_ms, 0)"},
	{"reasoning", "reasoning_ms / nullif(ttft_ms, 0)"},
}

// ttftShareColumns is one mean share column per TTFT part, named after it.
func ttftShareColumns() string {
	cols := make([]string, len(TTFTParts))
	for i, p := range TTFTParts {
		cols[i] = "  avg(" + p.Share + ") AS " + p.Name
	}
	return strings.Join(cols, ",\n")
}

// ttftPartNames lists the parts' names for a description.
func ttftPartNames() string {
	names := make([]string, len(TTFTParts))
	for i, p := range TTFTParts {
		names[i] = p.Name
	}
	return strings.Join(names, ", ")
}
