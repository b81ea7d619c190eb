// Package ragtime is the vocabulary every other package speaks: the stage
// and status names a query is measured and stored with, the error codes a
// client reads, and Error with its Kind, which says what a failure means
// whichever part reported it. It holds types and names, with no behaviour
// beyond what they need (a record's done event, the nearest-rank percentile
// every reader of the figures shares), and imports nothing of ragtime, so
// any package can import it without pulling in the runner (pipeline) or a
// part.
//
// It also holds the record of a finished query (Record, its Figures, Spans
// and Usage), the Recorder it is handed to, and the read types the API
// returns from the store (QueryPage, StagePercentile, RecorderStats, ...):
// plain types with their JSON and db tags, whose fast encoders, where a
// benchmark keeps them, are the runner's (pipeline/spanjson.go).
//
// The api maps a Kind to its HTTP status in one table (api/status.go); the
// parts set the Kind where they know it, so nothing downstream infers a
// failure's meaning from its code's spelling.
package ragtime
