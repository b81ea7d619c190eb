package pipeline

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"

	"ragtime"
)

// The end of a query: its record built from what it measured, and the
// error a stage's failure is reported as.

// stageErr classifies err as the failure of stage: a cancelled context is
// a cancellation (the client went away), a passed deadline a timeout. An
// error that already is a cancellation of the client's own (the client
// went away while the stage wrote to it, not the context's) is kept as it
// is.
func stageErr(ctx context.Context, stage string, err error) error {
	if e := (*ragtime.Error)(nil); errors.As(err, &e) && e.Kind == ragtime.KindCancelled && !errors.Is(err, context.Canceled) {
		return AsError(stage, err)
	}
	if errors.Is(ctx.Err(), context.Canceled) || errors.Is(err, context.Canceled) {
		return &ragtime.Error{Stage: stage, Kind: ragtime.KindCancelled, Code: ragtime.CodeCancelled, Message: "the client went away", Err: err}
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		var e *ragtime.Error
		if errors.As(err, &e) {
			return AsError(stage, err) // the part's own timeout code (llm_timeout, ...)
		}
		return &ragtime.Error{Stage: stage, Kind: ragtime.KindTimeout, Code: ragtime.TimeoutCode(stage), Message: "the query's deadline passed during " + stage, Err: err}
	}
	return AsError(stage, err)
}

// finish derives the numbers, builds the record (q.rec), hands it to the
// Recorder and then writes done or error. The record is made here, at the
// end, rather than returned: a Record's 472 bytes in the caller's frame
// would be held on the answer's stack while it streams.
func (q *query) finish(ctx context.Context, out Stream, model string, runErr error) {
	rec := q.newRecord(model)
	q.serverTimings(&rec)
	q.stageSums(&rec)
	q.firstTokenFigures(&rec)
	q.ttft.figures(&rec.Figures, rec.TTFTMs)
	for i := range q.spans {
		q.materialize(i)
	}
	rec.Stages = q.spans
	perr, tell := q.outcome(ctx, &rec, runErr)
	rec.E2EMs = q.ms(q.now())
	if q.trace != nil {
		rec.TraceID = q.trace.TraceID()
	}
	// Record before done or error goes out: a client that saw done can
	// count on the record being at least queued (or spooled), even if the
	// process dies right after.
	if q.p.cfg.Recorder != nil {
		q.p.cfg.Recorder.Record(rec)
	}
	reply(out, &rec, perr, tell)
	if q.trace != nil {
		// After the stream's last event: the trace's spans are built off
		// the request path.
		q.trace.End(rec, perr)
	}
	q.rec = &rec
}

// newRecord is the record's start: the request's settings, the model and
// provider, the generation's usage and upstream identity, the question's
// hash (and the question, when the config stores it), status ok.
func (q *query) newRecord(model string) ragtime.Record {
	cfg := q.p.cfg
	rec := ragtime.Record{
		QueryID: q.id, CreatedAt: q.t0.UTC(), TopK: q.req.TopK, RerankTopN: q.req.RerankTopN,
		MaxTokens: q.req.MaxTokens, MaxContextTokens: q.budget(), Retrieval: knownRetrieval(q.req.Retrieval),
		SweepID: q.req.SweepID, KeyID: q.req.KeyID,
		Model: model, Provider: cfg.Provider, Status: ragtime.StatusOK,
		Figures: ragtime.Figures{Usage: q.gen.Usage}, UpstreamStatus: q.gen.UpstreamStatus, RequestID: SafeRequestID(q.gen.RequestID),
		FinishReason: safeFinishReason(q.gen.FinishReason),
	}
	if q.gen.Model != "" {
		rec.Model = q.gen.Model
	}
	sum := sha256.Sum256([]byte(q.req.Question))
	rec.QuestionSHA256 = hex.EncodeToString(sum[:])
	if cfg.StoreQuestion {
		rec.Question = q.req.Question
	}
	if !q.gen.GotConn.IsZero() {
		reused := q.gen.Conn.Reused
		rec.ConnReused = &reused
	}
	return rec
}

// serverTimings copies the timings the LLM server reported (queue,
// prefill, load) into rec; one it did not report stays nil.
func (q *query) serverTimings(rec *ragtime.Record) {
	for _, t := range [...]struct {
		key string
		dst **float64
	}{{ragtime.ServerQueueMs, &rec.ServerQueueMs}, {ragtime.ServerPrefillMs, &rec.ServerPrefillMs}, {ragtime.ServerLoadMs, &rec.ServerLoadMs}} {
		// An array, not a map literal: a map was made and hashed per ask.
		if v, ok := q.gen.ServerTimings[t.key]; ok {
			*t.dst = &v
		}
	}
}

