package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"ragtime"
	"ragtime/internal/spool"
)

// Recorder defaults.
const (
	DefaultQueueSize     = 10000
	DefaultBatchSize     = 256
	DefaultFlushInterval = 200 * time.Millisecond
	DefaultRetryBackoff  = 5 * time.Second
	DefaultWriters       = 2
)

// firstBackoff is the wait before the first retry; it doubles up to
// RecorderOptions.RetryBackoff.
const firstBackoff = 50 * time.Millisecond

// writeTimeout bounds one batch write, so that a PostgreSQL that stops
// answering without closing the connection counts as away (and the
// recorder spools) instead of holding the writer.
const writeTimeout = 30 * time.Second

// logEvery bounds how often the recorder logs drops, retries and failures;
// what it does not log it counts and reports with the next line.
const logEvery = 10 * time.Second

// RecorderOptions configure a Recorder. Zero values take the defaults.
type RecorderOptions struct {
	// QueueSize bounds the records held in memory (queued plus being
	// written); beyond it Record drops and counts. Default 10000.
	QueueSize int
	// BatchSize is how many waiting records make a batch worth writing
	// at once (a writer wakes for it), and the most one transaction takes
	// unless more are waiting: under a backlog a transaction takes up to 4
	// × BatchSize of the records already queued. Default 256.
	BatchSize int
	// Writers is how many batches are written at once, each on its own
	// connection and transaction; each writer also takes and encodes its
	// next batch while its current one commits. Default 2.
	Writers int
	// FlushInterval is about the longest a record waits before a batch
	// that is not full is flushed: the lead writer takes one such batch
	// per interval. Default 200ms.
	FlushInterval time.Duration
	// RetryBackoff caps the wait between retries while PostgreSQL is away;
	// waits start at 50ms and double. Default 5s.
	RetryBackoff time.Duration
	// Logger receives drops, retries and rejected records (rate-limited).
	// Default slog.Default().
	Logger *slog.Logger
	// Spool, when set, takes the records PostgreSQL cannot take now
	// instead of the memory queue dropping them: everything queued once a
	// write fails for a reason other than the data, every record that
	// finds the queue full, and every record while the spool holds any
	// (so that it drains oldest first). A replayer writes the spool into
	// PostgreSQL, and a spool left by a previous process is replayed from
	// the start. The caller opens and closes it (after Close).
	Spool *spool.Spool
	// StartSpooling starts the recorder spooling, for a caller that knows
	// PostgreSQL is away (so that no record waits in memory for the first
	// failed write to notice). Only with Spool.
	StartSpooling bool
}

// Recorder stores finished queries in PostgreSQL without making the caller
// wait: Record puts the record in a bounded in-memory queue and a background
// writer flushes it in batches, one transaction per batch. While PostgreSQL
// is away the writer keeps its batch and retries with capped backoff, and
// Record keeps accepting records up to QueueSize; what does not fit is
// counted as dropped and logged. It implements ragtime.Recorder and is safe
// for concurrent use. Close flushes and stops it.
type Recorder struct {
	pool *pgxpool.Pool
	opts RecorderOptions
	log  *slog.Logger

	mu       sync.Mutex
	queue    recordQueue // waiting, oldest first
	inflight int         // taken by the writers, not yet settled
	closed   bool
	spooling bool      // records go to the spool (only with opts.Spool)
	spoolAt  time.Time // when spooling started

	wake       chan struct{} // a full batch is waiting
	spoolWake  chan struct{} // the spool has records to replay
	stop       chan struct{} // Close was called: drain and exit
	done       chan struct{} // every writer has exited
	replayDone chan struct{} // the replayer has exited
	partsDone  chan struct{} // the partition maker has exited
	ctx        context.Context
	cancel     context.CancelFunc

	closeOnce sync.Once

	written, dropped, failed, retries atomic.Int64
	abandoned                         atomic.Int64 // dropped by Close
	spooled, replayed                 atomic.Int64

	dropLog, retryLog, failLog, replayLog, partLog limiter
}

