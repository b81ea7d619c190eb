package postgres

import (
	"testing"
	"time"

	"ragtime"
	"ragtime/pipeline/pipelinetest"
)

// newRow is appendRow on a buffer of its own, the rows one record makes
// (the recorder's writer appends a whole batch into one buffer, encode).
func newRow(rec *ragtime.Record) (row, error) {
	buf, r, q, err := appendRow(make([]byte, 0, 512+192*len(rec.Stages)), rec)
	if err != nil {
		return row{}, err
	}
	r.query, r.stages = buf[:q:q], buf[q:]
	return r, nil
}

// BenchmarkNewRow is the recorder's per-ask encoding: one record of nine
// stages, their attributes the scalars the pipeline sets, turned into the
// rows COPY sends.
//
//	go test -run '^$' -bench BenchmarkNewRow -benchmem ./postgres
func BenchmarkNewRow(b *testing.B) {
	ttft := 43.5
	rec := ragtime.Record{
		QueryID: "7a3ea7a3-3678-4666-9ab1-b1ae4fbf55b7", CreatedAt: time.Now(), Question: "What does a reused keep-alive connection skip?",
		TopK: 4, MaxTokens: 64, MaxContextTokens: 6000, Model: "sim", Provider: "openai", Status: ragtime.StatusOK, UpstreamStatus: 200,
		Stages:  pipelinetest.TypicalStages(),
		Figures: ragtime.Figures{TTFTMs: &ttft, E2EMs: 342.5},
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := newRow(&rec); err != nil {
			b.Fatal(err)
		}
	}
}
