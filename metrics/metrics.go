package metrics

import (
	"net/http"
	"regexp"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"ragtime"
	"ragtime/admission"
	"ragtime/embedcache"
	"ragtime/redisstate"
	"ragtime/tracing"
)

// Buckets, in seconds.
var (
	// stageBuckets span a 100µs embed to a minute-long decode.
	stageBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}
	// ttftBuckets are vLLM's time-to-first-token buckets, so that panels
	// built for vLLM read ragtime's too.
	ttftBuckets  = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}
	shareBuckets = prometheus.LinearBuckets(0.1, 0.1, 10)
)

// RecorderStats is what reports the recorder's queue; *postgres.Recorder
// implements it.
type RecorderStats interface {
	Stats() ragtime.RecorderStats
}

// Metrics holds ragtime's Prometheus registry and its instruments.
type Metrics struct {
	reg        *prometheus.Registry
	stage      *prometheus.HistogramVec
	ttft       prometheus.Histogram
	firstToken prometheus.Histogram
	e2e        prometheus.Histogram
	share      prometheus.Histogram
	overhead   prometheus.Histogram
	queries    *prometheus.CounterVec
	errors     *prometheus.CounterVec
	tokens     *prometheus.CounterVec
}

// New builds the registry: ragtime's instruments, the recorder's counters
// read from rec at scrape time (none when rec is nil), and the standard Go
// and process collectors.
func New(rec RecorderStats) *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		stage: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "ragtime_stage_duration_seconds",
			Help:    "Duration of each pipeline stage (accept, queue, embed, search, rerank, assemble, llm_connect, llm_prefill, llm_decode).",
			Buckets: stageBuckets,
		}, []string{"stage"}),
		ttft: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "ragtime_ttft_seconds",
			Help:    "Time from an /ask request's arrival (its first byte at the socket) to its first answer token flushed to the client (reasoning excluded).",
			Buckets: ttftBuckets,
		}),
		firstToken: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "ragtime_first_token_seconds",
			Help:    "Time from an /ask request's arrival to its first token of any kind (reasoning included) flushed to the client.",
			Buckets: ttftBuckets,
		}),
		e2e: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "ragtime_request_duration_seconds",
			Help:    "Time from an /ask request's arrival to its stream closing.",
			Buckets: ttftBuckets,
		}),
		share: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "ragtime_retrieval_share",
			Help:    "Fraction of TTFT spent in retrieval (embed + search + rerank + assemble), per answered query.",
			Buckets: shareBuckets,
		}),
		overhead: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "ragtime_overhead_seconds",
			Help: "ragtime's own share of each answered query's time to first token (overhead_ms: writing events, building the request, goroutine wake-ups). " +
				"Read it beside go_sched_latencies_seconds: a high overhead p99 while goroutines wait long to run is CPU starvation, not ragtime's code.",
			Buckets: stageBuckets,
		}),
		queries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ragtime_queries_total",
			Help: "Finished /ask queries by status (ok, error, cancelled).",
		}, []string{"status"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ragtime_query_errors_total",
			Help: "Failed or cancelled /ask queries by error code (llm_auth, llm_unavailable, cancelled, ...).",
		}, []string{"code"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ragtime_tokens_total",
			Help: "Tokens by type: prompt, completion, cached (prompt tokens served from the prefix cache), reasoning.",
		}, []string{"type"}),
	}
	m.reg.MustRegister(m.stage, m.ttft, m.firstToken, m.e2e, m.share, m.overhead, m.queries, m.errors, m.tokens,
		SchedLatencies(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	for _, s := range []string{ragtime.StatusOK, ragtime.StatusError, ragtime.StatusCancelled} {
		m.queries.WithLabelValues(s) // present at 0 from the start, so rate() sees the first one
	}
	if rec != nil {
		m.registerRecorder(rec)
	}
	return m
}

// registerRecorder exports the recorder's counters, read at scrape time.
func (m *Metrics) registerRecorder(rec RecorderStats) {
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "ragtime_recorder_queue_depth",
			Help: "Finished queries held in memory, waiting for or being written to PostgreSQL.",
		}, func() float64 { return float64(rec.Stats().Queued) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "ragtime_recorder_written_total",
			Help: "Finished queries committed to PostgreSQL.",
		}, func() float64 { return float64(rec.Stats().Written) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "ragtime_recorder_retries_total",
			Help: "Batch writes retried because PostgreSQL was away or failing.",
		}, func() float64 { return float64(rec.Stats().Retries) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "ragtime_recorder_dropped_total",
			Help: "Finished queries lost: the queue was full, or shutdown's deadline passed before they were written.",
		}, func() float64 { return float64(rec.Stats().Dropped) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "ragtime_recorder_failed_total",
			Help: "Finished queries PostgreSQL rejected as invalid (logged and skipped).",
		}, func() float64 { return float64(rec.Stats().Failed) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "ragtime_recorder_spooling",
			Help: "1 while finished queries go to the disk spool (PostgreSQL away or the memory queue full), else 0.",
		}, func() float64 {
			if rec.Stats().Spooling {
				return 1
			}
			return 0
		}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "ragtime_recorder_spooled_total",
			Help: "Finished queries written to the disk spool.",
		}, func() float64 { return float64(rec.Stats().Spooled) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "ragtime_recorder_replayed_total",
			Help: "Spooled queries settled from the spool into PostgreSQL (written, or rejected as invalid).",
		}, func() float64 { return float64(rec.Stats().Replayed) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "ragtime_spool_bytes",
			Help: "Size of the disk spool's segment files (bounded by --spool-max-bytes).",
		}, func() float64 { return float64(rec.Stats().Spool.Bytes) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "ragtime_spool_records",
			Help: "Finished queries in the disk spool, waiting to be written to PostgreSQL.",
		}, func() float64 { return float64(rec.Stats().Spool.Records) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "ragtime_spool_oldest_age_seconds",
			Help: "Age of the oldest finished query in the disk spool; 0 when it is empty.",
		}, func() float64 { return rec.Stats().Spool.OldestAgeSeconds }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "ragtime_spool_corrupt_total",
			Help: "Corrupt records (bad checksum, length or magic) found in the disk spool, logged and skipped.",
		}, func() float64 { return float64(rec.Stats().Spool.Corrupt) }),
	)
}

