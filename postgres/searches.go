package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"ragtime"
	"ragtime/pipeline"
)

var _ pipeline.SearchRecorder = (*SearchRecorder)(nil)

// searchQueue is how many retrieval-only queries wait for the database
// before the next is dropped (and counted).
const searchQueue = 4096

// SearchRecorder stores retrieval-only queries (POST /v1/search) in the
// searches table, off the request path: RecordSearch queues, one goroutine
// writes batches. What the queue cannot hold is dropped and counted; unlike
// an ask's record, a search's is not spooled.
type SearchRecorder struct {
	pool    *pgxpool.Pool
	log     *slog.Logger
	ch      chan pipeline.SearchRecord
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once
	dropped atomic.Int64
}

// NewSearchRecorder starts a SearchRecorder writing to pool; Close stops it.
func NewSearchRecorder(pool *pgxpool.Pool, log *slog.Logger) *SearchRecorder {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &SearchRecorder{pool: pool, log: log, ch: make(chan pipeline.SearchRecord, searchQueue),
		stop: make(chan struct{}), done: make(chan struct{})}
	go r.run()
	return r
}

// RecordSearch implements pipeline.SearchRecorder.
func (r *SearchRecorder) RecordSearch(rec pipeline.SearchRecord) {
	select {
	case <-r.stop:
		r.dropped.Add(1)
		return
	default:
	}
	select {
	case r.ch <- rec:
	default:
		r.dropped.Add(1)
	}
}

// Dropped returns how many searches were not stored (the queue was full,
// a write failed, or the recorder was closed).
func (r *SearchRecorder) Dropped() int64 { return r.dropped.Load() }

// Close writes what is queued and stops.
func (r *SearchRecorder) Close() {
	r.once.Do(func() { close(r.stop) })
	<-r.done
}

func (r *SearchRecorder) run() {
	defer close(r.done)
	batch := make([]pipeline.SearchRecord, 0, 256)
	for {
		select {
		case rec := <-r.ch:
			batch = append(batch[:0], rec)
		case <-r.stop:
			batch = batch[:0]
			for len(r.ch) > 0 {
				batch = append(batch, <-r.ch)
			}
			r.write(batch)
			return
		}
	more:
		for len(batch) < cap(batch) {
			select {
			case rec := <-r.ch:
				batch = append(batch, rec)
			default:
				break more
			}
		}
		r.write(batch)
	}
}

func (r *SearchRecorder) write(recs []pipeline.SearchRecord) {
	if len(recs) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var b pgx.Batch
	for i := range recs {
		if err := queueSearch(&b, &recs[i]); err != nil {
			r.dropped.Add(1)
			r.log.Warn("not storing a search", "query_id", recs[i].QueryID, "err", err)
		}
	}
	if err := r.pool.SendBatch(ctx, &b).Close(); err != nil {
		r.dropped.Add(int64(b.Len()))
		r.log.Warn("storing searches failed", "searches", b.Len(), "err", err)
	}
}

// queueSearch adds rec's insert to b.
func queueSearch(b *pgx.Batch, rec *pipeline.SearchRecord) error {
	stages, err := json.Marshal(rec.Stages)
	if err != nil {
		return fmt.Errorf("encoding the stages: %w", err)
	}
	var embed, search, rerank, vector, lexical, fusion *float64
	for _, s := range rec.Stages {
		d := s.DurationMs
		switch s.Name {
		case ragtime.StageEmbed:
			embed = &d
		case ragtime.StageSearch:
			search = &d
			vector, lexical, fusion = attrMs(s.Attrs, "vector_ms"), attrMs(s.Attrs, "lexical_ms"), attrMs(s.Attrs, "fusion_ms")
			if vector == nil && rec.Retrieval == ragtime.RetrievalVector {
				vector = &d // the leg is the stage
			}
		case ragtime.StageRerank:
			rerank = &d
		}
	}
	b.Queue(`INSERT INTO searches (id, created_at, key_id, question, question_sha256, retrieval, top_k, vector_k, lexical_k,
		rerank_top_n, hits, status, error_code, retrieval_ms, embed_ms, search_ms, vector_ms, lexical_ms, fusion_ms, rerank_ms,
		e2e_ms, stages)
		VALUES ($1, $2, NULLIF($3, '')::uuid, NULLIF($4, ''), $5, $6, $7, $8, $9, $10, $11, $12, NULLIF($13, ''), $14, $15, $16,
		$17, $18, $19, $20, $21, $22)`,
		rec.QueryID, rec.CreatedAt, rec.KeyID, rec.Question, rec.QuestionSHA256, rec.Retrieval, rec.TopK, rec.VectorK,
		rec.LexicalK, rec.RerankTopN, rec.Hits, rec.Status, rec.ErrorCode, rec.RetrievalMs, embed, search, vector, lexical,
		fusion, rerank, rec.E2EMs, stages)
	return nil
}

func attrMs(attrs map[string]any, key string) *float64 {
	if v, ok := attrs[key].(float64); ok {
		return &v
	}
	return nil
}
