package sweep

import (
	"context"
	"errors"
	"fmt"
	"time"

	"ragtime"
	"ragtime/pipeline"
)

// Check reports the first parameter out of its range, named by the sweep's
// flag. The settings are checked as they are built.
func (p *Params) Check() error {
	switch {
	case p.Runs < 1:
		return fmt.Errorf("--runs must be 1 or more, got %d", p.Runs)
	case p.Concurrency < 1:
		return fmt.Errorf("--concurrency must be 1 or more, got %d", p.Concurrency)
	case p.RecallTolerance < 0 || p.RecallTolerance > 1:
		return fmt.Errorf("--recall-tolerance must be between 0 and 1, got %g", p.RecallTolerance)
	case p.TTFTBudgetMs < 0:
		return fmt.Errorf("--ttft-budget-ms must be 0 (no budget) or more, got %g", p.TTFTBudgetMs)
	case p.MaxTokens < 1 || p.MaxTokens > pipeline.MaxMaxTokens:
		return fmt.Errorf("--max-tokens must be between 1 and %d, got %d", pipeline.MaxMaxTokens, p.MaxTokens)
	}
	return nil
}

// CheckQuestions refuses a question an ask would refuse (empty, too long,
// not UTF-8), naming file and line, before anything is measured.
func CheckQuestions(file string, questions []Question) error {
	for _, q := range questions {
		r := pipeline.Request{Question: q.Text, TopK: 1, MaxTokens: 1}
		if err := r.Normalize(pipeline.DefaultMaxQuestion); err != nil {
			return fmt.Errorf("%s:%d: %w", file, q.Line, err)
		}
	}
	return nil
}

// QueryLookup finds a stored query by id (*postgres.Store).
type QueryLookup interface {
	GetQuery(ctx context.Context, id string) (ragtime.Record, error)
}

// NotRecordedError is CheckServerRecords' error for a server that stores
// its queries in another database than the sweep's.
type NotRecordedError struct {
	Server, Database, QueryID string
	Wait                      time.Duration
}

func (e *NotRecordedError) Error() string {
	return fmt.Sprintf("--server %s does not record into this sweep's database --database-url %s: its query %s is not there after %s, so no measured query could be tagged; "+
		"run the sweep with --database-url (or DATABASE_URL) set to the server's database", e.Server, e.Database, e.QueryID, e.Wait)
}

// CheckServerRecords asks the server once (question, one token) and looks
// the query up in the sweep's database for up to wait, so that a sweep whose
// database is not the server's is refused before it measures (it could tag
// none of its queries). The check query is an ordinary ask, stored
// untagged. serverURL and dbURL (with any password redacted) name them in
// the error, a *NotRecordedError when the query never came.
func CheckServerRecords(ctx context.Context, asker Asker, store QueryLookup, question, serverURL, dbURL string, wait time.Duration) error {
	req := pipeline.Request{Question: question, TopK: pipeline.Unset, RerankTopN: pipeline.Unset, MaxTokens: 1}
	rec := asker.Run(ctx, &req, pipeline.Discard{})
	if rec.QueryID == "" {
		return fmt.Errorf("--server %s: the check question got no query id (%s: %s)", serverURL, rec.ErrorCode, rec.ErrorMessage)
	}
	deadline := time.Now().Add(wait)
	for {
		_, err := store.GetQuery(ctx, rec.QueryID)
		if err == nil {
			return nil
		}
		if !errors.Is(err, ragtime.ErrNotFound) {
			return fmt.Errorf("looking up the server's check query %s in --database-url %s: %w", rec.QueryID, dbURL, err)
		}
		if time.Now().After(deadline) {
			return &NotRecordedError{Server: serverURL, Database: dbURL, QueryID: rec.QueryID, Wait: wait}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
