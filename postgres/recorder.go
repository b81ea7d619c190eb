package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"ragtime/pipeline"
)

// Recorder defaults.
const (
	DefaultQueueSize     = 10000
	DefaultBatchSize     = 256
	DefaultFlushInterval = 200 * time.Millisecond
	DefaultRetryBackoff  = 5 * time.Second
)

// firstBackoff is the wait before the first retry; it doubles up to
// RecorderOptions.RetryBackoff.
const firstBackoff = 50 * time.Millisecond

// logEvery bounds how often the recorder logs drops, retries and failures;
// what it does not log it counts and reports with the next line.
const logEvery = 10 * time.Second

// RecorderOptions configure a Recorder. Zero values take the defaults.
type RecorderOptions struct {
	// QueueSize bounds the records held in memory (queued plus being
	// written); beyond it Record drops and counts. Default 10000.
	QueueSize int
	// BatchSize is the most records written in one transaction. Default 256.
	BatchSize int
	// FlushInterval is how long a record waits at most before the writer
	// flushes a batch that is not full. Default 200ms.
	FlushInterval time.Duration
	// RetryBackoff caps the wait between retries while PostgreSQL is away;
	// waits start at 50ms and double. Default 5s.
	RetryBackoff time.Duration
	// Logger receives drops, retries and rejected records (rate-limited).
	// Default slog.Default().
	Logger *slog.Logger
}

// Recorder stores finished queries in PostgreSQL without making the caller
// wait: Record puts the record in a bounded in-memory queue and a background
// writer flushes it in batches, one transaction per batch. While PostgreSQL
// is away the writer keeps its batch and retries with capped backoff, and
// Record keeps accepting records up to QueueSize; what does not fit is
// counted as dropped and logged. It implements pipeline.Recorder and is safe
// for concurrent use. Close flushes and stops it.
type Recorder struct {
	pool *pgxpool.Pool
	opts RecorderOptions
	log  *slog.Logger

	mu       sync.Mutex
	queue    []pipeline.Record // waiting, oldest first
	inflight int               // taken by the writer, not yet settled
	closed   bool

	wake   chan struct{} // a full batch is waiting
	stop   chan struct{} // Close was called: drain and exit
	done   chan struct{} // the writer has exited
	ctx    context.Context
	cancel context.CancelFunc

	closeOnce sync.Once

	written, dropped, failed, retries atomic.Int64
	abandoned                         atomic.Int64 // dropped by Close

	dropLog, retryLog, failLog limiter
}

var _ pipeline.Recorder = (*Recorder)(nil)

// NewRecorder starts a Recorder writing into the database pool is connected
// to, which must be migrated (Migrate). Call Close to flush and stop it.
func NewRecorder(pool *pgxpool.Pool, opts RecorderOptions) *Recorder {
	if opts.QueueSize <= 0 {
		opts.QueueSize = DefaultQueueSize
	}
	if opts.BatchSize <= 0 {
		opts.BatchSize = DefaultBatchSize
	}
	if opts.FlushInterval <= 0 {
		opts.FlushInterval = DefaultFlushInterval
	}
	if opts.RetryBackoff <= 0 {
		opts.RetryBackoff = DefaultRetryBackoff
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &Recorder{
		pool:     pool,
		opts:     opts,
		log:      opts.Logger,
		wake:     make(chan struct{}, 1),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
		ctx:      ctx,
		cancel:   cancel,
		dropLog:  limiter{every: logEvery},
		retryLog: limiter{every: logEvery},
		failLog:  limiter{every: logEvery},
	}
	go r.run()
	return r
}

// Record queues rec for writing and returns at once; it never waits on the
// database. When the queue is full or the recorder is closed, the record is
// dropped, counted and logged (rate-limited). A zero CreatedAt is set to now.
// rec, its Stages and their Attrs must not be modified after the call.
func (r *Recorder) Record(rec pipeline.Record) {
	if rec.CreatedAt.IsZero() {
		rec.CreatedAt = time.Now()
	}
	r.mu.Lock()
	if r.closed || len(r.queue)+r.inflight >= r.opts.QueueSize {
		closed := r.closed
		r.mu.Unlock()
		reason := "queue full"
		if closed {
			reason = "recorder closed"
		}
		r.drop(1, reason, rec.QueryID)
		return
	}
	r.queue = append(r.queue, rec)
	n := len(r.queue)
	r.mu.Unlock()
	if n >= r.opts.BatchSize {
		select {
		case r.wake <- struct{}{}:
		default:
		}
	}
}

// Stats returns the recorder's counters.
func (r *Recorder) Stats() pipeline.RecorderStats {
	r.mu.Lock()
	queued := int64(len(r.queue) + r.inflight)
	r.mu.Unlock()
	return pipeline.RecorderStats{
		Queued:  queued,
		Written: r.written.Load(),
		Dropped: r.dropped.Load(),
		Failed:  r.failed.Load(),
		Retries: r.retries.Load(),
	}
}

// Close stops accepting records, writes everything the recorder holds and
// stops the writer. If ctx ends first, it abandons the rest, counts it as
// dropped and returns an error saying how many records were lost. Calling
// Close again waits for the writer and returns nil.
func (r *Recorder) Close(ctx context.Context) error {
	first := false
	r.closeOnce.Do(func() {
		first = true
		r.mu.Lock()
		r.closed = true
		r.mu.Unlock()
		close(r.stop)
	})
	select {
	case <-r.done:
	case <-ctx.Done():
		r.cancel()
		<-r.done
	}
	r.cancel()

	r.mu.Lock()
	left := len(r.queue)
	r.queue = nil
	r.mu.Unlock()
	if left > 0 {
		r.abandon(left)
	}
	lost := r.abandoned.Load()
	if first && lost > 0 {
		cause := ctx.Err()
		if cause == nil {
			cause = context.Canceled
		}
		return fmt.Errorf("close recorder: %d records not written: %w", lost, cause)
	}
	return nil
}

// run is the writer: it flushes when a batch is full, every FlushInterval,
// and everything at Close.
func (r *Recorder) run() {
	defer close(r.done)
	ticker := time.NewTicker(r.opts.FlushInterval)
	defer ticker.Stop()
	for {
		select {
		case <-r.wake:
		case <-ticker.C:
		case <-r.stop:
			r.flush()
			return
		}
		r.flush()
	}
}

// flush writes batches until the queue is empty or the recorder is
// cancelled.
func (r *Recorder) flush() {
	for r.ctx.Err() == nil {
		batch := r.take()
		if len(batch) == 0 {
			return
		}
		r.deliver(batch)
	}
}

// take moves up to BatchSize records from the queue to the writer.
func (r *Recorder) take() []pipeline.Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := min(len(r.queue), r.opts.BatchSize)
	if n == 0 {
		return nil
	}
	batch := make([]pipeline.Record, n)
	copy(batch, r.queue)
	clear(r.queue[:n])
	r.queue = r.queue[n:]
	if len(r.queue) == 0 {
		r.queue = nil
	}
	r.inflight += n
	return batch
}

