package pipeline

import "ragtime"

// The vocabulary moved to package ragtime. These aliases keep code that
// names it through pipeline compiling until /work/wt/vocab-rewrite.sh has
// rewritten the references; that script deletes this file.

type Error = ragtime.Error

const (
	CodeCancelled      = ragtime.CodeCancelled
	CodeInternal       = ragtime.CodeInternal
	CodeClientStalled  = ragtime.CodeClientStalled
	CodeServerShutdown = ragtime.CodeServerShutdown
)

const (
	StageAccept     = ragtime.StageAccept
	StageQueue      = ragtime.StageQueue
	StageEmbed      = ragtime.StageEmbed
	StageSearch     = ragtime.StageSearch
	StageRerank     = ragtime.StageRerank
	StageAssemble   = ragtime.StageAssemble
	StageLLMConnect = ragtime.StageLLMConnect
	StageLLMPrefill = ragtime.StageLLMPrefill
	StageLLMDecode  = ragtime.StageLLMDecode
)

const (
	StatusOK        = ragtime.StatusOK
	StatusError     = ragtime.StatusError
	StatusCancelled = ragtime.StatusCancelled
)