var _ ragtime.Recorder = (*Recorder)(nil)

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
	if opts.Writers <= 0 {
		opts.Writers = DefaultWriters
	}
	if opts.RetryBackoff <= 0 {
		opts.RetryBackoff = DefaultRetryBackoff
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &Recorder{
		pool:       pool,
		opts:       opts,
		log:        opts.Logger,
		wake:       make(chan struct{}, 1),
		spoolWake:  make(chan struct{}, 1),
		stop:       make(chan struct{}),
		done:       make(chan struct{}),
		replayDone: make(chan struct{}),
		partsDone:  make(chan struct{}),
		ctx:        ctx,
		cancel:     cancel,
		dropLog:    limiter{every: logEvery},
		retryLog:   limiter{every: logEvery},
		partLog:    limiter{every: logEvery},
		failLog:    limiter{every: logEvery},
		replayLog:  limiter{every: logEvery},
	}
	var writers sync.WaitGroup
	for i := range opts.Writers {
		writers.Go(func() { r.run(i == 0) })
	}
	go func() {
		writers.Wait()
		close(r.done)
	}()
	go r.makePartitions()
	if opts.Spool != nil {
		if opts.StartSpooling {
			r.mu.Lock()
			r.startSpooling("PostgreSQL was unavailable at start")
			r.mu.Unlock()
		}
		if st := opts.Spool.Stats(); st.Records > 0 {
			if !r.spooling {
				r.spooling, r.spoolAt = true, time.Now()
			}
			r.log.Warn("postgres recorder: the spool holds finished queries from a previous run; replaying them into PostgreSQL, oldest first",
				"dir", opts.Spool.Dir(), "records", st.Records, "bytes", st.Bytes, "oldest_age_s", st.OldestAgeSeconds)
			r.wakeReplayer()
		}
		go r.replay()
	} else {
		close(r.replayDone)
	}
	return r
}

// Record queues rec for writing and returns at once; it never waits on the
// database. When the queue is full or the recorder is closed, the record is
// dropped, counted and logged (rate-limited). A zero CreatedAt is set to now.
// rec, its Stages and their Attrs must not be modified after the call.
func (r *Recorder) Record(rec ragtime.Record) {
	if rec.CreatedAt.IsZero() {
		rec.CreatedAt = time.Now()
	}
	r.mu.Lock()
	full := r.queue.n+r.inflight >= r.opts.QueueSize
	if r.opts.Spool != nil && (r.spooling || r.closed || full) {
		if !r.spooling && !r.closed {
			r.startSpooling("memory queue full")
			// The queue goes first, so records enter the spool in order
			// and none whose done was sent waits in memory for a write
			// that may never come (PostgreSQL away, the process killed).
			r.spoolQueueLocked()
		}
		r.spoolLocked([]ragtime.Record{rec})
		r.mu.Unlock()
		return
	}
	if r.closed || full {
		closed := r.closed
		r.mu.Unlock()
		reason := "queue full"
		if closed {
			reason = "recorder closed"
		}
		r.drop(1, reason, rec.QueryID)
		return
	}
	n := r.queue.push(rec, r.opts.BatchSize)
	r.mu.Unlock()
	if n >= r.opts.BatchSize {
		select {
		case r.wake <- struct{}{}:
		default:
		}
	}
}

