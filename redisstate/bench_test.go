package redisstate

import (
	"context"
	"strconv"
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
