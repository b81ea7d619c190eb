package postgres

import (
	"fmt"

	"ragtime"
)

// Exported for the tests of package postgres_test, which read the plans of
// the statements GetQuery runs.
var (
	SelectQuery  = selectQuery
	SelectStages = selectStages
	IDWindow     = idWindow
	RollupBucket = rollupBucket
	TotalsSQL    = fmt.Sprintf(totalsSQL, "")
	SeriesSQL    = fmt.Sprintf(seriesSQL, "")
)

// CopiedColumnTypes are the columns the recorder writes in COPY's binary
// format, by table, and the type it writes each as.
func CopiedColumnTypes() map[string][][2]string {
	queries := make([][2]string, len(queryColumns))
	for i, c := range queryColumns {
		queries[i] = [2]string{c.name, c.pgType}
	}
	stageTypes := []string{"uuid", "integer", "text", "double precision", "double precision", "jsonb", "timestamp with time zone"}
	stages := make([][2]string, len(stageColumns))
	for i, c := range stageColumns {
		stages[i] = [2]string{c, stageTypes[i]}
	}
	return map[string][][2]string{"queries": queries, "query_stages": stages}
}

// EncodeBatch turns recs into what the recorder sends for them — the COPY
// rows, in a buffer reused from batch to batch as a writer's is, and the
// roll-up upsert's arguments — without sending it.
func EncodeBatch(recs []ragtime.Record) error {
	e := encode(recs, encodeBuf())
	defer releaseBuf(e.buf)
	if len(e.invalid) > 0 {
		return e.invalid[0].err
	}
	rows := make([]*ragtime.Record, len(e.rows))
	for i := range e.rows {
		rows[i] = e.rows[i].rec
	}
	_ = rollupArgs(rollupsOf(rows))
	return nil
}

// InFlight is how many records the writers have taken from the queue and
// not yet settled.
func (r *Recorder) InFlight() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.inflight
}

// MigrateFS and LastParallelVersion are exported for the tests of the
// migration order.
var (
	MigrateFS           = migrateFS
	LastParallelVersion = int64(lastParallelVersion)
)
