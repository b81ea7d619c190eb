package redisstate

import (
	"context"
	"os"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"ragtime/admission"
	"ragtime/auth"
	"ragtime/redisstate/redistest"
)

// BenchmarkAdmitRoundTrips is what an ask's admission adds with
// --redis-url on loopback: a take from its caller's bucket and a lease of
// one of its streams, given back (the ask's queue stage's redis_ms).
func BenchmarkAdmitRoundTrips(b *testing.B) {
	s := open(b, redistest.URL(b), Options{})
	ctx := context.Background()
	r := auth.Rate{N: 1 << 30, Per: time.Second}
	b.ReportAllocs()
	for b.Loop() {
		if d, err := s.Take(ctx, "key:bench", r, 1<<30); err != nil || d != 0 {
			b.Fatal(d, err)
		}
		release, err := s.Lease(ctx, "streams:key:bench", 1<<20)
		if err != nil || release == nil {
			b.Fatal(err)
		}
		release()
	}
}

// BenchmarkAdmit is the same admission in one round trip (Admit: the
// take and both leases in one script), given back in one more.
func BenchmarkAdmit(b *testing.B) {
	s := open(b, redistest.URL(b), Options{})
	ctx := context.Background()
	ask := admission.SharedAsk{RateKey: "key:bench", Rate: auth.Rate{N: 1 << 30, Per: time.Second}, Burst: 1 << 30,
		Leases: []admission.SharedLease{{Key: "streams:key:bench", Limit: 1 << 20}, {Key: "backend:bench", Limit: 1 << 20}}}
	b.ReportAllocs()
	for b.Loop() {
		g, err := s.Admit(ctx, ask)
		if err != nil || g.Retry != 0 || g.Release == nil {
			b.Fatal(g, err)
		}
		g.Release()
	}
}

// BenchmarkPublish is a 64-token answer's ~75 events handed to the stream
// writer (the ask's own cost; the writer sends them in batches).
func BenchmarkPublish(b *testing.B) {
	s := open(b, redistest.URL(b), Options{})
	frame := []byte("id: 0193f0a0-0000-7000-8000-000000000000:12\nevent: token\ndata: {\"text\":\" word\"}\n\n")
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		add, end := s.Publish("q"+strconv.Itoa(i), "")
		for seq := range 75 {
			add(seq, frame)
		}
		end()
		i++
	}
}

// BenchmarkAdmitPaced is what --redis-url adds to an ask's admission, as
// asks arrive one at a time, paced (a millisecond apart, or ADMIT_PACE,
// e.g. 300ms for the peer benchmark's one stream): the same
// admission.Controller with every limit on (a caller's rate and
// concurrency, the backend's streams), without Shared (local) and with
// this Store (redis). It reports the admission's latency (the ask's queue
// stage, which adds to its TTFT) at p50 and p99, and the process's CPU per
// ask, admission and release (from getrusage; Redis's own is another
// process's).
func BenchmarkAdmitPaced(b *testing.B) {
	url := redistest.URL(b)
	pace := time.Millisecond
	if v := os.Getenv("ADMIT_PACE"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			b.Fatalf("ADMIT_PACE: %v", err)
		}
		pace = d
	}
	for _, mode := range []string{"local", "redis"} {
		b.Run(mode, func(b *testing.B) {
			cfg := admission.Config{MaxStreams: 64, MaxWait: time.Second, Backend: "bench", BackendStreams: 1 << 20}
			if mode == "redis" {
				cfg.Shared = open(b, url, Options{})
			}
			c, err := admission.New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			who := admission.Caller{ID: "key:bench", Limits: admission.Limits{Concurrent: 1 << 20, Rate: auth.Rate{N: 1 << 30, Per: time.Second}}}
			ctx := context.Background()
			lat := make([]time.Duration, 0, b.N)
			cpu0 := cpuTime(b)
			for b.Loop() {
				start := time.Now()
				t, err := c.Admit(ctx, who)
				lat = append(lat, time.Since(start))
				if err != nil {
					b.Fatal(err)
				}
				t.Release()
				time.Sleep(pace)
			}
			cpu := cpuTime(b) - cpu0
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1e3, "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds())/1e3, "p99-µs")
			b.ReportMetric(float64(cpu.Nanoseconds())/1e3/float64(len(lat)), "cpu-µs/ask")
		})
	}
}

// cpuTime is the process's CPU time so far, user and system.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
