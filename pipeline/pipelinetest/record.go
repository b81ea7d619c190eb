package pipelinetest

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"ragtime"
)

// FullRecord returns a ragtime.Record whose every field (those of Figures
// and Usage included) holds a distinct non-zero value that survives a trip
// through JSON and PostgreSQL unchanged: ids are UUIDs (sweepID is used for
// SweepID, which must name a stored sweep when the record is stored),
// Status is ok, CreatedAt is in UTC at microsecond resolution, and stage
// attrs hold what JSON decoding yields. It panics on a field kind it does
// not know how to fill, so that a new kind of field is noticed.
func FullRecord(sweepID string) ragtime.Record {
	var rec ragtime.Record
	n := 0
	fill(reflect.ValueOf(&rec).Elem(), &n)
	rec.QueryID = uuid.NewString()
	rec.SweepID = sweepID
	rec.Status = ragtime.StatusOK
	rec.Retrieval = ragtime.RetrievalLexical // the column checks the mode
	rec.QuestionSHA256 = strings.Repeat("5e", 32)
	rec.TraceID = strings.Repeat("7a", 16) // 32 hex digits, as the column checks
	rec.CreatedAt = time.Date(2025, 3, 1, 12, 0, 0, 123456000, time.UTC)
	rec.Stages = []ragtime.Span{
		{Name: ragtime.StageEmbed, Seq: 0, StartMs: 0.5, DurationMs: 1.25, Attrs: map[string]any{"dim": 384.0}},
		{Name: ragtime.StageSearch, Seq: 1, StartMs: 1.75, DurationMs: 2.5, Attrs: map[string]any{"store": "embedded"}},
	}
	return rec
}

// fill sets every settable leaf of v to a value derived from a counter.
func fill(v reflect.Value, n *int) {
	if v.Type() == reflect.TypeFor[time.Time]() || v.Type() == reflect.TypeFor[[]ragtime.Span]() {
		return // set by FullRecord
	}
	*n++
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			f := v.Type().Field(i)
			switch {
			case !f.IsExported():
			case f.Type.Kind() == reflect.String && slices.Contains(strings.Split(f.Tag.Get("db"), ","), "uuid"):
				v.Field(i).SetString(uuid.NewString()) // a uuid column takes nothing else
			default:
				fill(v.Field(i), n)
			}
		}
	case reflect.String:
		v.SetString(fmt.Sprintf("%s-%d", strings.ToLower(v.Type().Name()), *n))
	case reflect.Int, reflect.Int32, reflect.Int64:
		v.SetInt(int64(*n))
	case reflect.Float64:
		v.SetFloat(float64(*n) + 0.25)
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		fill(p.Elem(), n)
		v.Set(p)
	default:
		panic(fmt.Sprintf("pipelinetest: cannot fill a %s field of ragtime.Record; teach FullRecord", v.Type()))
	}
}

// TypicalStages is the stages of one answered ask as serve records them
// (OpenAI-compatible embedder and model, embedded store, 64 tokens, no
// rerank), for benchmarks of what frames or stores a record: the attrs
// carry the kinds of values the pipeline sets.
func TypicalStages() []ragtime.Span {
	return []ragtime.Span{
		{Name: ragtime.StageAccept, Seq: 0, DurationMs: 0.052},
		{Name: ragtime.StageQueue, Seq: 1, StartMs: 0.052, Attrs: map[string]any{"limit": 0}},
		{Name: ragtime.StageEmbed, Seq: 2, StartMs: 0.211, DurationMs: 5.9, Attrs: map[string]any{"dim": 512, "embedder": "openai:sim-embed", "reused": true, "dns_ms": 0.0, "connect_ms": 0.0, "tls_ms": 0.0, "retries": 0}},
		{Name: ragtime.StageSearch, Seq: 3, StartMs: 6.2, DurationMs: 0.3, Attrs: map[string]any{"hits": 4, "k": 4, "store": "embedded"}},
		{Name: ragtime.StageAssemble, Seq: 4, StartMs: 6.5, DurationMs: 0.2, Attrs: map[string]any{"chunks": 4, "context_tokens": 316, "dropped": 0, "prompt_tokens": 381}},
		{Name: ragtime.StageLLMConnect, Seq: 5, StartMs: 6.8, Attrs: map[string]any{"connect_ms": 0.0, "dns_ms": 0.0, "reused": true, "tls_ms": 0.0}},
		{Name: ragtime.StageLLMPrefill, Seq: 6, StartMs: 6.8, DurationMs: 15.2, Attrs: map[string]any{"status": 200}},
		{Name: ragtime.StageLLMDecode, Seq: 7, StartMs: 22.0, DurationMs: 320.5, Attrs: map[string]any{"chunks": 64, "completion_tokens": 64, "itl_p50_ms": 5.01, "itl_p95_ms": 5.9, "itl_max_ms": 9.3}},
	}
}