// stageSums adds the stages' durations up into the record's parts of the
// time to first token: accept, queue, retrieval, the generation's connect
// and prefill, and the prefill the server does not explain.
func (q *query) stageSums(rec *ragtime.Record) {
	for _, s := range q.spans {
		switch s.Name {
		case ragtime.StageAccept:
			rec.AcceptMs += s.DurationMs
		case ragtime.StageQueue:
			rec.QueueMs += s.DurationMs
		case ragtime.StageEmbed, ragtime.StageSearch, ragtime.StageRerank, ragtime.StageAssemble:
			rec.RetrievalMs += s.DurationMs
		case ragtime.StageLLMConnect:
			rec.GenTTFTMs += s.DurationMs
		case ragtime.StageLLMPrefill:
			rec.GenTTFTMs += s.DurationMs
			rec.LLMPrefillMs = s.DurationMs
		}
	}
	rec.RetrievalMs = round3(rec.RetrievalMs)
	rec.GenTTFTMs = round3(rec.GenTTFTMs)
	if rec.ServerPrefillMs != nil {
		unexplained := round3(rec.LLMPrefillMs - *rec.ServerPrefillMs)
		rec.PrefillUnexplainedMs = &unexplained
	}
}

// firstTokenFigures sets the first token's and first answer token's times,
// the overhead (glue) and reasoning time, and the shares of the time to
// first token retrieval and prefill take. stageSums comes first.
func (q *query) firstTokenFigures(rec *ragtime.Record) {
	if !q.firstAt.IsZero() {
		v := q.ms(q.firstAt)
		rec.FirstTokenMs = &v
	}
	if !q.answerAt.IsZero() {
		// llm_prefill ends at the first token of any kind, so the glue is
		// what the stages leave of first_token_ms; a reasoning model's
		// thinking before its first answer token is reasoning_ms, not glue.
		ttft := q.ms(q.answerAt)
		first := *rec.FirstTokenMs // set: an answer token is a first token
		overhead := round3(first - rec.AcceptMs - rec.QueueMs - rec.RetrievalMs - rec.GenTTFTMs)
		reasoning := round3(ttft - first)
		rec.TTFTMs, rec.OverheadMs, rec.ReasoningMs = &ttft, &overhead, &reasoning
		if ttft > 0 {
			rs, ps := rec.RetrievalMs/ttft, rec.LLMPrefillMs/ttft
			rec.RetrievalShare, rec.PrefillShare = &rs, &ps
		}
	}
}

// outcome sets the record's status and error from runErr (nil: ok) and
// returns the error as the client and the trace see it (nil when none),
// and whether a cancellation is told to the client (a Cancel with Tell).
func (q *query) outcome(ctx context.Context, rec *ragtime.Record, runErr error) (perr *ragtime.Error, tell bool) {
	var cause *Cancel
	switch {
	case runErr == nil:
	case errors.As(runErr, &cause) || errors.As(context.Cause(ctx), &cause):
		// Cancelled from outside for a stated reason: the client stalled,
		// the server shuts down.
		rec.Status, rec.ErrorCode, rec.ErrorMessage = ragtime.StatusCancelled, cause.Code, cause.Message
		if cause.Tell {
			perr = &ragtime.Error{Stage: AsError("", runErr).Stage, Kind: cause.Kind, Code: cause.Code, Message: cause.Message, Hint: cause.Hint}
		}
	case IsCancelled(runErr):
		perr = AsError("", runErr)
		rec.Status, rec.ErrorCode, rec.ErrorMessage = ragtime.StatusCancelled, ragtime.CodeCancelled, perr.Message
	default:
		perr = AsError("", runErr)
		rec.Status = ragtime.StatusError
		rec.ErrorCode, rec.ErrorMessage = perr.Code, perr.Message
		if perr.Status != 0 && rec.UpstreamStatus == 0 {
			rec.UpstreamStatus = perr.Status
		}
		if rec.RequestID == "" {
			rec.RequestID = SafeRequestID(perr.RequestID)
		}
	}
	return perr, perr != nil && cause != nil && cause.Tell
}

// reply writes the stream's last event: done for a record with status ok,
// error for a failure or a cancellation the client is told of (tell), none
// for any other cancellation.
func reply(out Stream, rec *ragtime.Record, perr *ragtime.Error, tell bool) {
	switch rec.Status {
	case ragtime.StatusOK:
		_ = out.Done(*rec)
	case ragtime.StatusError:
		_ = out.Fail(perr)
	case ragtime.StatusCancelled:
		if tell {
			_ = out.Fail(perr)
		}
	}
}
