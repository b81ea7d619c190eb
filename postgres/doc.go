// Package postgres stores ragtime's query timings in PostgreSQL: it applies
// the embedded migrations, records finished queries through a bounded,
// non-blocking batch writer, and reads them back for the API and dashboards
// as the read types pipeline declares. The queries table's columns are
// derived from ragtime.Record's db tags (columns.go).
//
// The request path never waits on the database: Recorder.Record only queues,
// and a background writer writes batches. With a spool (package spool),
// what PostgreSQL cannot take now goes to disk and a replayer writes it
// when PostgreSQL is back; Bootstrap creates and migrates the database for
// a process that started while it was away. docs/recording.md says when a
// record counts as safe.
package postgres
