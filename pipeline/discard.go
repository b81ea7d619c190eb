package pipeline

import "ragtime"

// Discard is a Stream that drops every event: for running the pipeline
// where only the record matters (the sweep, tests).
type Discard struct{}

func (Discard) Meta(Meta) error           { return nil }
func (Discard) Stage(StageSpan) error     { return nil }
func (Discard) Sources([]Source) error    { return nil }
func (Discard) Delta(Delta) error         { return nil }
func (Discard) Done(ragtime.Record) error { return nil }
func (Discard) Fail(*ragtime.Error) error { return nil }