// settle releases n records the writer has finished with.
func (r *Recorder) settle(n int) {
	r.mu.Lock()
	r.inflight -= n
	r.mu.Unlock()
}

// deliver writes batch, retrying while PostgreSQL is away. When PostgreSQL
// rejects the batch's data it writes the records one by one, so that only
// the invalid ones are counted failed. It returns when every record is
// settled or the recorder is cancelled.
func (r *Recorder) deliver(batch []pipeline.Record) {
	pending := make([]row, 0, len(batch))
	for i := range batch {
		rw, err := newRow(batch[i])
		if err != nil {
			r.fail(batch[i].QueryID, err)
			r.settle(1)
			continue
		}
		pending = append(pending, rw)
	}

	singles := false
	backoff := min(firstBackoff, r.opts.RetryBackoff)
	for len(pending) > 0 {
		chunk := pending
		if singles {
			chunk = pending[:1]
		}
		err := writeRows(r.ctx, r.pool, chunk)
		switch {
		case err == nil:
			r.written.Add(int64(len(chunk)))
			r.settle(len(chunk))
			pending = pending[len(chunk):]
			backoff = min(firstBackoff, r.opts.RetryBackoff)
		case r.ctx.Err() != nil:
			r.settle(len(pending))
			r.abandon(len(pending))
			return
		case isInvalidData(err):
			if len(chunk) > 1 {
				singles = true
				continue
			}
			r.fail(chunk[0].queryID, err)
			r.settle(1)
			pending = pending[1:]
		default:
			r.retries.Add(1)
			if ok, suppressed := r.retryLog.allow(); ok {
				r.log.Warn("postgres recorder: write failed, will retry",
					"err", err, "records", len(chunk), "backoff", backoff, "queued", r.Stats().Queued,
					"retries_not_logged", suppressed)
			}
			if !sleep(r.ctx, backoff) {
				r.settle(len(pending))
				r.abandon(len(pending))
				return
			}
			backoff = min(backoff*2, r.opts.RetryBackoff)
		}
	}
}

// drop counts n lost records and logs it (rate-limited).
func (r *Recorder) drop(n int, reason, queryID string) {
	total := r.dropped.Add(int64(n))
	if ok, suppressed := r.dropLog.allow(); ok {
		r.log.Error("postgres recorder: dropped query records",
			"reason", reason, "records", n, "query_id", queryID, "dropped_total", total,
			"queue_size", r.opts.QueueSize, "drops_not_logged", suppressed)
	}
}

// abandon counts n records Close gave up on as dropped.
func (r *Recorder) abandon(n int) {
	r.abandoned.Add(int64(n))
	r.drop(n, "closed before written", "")
}

// fail counts a record rejected as invalid and logs it (rate-limited).
func (r *Recorder) fail(queryID string, err error) {
	total := r.failed.Add(1)
	if ok, suppressed := r.failLog.allow(); ok {
		r.log.Error("postgres recorder: query record rejected as invalid, skipped",
			"query_id", queryID, "err", err, "failed_total", total, "failures_not_logged", suppressed)
	}
}

// sleep waits d or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// limiter lets one log line through per interval and counts the rest.
type limiter struct {
	every time.Duration

	mu         sync.Mutex
	last       time.Time
	suppressed int64
}

// allow reports whether to log now and how many lines were held back since
// the last one that was.
func (l *limiter) allow() (bool, int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if !l.last.IsZero() && now.Sub(l.last) < l.every {
		l.suppressed++
		return false, 0
	}
	l.last = now
	n := l.suppressed
	l.suppressed = 0
	return true, n
}

// errInvalidRecord marks a record the recorder refuses before sending it.
var errInvalidRecord = errors.New("invalid query record")