// AdmissionStats reports admission control; *admission.Controller
// implements it.
type AdmissionStats interface {
	Stats() admission.Stats
}

// Admission exports admission control's streams, queue and refusals, read
// at scrape time.
func (m *Metrics) Admission(a AdmissionStats) {
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "ragtime_streams_running",
			Help: "/ask streams holding one of the process's --max-concurrent slots.",
		}, func() float64 { return float64(a.Stats().Running) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "ragtime_streams_queued",
			Help: "/ask requests waiting for a free stream (their queue stage).",
		}, func() float64 { return float64(a.Stats().Queued) }),
	)
	for _, reason := range admission.Reasons {
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "ragtime_admission_rejected_total",
			Help:        "/ask requests refused by admission control, by reason: rate_limited and too_many_streams (429), server_busy (503).",
			ConstLabels: prometheus.Labels{"reason": reason},
		}, func() float64 { return float64(a.Stats().Rejected[reason]) }))
	}
}

// SharedStats reports the calls to the state replicas share that failed;
// *redisstate.Store implements it.
type SharedStats interface {
	Failures() map[string]int64
}

// Shared exports the shared state's fallbacks by concern, read at scrape
// time: each is an ask's limit counted in the process, or a stream's
// events not shared, because Redis was unavailable.
func (m *Metrics) Shared(s SharedStats) {
	for _, concern := range []string{redisstate.ConcernRate, redisstate.ConcernLeases, redisstate.ConcernStreams} {
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "ragtime_redis_fallbacks_total",
			Help:        "Calls to Redis (--redis-url) that failed or were skipped while it was unavailable, by concern: rate and leases fell back to per-replica limits, streams to per-replica resume.",
			ConstLabels: prometheus.Labels{"concern": concern},
		}, func() float64 { return float64(s.Failures()[concern]) }))
	}
}

// EmbedCacheStats reports the query-embedding cache; *embedcache.Cache
// implements it.
type EmbedCacheStats interface {
	Stats() embedcache.Stats
}

// EmbedCache exports the query-embedding cache's hits, misses and size,
// read at scrape time.
func (m *Metrics) EmbedCache(c EmbedCacheStats) {
	for _, r := range [...]struct {
		result string
		n      func(embedcache.Stats) uint64
	}{{"hit", func(s embedcache.Stats) uint64 { return s.Hits }}, {"miss", func(s embedcache.Stats) uint64 { return s.Misses }}} {
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "ragtime_embed_cache_lookups_total",
			Help:        "Question texts looked up in the query-embedding cache, by result: hit (not embedded again) or miss (--embed-cache-size).",
			ConstLabels: prometheus.Labels{"result": r.result},
		}, func() float64 { return float64(r.n(c.Stats())) }))
	}
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "ragtime_embed_cache_entries",
		Help: "Vectors held in the query-embedding cache (at most --embed-cache-size).",
	}, func() float64 { return float64(c.Stats().Entries) }))
}

// TracingStats reports the tracer's queue and export; *tracing.Tracer
// implements it.
type TracingStats interface {
	Stats() tracing.Stats
}

