package ragtime

// Stage names, in pipeline order (docs/design.md's measurement contract).
const (
	StageAccept     = "accept"
	StageQueue      = "queue"
	StageEmbed      = "embed"
	StageSearch     = "search"
	StageRerank     = "rerank"
	StageAssemble   = "assemble"
	StageLLMConnect = "llm_connect"
	StageLLMPrefill = "llm_prefill"
	StageLLMDecode  = "llm_decode"
)

// Stages lists the stage names in pipeline order.
func Stages() []string {
	return []string{StageAccept, StageQueue, StageEmbed, StageSearch, StageRerank,
		StageAssemble, StageLLMConnect, StageLLMPrefill, StageLLMDecode}
}

// Query statuses as stored.
const (
	StatusOK        = "ok"
	StatusError     = "error"
	StatusCancelled = "cancelled"
)
