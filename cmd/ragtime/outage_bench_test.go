package main

import (
	"fmt"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"ragtime/postgres/postgrestest"
)

// BenchmarkOutage is the load script for a PostgreSQL outage under a steady
// ask rate: a real `ragtime serve` child process answers RAGTIME_OUTAGE_RATE
// asks/s (default 100) over loopback while a TCP proxy cuts PostgreSQL away
// for RAGTIME_OUTAGE (it skips when that is unset), then the proxy returns and the load goes
// on for 10 s while the spool drains. It reports the asks finished (done
// received), the rows in PostgreSQL for them, the spool's peak, and how long
// after the proxy returned the spool was empty (this includes the
// recorder's retry backoff, up to 5 s; BenchmarkSpoolReplay measures the
// replay rate itself); it fails if a finished ask has no row. Bounded in time
// (the outage plus at most 2 minutes) and in flight (64 asks at once).
//
//	make bench-outage OUTAGE=10m
func BenchmarkOutage(b *testing.B) {
	v := os.Getenv("RAGTIME_OUTAGE")
	if v == "" {
		b.Skip("set RAGTIME_OUTAGE (make bench-outage OUTAGE=30s) to run the outage load")
	}
	outage, err := time.ParseDuration(v)
	if err != nil || outage <= 0 || outage > time.Hour {
		b.Fatalf("RAGTIME_OUTAGE=%q: want a duration up to 1h", v)
	}
	rate := 100
	if v := os.Getenv("RAGTIME_OUTAGE_RATE"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 2000 {
			b.Fatalf("RAGTIME_OUTAGE_RATE=%q: want 1..2000 asks/s", v)
		}
		rate = n
	}
	u, pool := testDB(b)
	dataDir := ingestCorpus(b, map[string]string{})
	proxy := postgrestest.NewProxy(b, postgrestest.HostPort(b, u))
	// Load from one client IP: lift the per-caller limits.
	srv := startChild(b, proxy.URL(u), "--data-dir", dataDir, "--rate", "0", "--max-concurrent-per-caller", "64")
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}

	var mu sync.Mutex
	var finished []string
	sent := 0
	inflight := make(chan struct{}, 64)
	var wg sync.WaitGroup
	load := func(d time.Duration) {
		tick := time.NewTicker(time.Second / time.Duration(rate))
		defer tick.Stop()
		end := time.Now().Add(d)
		for time.Now().Before(end) {
			<-tick.C
			select {
			case inflight <- struct{}{}:
			default:
				continue // 64 in flight: the server is behind; do not pile up
			}
			sent++
			n := sent
			wg.Go(func() {
				defer func() { <-inflight }()
				if id, ok := askDone(client, srv.url, fmt.Sprintf("what does prefill read %d", n)); ok {
					mu.Lock()
					finished = append(finished, id)
					mu.Unlock()
				}
			})
		}
	}

	b.ResetTimer()
	proxy.Cut()
	peakBytes, peakRecords := 0.0, 0.0
	stopWatch := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for {
			select {
			case <-stopWatch:
				return
			case <-time.After(time.Second):
			}
			m := scrapeMetrics(b, srv.url)
			peakBytes = max(peakBytes, metricValue(m, "ragtime_spool_bytes"))
			peakRecords = max(peakRecords, metricValue(m, "ragtime_spool_records"))
		}
	}()
	load(outage)
	restored := time.Now()
	proxy.Restore()
	load(10 * time.Second)
	wg.Wait()
	drained := time.Duration(0)
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		m := scrapeMetrics(b, srv.url)
		if metricValue(m, "ragtime_spool_records") == 0 && metricValue(m, "ragtime_recorder_spooling") == 0 {
			drained = time.Since(restored)
			break
		}
	}
	close(stopWatch)
	<-watched
	b.StopTimer()
	var rows int
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if rows = storedCount(b, pool, finished); rows == len(finished) {
			break
		}
	}
	m := scrapeMetrics(b, srv.url)
	b.ReportMetric(float64(sent), "asks-sent")
	b.ReportMetric(float64(len(finished)), "asks-finished")
	b.ReportMetric(float64(rows), "rows-for-finished")
	b.ReportMetric(metricValue(m, "ragtime_recorder_dropped_total"), "dropped")
	b.ReportMetric(peakRecords, "spool-peak-records")
	b.ReportMetric(peakBytes/(1<<20), "spool-peak-MiB")
	b.ReportMetric(drained.Seconds(), "drain-s")
	if rows != len(finished) || drained == 0 {
		b.Errorf("%d asks finished, %d rows in PostgreSQL, drained after %s\nstderr:\n%s", len(finished), rows, drained, srv.stderr.String())
	}
	_ = srv.cmd.Process.Signal(os.Interrupt)
	select {
	case <-srv.exited:
	case <-time.After(30 * time.Second):
	}
}

var metricLine = map[string]*regexp.Regexp{}

// metricValue reads an unlabelled metric's value from a scrape; 0 when
// absent.
func metricValue(scrape, name string) float64 {
	re, ok := metricLine[name]
	if !ok {
		re = regexp.MustCompile(`(?m)^` + name + ` ([0-9.e+-]+)$`)
		metricLine[name] = re
	}
	m := re.FindStringSubmatch(scrape)
	if m == nil {
		return 0
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}