// Tracing exports the tracer's counters, read at scrape time: what waits
// for its spans, what was dropped, what the exporter sent or failed to.
func (m *Metrics) Tracing(t TracingStats) {
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "ragtime_trace_queue_depth",
			Help: "Finished queries waiting for their trace spans to be built (bounded; the request path never waits on it).",
		}, func() float64 { return float64(t.Stats().Queued) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "ragtime_traces_total",
			Help: "Queries whose trace spans were built and handed to the batching span processor.",
		}, func() float64 { return float64(t.Stats().Traced) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "ragtime_traces_dropped_total",
			Help: "Queries whose trace was dropped because the trace queue was full (the OTLP receiver slower than the queries, or away).",
		}, func() float64 { return float64(t.Stats().Dropped) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "ragtime_trace_spans_exported_total",
			Help: "Spans the OTLP exporter sent.",
		}, func() float64 { return float64(t.Stats().SpansExported) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "ragtime_trace_spans_failed_total",
			Help: "Spans in batches the OTLP exporter failed to send after its retries (logged).",
		}, func() float64 { return float64(t.Stats().SpansFailed) }),
	)
}

// Handler serves the registry in the Prometheus text format, or in
// OpenMetrics when the scraper asks for it (Accept:
// application/openmetrics-text), which carries the trace_id exemplars of
// the TTFT and stage histograms.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg, EnableOpenMetrics: true})
}

// Observe records one finished query's figures. A traced query's trace id
// goes with its TTFT, first-token and stage observations as an exemplar, so
// a dashboard leads from a slow bucket to a trace.
func (m *Metrics) Observe(rec ragtime.Record) {
	var ex prometheus.Labels
	if rec.TraceID != "" {
		ex = prometheus.Labels{"trace_id": rec.TraceID}
	}
	for _, s := range rec.Stages {
		observe(m.stage.WithLabelValues(s.Name), s.DurationMs/1000, ex)
	}
	if rec.TTFTMs != nil {
		observe(m.ttft, *rec.TTFTMs/1000, ex)
	}
	if rec.FirstTokenMs != nil {
		observe(m.firstToken, *rec.FirstTokenMs/1000, ex)
	}
	m.e2e.Observe(rec.E2EMs / 1000)
	if rec.RetrievalShare != nil {
		m.share.Observe(*rec.RetrievalShare)
	}
	if rec.OverheadMs != nil {
		m.overhead.Observe(max(*rec.OverheadMs, 0) / 1000)
	}
	m.queries.WithLabelValues(rec.Status).Inc()
	if rec.Status != ragtime.StatusOK {
		code := rec.ErrorCode
		if code == "" {
			code = rec.Status
		}
		m.errors.WithLabelValues(code).Inc()
	}
	for _, t := range []struct {
		name string
		n    int
	}{
		{"prompt", rec.Usage.PromptTokens}, {"completion", rec.Usage.CompletionTokens},
		{"cached", deref(rec.Usage.CachedTokens)}, {"reasoning", rec.Usage.ReasoningTokens},
	} {
		if t.n > 0 {
			m.tokens.WithLabelValues(t.name).Add(float64(t.n))
		}
	}
}

// Recorder returns a ragtime.Recorder that observes each record, then
// hands it to next. The pipeline calls it after the stream has ended, and
// observing takes microseconds without locks beyond the instruments' own,
// so the query's timings are not affected.
func (m *Metrics) Recorder(next ragtime.Recorder) ragtime.Recorder {
	return observingRecorder{m: m, next: next}
}

type observingRecorder struct {
	m    *Metrics
	next ragtime.Recorder
}

func (o observingRecorder) Record(rec ragtime.Record) {
	o.m.Observe(rec)
	if o.next != nil {
		o.next.Record(rec)
	}
}

// deref is *p, or 0 when p is nil (a count the provider did not report
// adds nothing to a counter).
func deref(p *int) int {
	if p == nil {
		return 0
	}
	return *p
}

// observe observes v, with the exemplar ex when there is one.
func observe(o prometheus.Observer, v float64, ex prometheus.Labels) {
	if eo, ok := o.(prometheus.ExemplarObserver); ok && ex != nil {
		eo.ObserveWithExemplar(v, ex)
		return
	}
	o.Observe(v)
}

// SchedLatencies is the Go collector with go_sched_latencies_seconds: how
// long runnable goroutines waited for a CPU (runtime/metrics
// /sched/latencies:seconds), the scheduler delay that shows up in
// overhead_ms under contention. bench/relay serves it too, so that a held
// run reads the floor's waits as ragtime's.
func SchedLatencies() prometheus.Collector {
	return collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(
		collectors.GoRuntimeMetricsRule{Matcher: regexp.MustCompile(`^/sched/latencies:seconds$`)}))
}
