package postgres_test

import (
	"context"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"ragtime"
	"ragtime/postgres"
	"ragtime/postgres/postgrestest"
)

// BenchmarkRecorder measures records written per second into PostgreSQL
// (records with 8 stages and attrs), from the first Record to Close
// returning with everything committed. Beside records/s, which follows the
// machine's load, it reports the CPU spent per record by this process
// (go-µs/rec) and by the PostgreSQL backends serving its connections
// (pg-µs/rec, read from /proc when PostgreSQL runs on this machine): their
// sum bounds the rate two idle cores could reach.
//
// The batch=N cases write the test records of 2025-03-01, 1.23 s apart,
// with random (v4) ids: the default partition, and a batch of 256 spans
// five minutes of roll-up rows. live/batch=256 writes them as a live
// stream at 20,000 records/s would: stamped from now on, 50 µs apart, with
// time-ordered (v7) ids, into today's partition and one minute's roll-ups;
// live-spread/batch=32 as serve writes them at a steady pace (below).
func BenchmarkRecorder(b *testing.B) {
	for _, batch := range []int{64, 256, 1024} {
		b.Run("batch="+strconv.Itoa(batch), func(b *testing.B) { benchRecorder(b, batch, record) })
	}
	// Small batches of live records whose durations spread over hundreds
	// of buckets, as serve writes them at a steady pace of some 150 a
	// second (a batch each 200 ms): per record, the batch's fixed work and
	// the upsert of wide minute and hour roll-up rows dominate.
	b.Run("live-spread/batch=32", func(b *testing.B) {
		start := time.Now()
		rng := rand.New(rand.NewPCG(3, 3))
		benchRecorder(b, 32, func(i int) ragtime.Record {
			r := record(i)
			r.CreatedAt = start.Add(time.Duration(i) * 50 * time.Microsecond)
			r.QueryID = uuidV7(r.CreatedAt)
			for j := range r.Stages {
				r.Stages[j].DurationMs *= math.Exp(2 * rng.NormFloat64())
			}
			return r
		})
	})
	b.Run("live/batch=256", func(b *testing.B) {
		start := time.Now()
		benchRecorder(b, 256, func(i int) ragtime.Record {
			r := record(i)
			r.CreatedAt = start.Add(time.Duration(i) * 50 * time.Microsecond)
			r.QueryID = uuidV7(r.CreatedAt)
			return r
		})
	})
}

// uuidV7 is a random UUIDv7 whose time is t, as pipeline.NewQueryID makes
// for a query at t.
func uuidV7(t time.Time) string {
	id := uuid.New()
	ms := uint64(t.UnixMilli())
	for i := range 6 {
		id[i] = byte(ms >> (40 - 8*i))
	}
	id[6] = 0x70 | id[6]&0x0f
	return id.String()
}

func benchRecorder(b *testing.B, batch int, record func(int) ragtime.Record) {
	pool := postgrestest.NewPool(b)
	recs := make([]ragtime.Record, b.N)
	for i := range recs {
		recs[i] = record(i)
	}
	rec := postgres.NewRecorder(pool, postgres.RecorderOptions{
		QueueSize: b.N + 1, BatchSize: batch, Logger: quietLogger(),
	})
	// The backends are listed from a connection of their own: one taken
	// from pool would leave itself (a writer's backend) out.
	probe, err := pgx.ConnectConfig(b.Context(), pool.Config().ConnConfig.Copy())
	if err != nil {
		b.Fatal(err)
	}
	defer probe.Close(context.Background())
	pgBefore := backendCPU(b.Context(), probe)
	goBefore := processCPU()
	b.ResetTimer()
	start := time.Now()
	for i := range recs {
		rec.Record(recs[i])
	}
	if err := rec.Close(b.Context()); err != nil {
		b.Fatal(err)
	}
	elapsed := time.Since(start)
	goCPU := processCPU() - goBefore
	b.StopTimer()
	if st := rec.Stats(); st.Written != int64(b.N) {
		b.Fatalf("Stats = %+v, want %d written", st, b.N)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "records/s")
	b.ReportMetric(float64(goCPU.Microseconds())/float64(b.N), "go-µs/rec")
	if pgBefore != nil {
		var pgCPU time.Duration
		for pid, after := range backendCPU(b.Context(), probe) {
			pgCPU += after - pgBefore[pid]
		}
		b.ReportMetric(float64(pgCPU.Microseconds())/float64(b.N), "pg-µs/rec")
	}
}

// BenchmarkEncodeBatch measures the recorder's Go side alone, without
// PostgreSQL: turning a batch of 256 records into COPY rows and the
// roll-up upsert's arguments. cpu-µs/rec (this process's CPU per record)
// and allocs/op do not depend on how much of the machine it gets.
func BenchmarkEncodeBatch(b *testing.B) {
	recs := make([]ragtime.Record, 256)
	for i := range recs {
		recs[i] = record(i)
	}
	b.ReportAllocs()
	cpu := processCPU()
	for b.Loop() {
		if err := postgres.EncodeBatch(recs); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64((processCPU()-cpu).Nanoseconds())/1e3/float64(b.N*len(recs)), "cpu-µs/rec")
}

// processCPU is the CPU time (user and system) this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// backendCPU returns the CPU time each other PostgreSQL backend connected
// to probe's database has used, by pid, from /proc/PID/schedstat; nil when
// PostgreSQL is not on this machine (or /proc is not readable). Backends
// that exit between two calls are not counted: the pool keeps its
// connections until it is closed.
func backendCPU(ctx context.Context, probe *pgx.Conn) map[int]time.Duration {
	rows, err := probe.Query(ctx, "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND backend_type = 'client backend' AND pid <> pg_backend_pid()")
	if err != nil {
		return nil
	}
	defer rows.Close()
	cpu := make(map[int]time.Duration)
	for rows.Next() {
		var pid int
		if err := rows.Scan(&pid); err != nil {
			return nil
		}
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/schedstat")
		if err != nil {
			return nil
		}
		ns, err := strconv.ParseInt(strings.Fields(string(b))[0], 10, 64)
		if err != nil {
			return nil
		}
		cpu[pid] = time.Duration(ns)
	}
	if rows.Err() != nil {
		return nil
	}
	return cpu
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