// Stats returns the recorder's counters.
func (r *Recorder) Stats() ragtime.RecorderStats {
	r.mu.Lock()
	queued := int64(r.queue.n + r.inflight)
	spooling := r.spooling
	r.mu.Unlock()
	st := ragtime.RecorderStats{
		Queued:   queued,
		Written:  r.written.Load(),
		Dropped:  r.dropped.Load(),
		Failed:   r.failed.Load(),
		Retries:  r.retries.Load(),
		Spooled:  r.spooled.Load(),
		Replayed: r.replayed.Load(),
		Spooling: spooling,
	}
	if r.opts.Spool != nil {
		st.Spool = r.opts.Spool.Stats()
	}
	return st
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
	<-r.replayDone
	<-r.partsDone

	r.mu.Lock()
	left := r.queue.n
	if left > 0 && r.opts.Spool != nil {
		r.spoolQueueLocked()
		left = 0
	}
	r.queue.reset()
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

// run is one writer: it flushes when a batch is full and everything at
// Close, and the lead writer also every FlushInterval. Writers share the
// queue; each batch is taken by one. Only the lead flushes on the clock:
// tickers started together fire together, and a second writer waking
// with the first would take the few records that arrived since the first
// took its batch, a second transaction in the same interval. Full
// batches wake any writer.
func (r *Recorder) run(lead bool) {
	var tick <-chan time.Time
	if lead {
		ticker := time.NewTicker(r.opts.FlushInterval)
		defer ticker.Stop()
		tick = ticker.C
	}
	for {
		select {
		case <-r.wake:
		case <-tick:
		case <-r.stop:
			r.flush(true)
			return
		}
		r.flush(false)
	}
}

// makePartitions keeps the day partitions made ahead (EnsurePartitions) at
// start and every partitionEvery, until Close. While PostgreSQL is away it
// logs (rate-limited) and tries again at the next tick; rows for a day
// without a partition would land in the default partition, not fail.
func (r *Recorder) makePartitions() {
	defer close(r.partsDone)
	ticker := time.NewTicker(partitionEvery)
	defer ticker.Stop()
	for {
		ctx, cancel := context.WithTimeout(r.ctx, writeTimeout)
		made, err := EnsurePartitions(ctx, r.pool)
		cancel()
		switch {
		case err != nil && r.ctx.Err() == nil:
			if ok, suppressed := r.partLog.allow(); ok {
				r.log.Warn("postgres recorder: making the next days' partitions failed, will retry", "err", err,
					"every", partitionEvery, "retries_not_logged", suppressed)
			}
		case made > 0:
			r.log.Info("postgres recorder: made day partitions of queries and query_stages", "tables", made)
		}
		select {
		case <-r.stop:
			return
		case <-r.ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// flush writes batches until no full batch is waiting (with drain, until
// the queue is empty) or the recorder is cancelled. While one batch is
// being written (COPY and commit, which is PostgreSQL's work and a wait
// for the writer) the writer takes the next batch, if a full one is
// waiting, and encodes it, so that the Go and the PostgreSQL work of a
// backlog overlap instead of taking turns. A batch that is not full is
// taken once per flush, first, when nothing is in flight: what arrives
// while it commits waits for the next flush, and a light load is written
// in one transaction per FlushInterval: taking those records as soon as
// the commit settled made a transaction of one or two records after every
// batch, each paying the roll-up upsert and the commit whatever its size
// (docs/performance.md, "2,000 streams held open"). Batches are written in the
// order they are taken, and at most one per writer is in flight.
func (r *Recorder) flush(drain bool) {
	var cur *write
	partial := true // a batch that is not full may be taken
	for r.ctx.Err() == nil {
		batch := r.take(cur == nil && partial)
		if len(batch) == 0 {
			if cur == nil {
				return
			}
			select {
			case <-cur.done:
			case <-r.wake: // a full batch may be waiting: take it
				continue
			}
			ok := r.finish(cur, nil)
			cur = nil
			if !ok {
				return
			}
			continue
		}
		partial = drain
		enc := encode(batch, encodeBuf())
		if cur != nil && !r.finish(cur, batch) {
			return
		}
		cur = r.start(enc)
	}
	if cur != nil {
		r.finish(cur, nil)
	}
}

// write is a batch being written by its own goroutine.
type write struct {
	batch []ragtime.Record
	buf   []byte        // the batch's rows (encoded.buf)
	done  chan struct{} // closed when n and err are set
	n     int           // records from the front settled
	err   error         // why the rest were not
}

// start writes enc's batch in the background.
func (r *Recorder) start(enc encoded) *write {
	w := &write{batch: enc.recs, buf: enc.buf, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		w.n, w.err = r.storeEncoded(r.ctx, enc)
	}()
	return w
}

// finish waits for w and settles its batch as deliverRest does. next is
// the batch the writer took while w was in flight (nil if none): it is
// newer than w's, so when w's rest goes to the spool, next follows it
// there before the queue, and when the recorder is cancelled while
// retrying w it is abandoned with it. finish reports whether the writer
// may go on to write next; if not, next is settled.
func (r *Recorder) finish(w *write, next []ragtime.Record) bool {
	<-w.done
	releaseBuf(w.buf) // a retry encodes the rest again
	ok := r.deliverRest(w.batch, w.n, w.err, next)
	r.recycle(w.batch)
	return ok
}

// take moves the oldest records of the queue to the writer, or nothing
// when the queue is empty or, with partial false, when fewer than
// BatchSize are waiting. A batch is the queue's oldest chunk (BatchSize
// records at most, not copied again) or, under a backlog, the chunks that
// fit in backlogBatches × BatchSize, copied into one array.
func (r *Recorder) take(partial bool) []ragtime.Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !partial && !r.queue.frontFull(r.opts.BatchSize) {
		return nil
	}
	batch := r.queue.popUpTo(backlogBatches * r.opts.BatchSize)
	r.inflight += len(batch)
	return batch
}

// backlogBatches is how many chunks of BatchSize one transaction takes at
// most when that many are waiting. A batch of 1,024 costs each record
// about a third less CPU, on each side, than batches of 256 (a COPY of a
// partitioned table, the roll-up upsert and the commit cost the same per
// transaction whatever its size), and records already waiting are lost to
// a kill -9 whether they wait in the queue or in a transaction, so the
// larger batch exposes nothing more; under a light load the batches stay
// as small as what arrives in a flush.
const backlogBatches = 4

// recycle hands a settled batch's array back to the queue for the
// records to come, cleared so that it keeps nothing alive.
func (r *Recorder) recycle(batch []ragtime.Record) {
	clear(batch)
	r.mu.Lock()
	r.queue.recycle(batch[:0], r.opts.BatchSize)
	r.mu.Unlock()
}

// settle releases n records the writer has finished with.
func (r *Recorder) settle(n int) {
	r.mu.Lock()
	r.inflight -= n
	r.mu.Unlock()
}

// deliverRest settles the first n records of batch, whose write ended with
// err, and writes the rest until every record is settled: while
// PostgreSQL is away it retries with capped backoff, or, with a spool,
// spools the rest, then next, then the queue. It reports whether the
// writer may go on to write next; when it returns false next is settled
// (spooled, or abandoned because the recorder was cancelled).
func (r *Recorder) deliverRest(batch []ragtime.Record, n int, err error, next []ragtime.Record) bool {
	backoff := min(firstBackoff, r.opts.RetryBackoff)
	for {
		r.settle(n)
		batch = batch[n:]
		if err == nil {
			return true
		}
		if r.opts.Spool != nil {
			r.spill(batch, next, err)
			return false
		}
		if r.ctx.Err() != nil {
			r.giveUp(batch, next)
			return false
		}
		r.retries.Add(1)
		if ok, suppressed := r.retryLog.allow(); ok {
			r.log.Warn("postgres recorder: write failed, will retry",
				"err", err, "records", len(batch), "backoff", backoff, "queued", r.Stats().Queued,
				"retries_not_logged", suppressed)
		}
		if !sleep(r.ctx, backoff) {
			r.giveUp(batch, next)
			return false
		}
		backoff = min(backoff*2, r.opts.RetryBackoff)
		n, err = r.store(r.ctx, batch)
	}
}

// giveUp settles the writer's unwritten records as abandoned, when the
// recorder is cancelled (Close's context ended) before they were written.
func (r *Recorder) giveUp(batches ...[]ragtime.Record) {
	for _, b := range batches {
		if len(b) > 0 {
			r.settle(len(b))
			r.abandon(len(b))
		}
	}
}

// encoded is a batch turned into rows, ready to write.
type encoded struct {
	recs    []ragtime.Record
	rows    []row
	at      []int // rows[k] is recs[at[k]]
	invalid []invalidRecord
	buf     []byte // holds every row's bytes; back to encodeBufs once written
}

// invalidRecord is a record appendRow refused, by its index in the batch.
type invalidRecord struct {
	i   int
	err error
}

// encodeBufs holds the buffers batches are encoded into, so that a writer
// under a backlog reuses the same memory (a batch of 1,024 records is
// about 2 MB of rows) instead of asking the runtime for fresh pages each
// time; an idle recorder's buffers go with the garbage collector.
var encodeBufs sync.Pool

// maxPooledBuf bounds the buffers kept in encodeBufs.
const maxPooledBuf = 16 << 20

// encodeBuf returns an empty buffer from encodeBufs, or nil.
func encodeBuf() []byte {
	if p, ok := encodeBufs.Get().(*[]byte); ok {
		return (*p)[:0]
	}
	return nil
}

// releaseBuf returns buf to encodeBufs; nothing may use it after.
func releaseBuf(buf []byte) {
	if buf != nil && cap(buf) <= maxPooledBuf {
		encodeBufs.Put(&buf)
	}
}

// encode turns recs into rows, appended to buf (which may be nil); what
// cannot be turned is kept aside, to be counted failed when the records
// around it are settled.
func encode(recs []ragtime.Record, buf []byte) encoded {
	if buf == nil {
		buf = make([]byte, 0, len(recs)*(512+192*8))
	}
	e := encoded{recs: recs, rows: make([]row, 0, len(recs)), at: make([]int, 0, len(recs))}
	ends := make([][2]int, 0, len(recs)) // where each row's queries row and stage rows end in buf
	for i := range recs {
		start := len(buf)
		out, rw, q, err := appendRow(buf, &recs[i])
		if err != nil {
			e.invalid = append(e.invalid, invalidRecord{i, err})
			buf = buf[:start]
			continue
		}
		buf = out
		e.rows = append(e.rows, rw)
		e.at = append(e.at, i)
		ends = append(ends, [2]int{start + q, len(buf)})
	}
	start := 0
	for k, end := range ends {
		e.rows[k].query = buf[start:end[0]:end[0]]
		e.rows[k].stages = buf[end[0]:end[1]:end[1]]
		start = end[1]
	}
	e.buf = buf
	return e
}

// store writes recs into PostgreSQL, one transaction per batch; when
// PostgreSQL rejects the data it writes them one by one, so that only the
// invalid ones are counted failed. It returns how many records from the
// front are settled (written or failed) and, when that is not all of them,
// the error (PostgreSQL away, schema missing, ctx ended) that stopped it.
func (r *Recorder) store(ctx context.Context, recs []ragtime.Record) (int, error) {
	return r.storeEncoded(ctx, encode(recs, nil))
}

// storeEncoded is store of a batch encode has turned into rows.
func (r *Recorder) storeEncoded(ctx context.Context, e encoded) (int, error) {
	recs, rows, at := e.recs, e.rows, e.at
	// failBefore counts the unconvertible records before recs[end] as
	// failed, once, when they are settled.
	failBefore := func(end int) {
		for _, b := range e.invalid {
			if b.i < end {
				r.fail(recs[b.i].QueryID, b.err)
			}
		}
	}

	done := 0
	singles := false
	for done < len(rows) {
		chunk := rows[done:]
		if singles {
			chunk = chunk[:1]
		}
		wctx, cancel := context.WithTimeout(ctx, writeTimeout)
		err := writeRows(wctx, r.pool, chunk)
		cancel()
		switch {
		case err == nil:
			r.written.Add(int64(len(chunk)))
			done += len(chunk)
		case ctx.Err() == nil && isInvalidData(err):
			if len(chunk) > 1 {
				singles = true
				continue
			}
			r.fail(chunk[0].queryID, err)
			done++
		default:
			failBefore(at[done])
			return at[done], err
		}
	}
	failBefore(len(recs))
	return len(recs), nil
}

// spill moves batch (taken by the writer, not written), then next (taken
// after it, not written) and everything queued into the spool, after
// PostgreSQL failed with cause, and switches Record to the spool until the
// replayer has drained it.
func (r *Recorder) spill(batch, next []ragtime.Record, cause error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.spooling {
		r.startSpooling(fmt.Sprintf("writing to PostgreSQL failed: %v", cause))
	}
	r.spoolLocked(batch)
	r.spoolLocked(next)
	r.spoolQueueLocked()
	r.inflight -= len(batch) + len(next)
}

// spoolQueueLocked moves everything queued into the spool, oldest first.
// Called with r.mu held.
func (r *Recorder) spoolQueueLocked() {
	for _, c := range r.queue.chunks {
		r.spoolLocked(c)
	}
	r.queue.reset()
}

// startSpooling switches Record to the spool. Called with r.mu held.
func (r *Recorder) startSpooling(reason string) {
	r.spooling, r.spoolAt = true, time.Now()
	st := r.opts.Spool.Stats()
	r.log.Warn("postgres recorder: spooling finished queries to disk until PostgreSQL takes them",
		"reason", reason, "dir", r.opts.Spool.Dir(), "spool_records", st.Records, "spool_bytes", st.Bytes)
}

// spoolLocked appends recs to the spool as their ragtime.Record JSON (a
// shape independent of the SQL that stores them); what the spool refuses is
// dropped and counted. Called with r.mu held, so that records enter the
// spool in the order they are recorded.
func (r *Recorder) spoolLocked(recs []ragtime.Record) {
	if len(recs) == 0 {
		return
	}
	for i := range recs {
		b, err := marshalRecord(&recs[i])
		if err != nil {
			r.fail(recs[i].QueryID, fmt.Errorf("%w: encode for the spool: %w", errInvalidRecord, err))
			continue
		}
		if err := r.opts.Spool.Append(b, recs[i].CreatedAt); err != nil {
			reason := "spool: " + err.Error()
			if errors.Is(err, spool.ErrFull) {
				reason = "spool full (--spool-max-bytes)"
			}
			r.drop(1, reason, recs[i].QueryID)
			continue
		}
		r.spooled.Add(1)
	}
	r.wakeReplayer()
}

// marshalRecord encodes rec as JSON, turning a panicking MarshalJSON of an
// attribute value into an error.
func marshalRecord(rec *ragtime.Record) (b []byte, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("encoding panicked: %v", p)
		}
	}()
	return json.Marshal(rec)
}

func (r *Recorder) wakeReplayer() {
	select {
	case r.spoolWake <- struct{}{}:
	default:
	}
}

// replay drains the spool into PostgreSQL, oldest first, a batch at a time,
// with capped backoff while PostgreSQL is away; a record is removed from the
// spool once its batch is committed (a record written twice, as after a
// crash between commit and removal, is stored once: the insert skips a
// known query id). It exits at Close, leaving the rest for the next start.
func (r *Recorder) replay() {
	defer close(r.replayDone)
	backoff := min(firstBackoff, r.opts.RetryBackoff)
	wait := time.Duration(0)
	for {
		if !r.replayWait(wait) {
			return
		}
		wait = 0
		for {
			select {
			case <-r.stop:
				return
			default:
			}
			n, err := r.replayBatch()
			if err != nil {
				r.retries.Add(1)
				if ok, suppressed := r.replayLog.allow(); ok {
					st := r.opts.Spool.Stats()
					r.log.Warn("postgres recorder: replaying the spool failed, will retry",
						"err", err, "backoff", backoff, "spool_records", st.Records, "spool_bytes", st.Bytes,
						"oldest_age_s", st.OldestAgeSeconds, "retries_not_logged", suppressed)
				}
				wait = backoff
				backoff = min(backoff*2, r.opts.RetryBackoff)
				break
			}
			backoff = min(firstBackoff, r.opts.RetryBackoff)
			if n == 0 {
				break
			}
		}
	}
}

// replayWait waits for a record to replay, or for d when d > 0 (a backoff
// new records do not shorten); it reports false at Close.
func (r *Recorder) replayWait(d time.Duration) bool {
	if d <= 0 {
		select {
		case <-r.stop:
			return false
		case <-r.spoolWake:
			return true
		}
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-r.stop:
		return false
	case <-t.C:
		return true
	}
}

// replayBatch writes the spool's oldest batch into PostgreSQL and removes
// what is settled from the spool. It returns 0 when the spool is drained
// (and switches Record back to the memory queue).
func (r *Recorder) replayBatch() (int, error) {
	entries, err := r.opts.Spool.Peek(r.opts.BatchSize)
	if err != nil {
		return 0, fmt.Errorf("read spool: %w", err)
	}
	if len(entries) == 0 {
		r.endSpooling()
		return 0, nil
	}
	recs := make([]ragtime.Record, 0, len(entries))
	at := make([]int, 0, len(entries)) // recs[k] came from entries[at[k]]
	var undecodable []int
	var decodeErr error
	for i, e := range entries {
		var rec ragtime.Record
		if err := json.Unmarshal(e.Data, &rec); err != nil {
			undecodable, decodeErr = append(undecodable, i), err
			continue
		}
		recs = append(recs, rec)
		at = append(at, i)
	}
	n, werr := r.store(r.ctx, recs)
	settled := len(entries)
	if n < len(recs) {
		settled = at[n]
	}
	for _, i := range undecodable {
		if i < settled {
			// The checksum matched, so these are the bytes written: a
			// record this binary cannot read. Count it and move on.
			r.fail("", fmt.Errorf("%w: decode spooled record: %w", errInvalidRecord, decodeErr))
		}
	}
	r.replayed.Add(int64(n))
	if err := r.opts.Spool.Ack(entries[:settled]); err != nil {
		return 0, err
	}
	if werr != nil {
		return 0, werr
	}
	return settled, nil
}

// endSpooling switches Record back to the memory queue once the spool is
// empty, checked under r.mu so that no Record appends in between.
func (r *Recorder) endSpooling() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.spooling || r.closed {
		return
	}
	if es, err := r.opts.Spool.Peek(1); err != nil || len(es) > 0 {
		r.wakeReplayer()
		return
	}
	r.spooling = false
	r.log.Info("postgres recorder: spool drained into PostgreSQL; recording through the memory queue again",
		"spooled_for", time.Since(r.spoolAt).Round(time.Millisecond), "replayed_total", r.replayed.Load(),
		"corrupt_skipped", r.opts.Spool.Stats().Corrupt)
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
