// Package pipelinetest helps the tests of the pipeline's adapters: FullRecord
// is a ragtime.Record with every field set, so that a test carrying it
// through storage, the stream or the API fails when a field is lost on the
// way, including a field added after the test was written.
package pipelinetest
