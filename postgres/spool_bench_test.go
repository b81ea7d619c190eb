package postgres_test

import (
	"encoding/json"
	"testing"
	"time"

	"ragtime/internal/spool"
	"ragtime/postgres"
	"ragtime/postgres/postgrestest"
)

// BenchmarkRecordWhileSpooling measures what the request path pays per
// Record while PostgreSQL is away: the record's JSON encoding and its
// framed append to the spool file (fsync batched every 100ms, off this
// path). Run with a fixed count, e.g. -benchtime 10000x, to bound the disk
// it takes.
func BenchmarkRecordWhileSpooling(b *testing.B) {
	u := postgrestest.NewDatabase(b)
	proxy := postgrestest.NewProxy(b, postgrestest.HostPort(b, u))
	pool, err := postgres.NewPool(proxy.URL(u))
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	proxy.Cut()
	sp, err := spool.Open(b.TempDir(), spool.Options{MaxBytes: 16 << 30, Logger: quietLogger()})
	if err != nil {
		b.Fatal(err)
	}
	defer sp.Close()
	rec := postgres.NewRecorder(pool, postgres.RecorderOptions{FlushInterval: time.Millisecond, Logger: quietLogger(), Spool: sp})
	defer func() { proxy.Restore(); _ = rec.Close(b.Context()) }()
	rec.Record(record(0))
	for !rec.Stats().Spooling {
		time.Sleep(time.Millisecond)
	}
	r := record(1)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		rec.Record(r)
	}
	b.StopTimer()
	st := rec.Stats()
	if st.Dropped != 0 {
		b.Fatalf("Stats = %+v: dropped while spooling", st)
	}
	b.ReportMetric(float64(st.Spool.Bytes)/float64(st.Spool.Records), "spool-bytes/record")
}

// BenchmarkSpoolReplay measures how fast a spool left by an outage drains
// into PostgreSQL: b.N records (8 stages each) are spooled beforehand, and
// the clock runs from the recorder's start to the last one committed.
func BenchmarkSpoolReplay(b *testing.B) {
	pool := postgrestest.NewPool(b)
	dir := b.TempDir()
	sp, err := spool.Open(dir, spool.Options{MaxBytes: 16 << 30, Logger: quietLogger()})
	if err != nil {
		b.Fatal(err)
	}
	for i := range b.N {
		r := record(i)
		data, err := json.Marshal(r)
		if err != nil {
			b.Fatal(err)
		}
		if err := sp.Append(data, r.CreatedAt); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	start := time.Now()
	rec := postgres.NewRecorder(pool, postgres.RecorderOptions{Logger: quietLogger(), Spool: sp})
	for rec.Stats().Written < int64(b.N) {
		time.Sleep(time.Millisecond)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	if err := rec.Close(b.Context()); err != nil {
		b.Fatal(err)
	}
	_ = sp.Close()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "records/s")
}
