package postgres

import (
	"testing"
	"time"

	"ragtime/pipeline"
)

// BenchmarkNewRow is the recorder's per-ask encoding inside serve: one
// record of nine stages, their attributes the scalars the pipeline sets,
// turned into the rows COPY sends.
//
//	go test -run '^$' -bench BenchmarkNewRow -benchmem ./postgres
func BenchmarkNewRow(b *testing.B) {
	ttft := 43.5
	rec := pipeline.Record{
		QueryID: "7a3ea7a3-3678-4666-9ab1-b1ae4fbf55b7", CreatedAt: time.Now(), Question: "What does a reused keep-alive connection skip?",
		TopK: 4, MaxTokens: 64, MaxContextTokens: 6000, Model: "sim", Provider: "openai", Status: pipeline.StatusOK, UpstreamStatus: 200,
		Stages: []pipeline.Span{
			{Name: pipeline.StageAccept, Seq: 0, DurationMs: 0.052},
			{Name: pipeline.StageQueue, Seq: 1, StartMs: 0.052, Attrs: map[string]any{"limit": 0}},
			{Name: pipeline.StageEmbed, Seq: 2, StartMs: 0.211, DurationMs: 5.9, Attrs: map[string]any{"dim": 512, "embedder": "openai:sim-embed", "reused": true, "dns_ms": 0.0, "connect_ms": 0.0, "tls_ms": 0.0, "retries": 0}},
			{Name: pipeline.StageSearch, Seq: 3, StartMs: 6.2, DurationMs: 0.3, Attrs: map[string]any{"hits": 4, "k": 4, "store": "embedded"}},
			{Name: pipeline.StageAssemble, Seq: 4, StartMs: 6.5, DurationMs: 0.2, Attrs: map[string]any{"chunks": 4, "context_tokens": 316, "dropped": 0, "prompt_tokens": 381}},
			{Name: pipeline.StageLLMConnect, Seq: 5, StartMs: 6.8, Attrs: map[string]any{"connect_ms": 0.0, "dns_ms": 0.0, "reused": true, "tls_ms": 0.0}},
			{Name: pipeline.StageLLMPrefill, Seq: 6, StartMs: 6.8, DurationMs: 15.2, Attrs: map[string]any{"status": 200}},
			{Name: pipeline.StageLLMDecode, Seq: 7, StartMs: 22.0, DurationMs: 320.5, Attrs: map[string]any{"chunks": 64, "completion_tokens": 64, "itl_p50_ms": 5.01, "itl_p95_ms": 5.9, "itl_max_ms": 9.3}},
		},
		Figures: pipeline.Figures{TTFTMs: &ttft, E2EMs: 342.5},
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := newRow(rec); err != nil {
			b.Fatal(err)
		}
	}
}
