// Package postgres stores ragtime's query timings in PostgreSQL: it applies
// the embedded migrations, records finished queries through a bounded,
// non-blocking batch writer, and reads them back for the API and dashboards.
//
// The request path never waits on the database: Recorder.Record only queues,
// and a background writer retries while PostgreSQL is away.
package postgres
