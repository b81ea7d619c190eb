package ragtime

// Error codes, the stable strings a client reads in Error.Code and the
// record stores as error_code. They are declared here, once; the parts that
// produce them refer to these names. The API's own refusals (auth_missing,
// top_k_invalid, ...) are declared with the API, which alone answers them.

// Codes of the pipeline itself.
const (
	// CodeCancelled: the client went away, or the query's context was
	// cancelled; the query is stored with status cancelled.
	CodeCancelled      = "cancelled"
	CodeInternal       = "internal"
	CodeClientStalled  = "client_stalled"
	CodeServerShutdown = "server_shutdown"
	// CodeResumeGap: a resumed stream asked for events no longer held.
	CodeResumeGap = "resume_gap"
)

// Codes of a stage that failed, or ran past the query's deadline, without
// a part saying more (a part's own code, such as llm_timeout, wins).
const (
	CodeAcceptFailed     = "accept_failed"
	CodeQueueFailed      = "queue_failed"
	CodeEmbedFailed      = "embed_failed"
	CodeSearchFailed     = "search_failed"
	CodeRerankFailed     = "rerank_failed"
	CodeAssembleFailed   = "assemble_failed"
	CodeLLMConnectFailed = "llm_connect_failed"
	CodeLLMPrefillFailed = "llm_prefill_failed"
	CodeLLMDecodeFailed  = "llm_decode_failed"

	CodeAcceptTimeout     = "accept_timeout"
	CodeQueueTimeout      = "queue_timeout"
	CodeEmbedTimeout      = "embed_timeout"
	CodeSearchTimeout     = "search_timeout"
	CodeRerankTimeout     = "rerank_timeout"
	CodeAssembleTimeout   = "assemble_timeout"
	CodeLLMConnectTimeout = "llm_connect_timeout"
	CodeLLMPrefillTimeout = "llm_prefill_timeout"
	CodeLLMDecodeTimeout  = "llm_decode_timeout"
)

// stageCodes are each stage's failed and timeout codes.
var stageCodes = map[string]struct{ failed, timeout string }{
	StageAccept:     {CodeAcceptFailed, CodeAcceptTimeout},
	StageQueue:      {CodeQueueFailed, CodeQueueTimeout},
	StageEmbed:      {CodeEmbedFailed, CodeEmbedTimeout},
	StageSearch:     {CodeSearchFailed, CodeSearchTimeout},
	StageRerank:     {CodeRerankFailed, CodeRerankTimeout},
	StageAssemble:   {CodeAssembleFailed, CodeAssembleTimeout},
	StageLLMConnect: {CodeLLMConnectFailed, CodeLLMConnectTimeout},
	StageLLMPrefill: {CodeLLMPrefillFailed, CodeLLMPrefillTimeout},
	StageLLMDecode:  {CodeLLMDecodeFailed, CodeLLMDecodeTimeout},
}

// FailedCode is the code of stage failing with an error no part
// classified; CodeInternal for a failure outside any stage.
func FailedCode(stage string) string {
	if c, ok := stageCodes[stage]; ok {
		return c.failed
	}
	return CodeInternal
}

// TimeoutCode is the code of the query's deadline passing during stage;
// CodeInternal outside any stage.
func TimeoutCode(stage string) string {
	if c, ok := stageCodes[stage]; ok {
		return c.timeout
	}
	return CodeInternal
}

// Codes of the generators (llm).
const (
	// CodeLLMAuth: the provider rejected the API key (HTTP 401 or 403).
	CodeLLMAuth = "llm_auth"
	// CodeLLMModelNotFound: the provider does not serve the requested model.
	CodeLLMModelNotFound = "llm_model_not_found"
	// CodeLLMRateLimited: the provider answered HTTP 429.
	CodeLLMRateLimited = "llm_rate_limited"
	// CodeLLMUnavailable: the provider failed (HTTP 5xx) or dropped the
	// connection before or during the answer.
	CodeLLMUnavailable = "llm_unavailable"
	// CodeLLMTimeout: the provider sent nothing for longer than the
	// configured timeout, or the caller's deadline passed.
	CodeLLMTimeout = "llm_timeout"
	// CodeLLMConnect: no connection could be made (refused, DNS, TLS, proxy).
	CodeLLMConnect = "llm_connect"
	// CodeLLMBadStream: the response was not a well-formed stream of the
	// provider's format, or it carried an error object mid-stream.
	CodeLLMBadStream = "llm_bad_stream"
	// CodeLLMBadRequest: the provider rejected the request itself (another
	// 4xx, such as a prompt longer than the model's context window).
	CodeLLMBadRequest = "llm_bad_request"
	// CodeLLMCancelled: the caller's context was cancelled; the error wraps
	// context.Canceled.
	CodeLLMCancelled = "llm_cancelled"
)

// Codes of the remote embedders (retrieval).
const (
	CodeEmbedAuth          = "embed_auth"
	CodeEmbedModelNotFound = "embed_model_not_found"
	CodeEmbedUnavailable   = "embed_unavailable"
	CodeEmbedBadResponse   = "embed_bad_response"
	CodeEmbedRateLimited   = "embed_rate_limited"
	CodeEmbedBadRequest    = "embed_bad_request"
	// CodeEmbedTimeout (embed_timeout) is declared with the stage codes.
)

// Codes of the HTTP reranker (rerank).
const (
	CodeRerankAuth        = "rerank_auth"
	CodeRerankUnavailable = "rerank_unavailable"
	CodeRerankBadResponse = "rerank_bad_response"
	CodeRerankRejected    = "rerank_rejected"
	// CodeRerankTimeout (rerank_timeout) is declared with the stage codes.
)

// Codes of the vector store (retrieval/qdrant).
const (
	CodeStoreUnavailable       = "store_unavailable"
	CodeStoreCollectionMissing = "store_collection_missing"
	CodeStoreDimensionMismatch = "store_dimension_mismatch"
	CodeStoreTimeout           = "store_timeout"
	CodeStoreAuth              = "store_auth"
	CodeStoreSettingsMismatch  = "store_settings_mismatch"
)

// Codes of the API's client (api.Client), for a failure on its side of
// the connection.
const (
	CodeServerUnreachable = "server_unreachable"
	CodeServerRejected    = "server_rejected"
	CodeStreamBroken      = "stream_broken"
)
