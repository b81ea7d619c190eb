package postgres_test

import (
	"strconv"
	"testing"
	"time"

	"ragtime/pipeline"
	"ragtime/postgres"
	"ragtime/postgres/postgrestest"
)

// BenchmarkRecorder measures records written per second into PostgreSQL
// (records with 8 stages and attrs), from the first Record to Close
// returning with everything committed.
func BenchmarkRecorder(b *testing.B) {
	for _, batch := range []int{64, 256, 1024} {
		b.Run("batch="+strconv.Itoa(batch), func(b *testing.B) {
			pool := postgrestest.NewPool(b)
			recs := make([]pipeline.Record, b.N)
			for i := range recs {
				recs[i] = record(i)
			}
			rec := postgres.NewRecorder(pool, postgres.RecorderOptions{
				QueueSize: b.N + 1, BatchSize: batch, Logger: quietLogger(),
			})
			b.ResetTimer()
			start := time.Now()
			for i := range recs {
				rec.Record(recs[i])
			}
			if err := rec.Close(b.Context()); err != nil {
				b.Fatal(err)
			}
			elapsed := time.Since(start)
			b.StopTimer()
			if st := rec.Stats(); st.Written != int64(b.N) {
				b.Fatalf("Stats = %+v, want %d written", st, b.N)
			}
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "records/s")
		})
	}
}

// BenchmarkRecord measures what the request path pays: one Record call.
func BenchmarkRecord(b *testing.B) {
	pool := postgrestest.NewPool(b)
	rec := postgres.NewRecorder(pool, postgres.RecorderOptions{QueueSize: 1 << 20, Logger: quietLogger()})
	r := record(1)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			rec.Record(r)
		}
	})
	b.StopTimer()
	_ = rec.Close(b.Context())
}
