package tracing

import (
	"fmt"
	"maps"
	"net"
	"net/url"
	"slices"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"ragtime"
)

// Attribute keys of ragtime's own figures (the GenAI, server and error keys
// are the semantic conventions').
const (
	// AttrPrefix prefixes a stage's attrs (docs/timings.md) on its span:
	// search's k becomes ragtime.k.
	AttrPrefix     = "ragtime."
	AttrQueryID    = attribute.Key("ragtime.query_id")
	AttrStatus     = attribute.Key("ragtime.status")
	AttrErrorCode  = attribute.Key("ragtime.error.code")
	AttrTTFTMs     = attribute.Key("ragtime.ttft_ms")
	AttrFirstMs    = attribute.Key("ragtime.first_token_ms")
	AttrRetrieval  = attribute.Key("ragtime.retrieval_ms")
	AttrShare      = attribute.Key("ragtime.retrieval_share")
	AttrPrefill    = attribute.Key("ragtime.prefill_share")
	AttrGenTTFT    = attribute.Key("ragtime.gen_ttft_ms")
	AttrOverhead   = attribute.Key("ragtime.overhead_ms")
	AttrReasoning  = attribute.Key("ragtime.reasoning_ms")
	AttrE2EMs      = attribute.Key("ragtime.e2e_ms")
	AttrStartMs    = attribute.Key("ragtime.start_ms")
	AttrDurationMs = attribute.Key("ragtime.duration_ms")
)

// rootAttrs are the query's figures on its root span.
func rootAttrs(rec ragtime.Record) []attribute.KeyValue {
	kv := []attribute.KeyValue{
		AttrQueryID.String(rec.QueryID), AttrStatus.String(rec.Status),
		AttrE2EMs.Float64(rec.E2EMs), AttrRetrieval.Float64(rec.RetrievalMs), AttrGenTTFT.Float64(rec.GenTTFTMs),
		attribute.Int("ragtime.top_k", rec.TopK), attribute.Int("ragtime.rerank_top_n", rec.RerankTopN),
		semconv.GenAIRequestModel(rec.Model), semconv.GenAIProviderNameKey.String(rec.Provider),
	}
	for _, f := range []struct {
		key attribute.Key
		v   *float64
	}{
		{AttrTTFTMs, rec.TTFTMs}, {AttrFirstMs, rec.FirstTokenMs}, {AttrShare, rec.RetrievalShare},
		{AttrPrefill, rec.PrefillShare}, {AttrOverhead, rec.OverheadMs}, {AttrReasoning, rec.ReasoningMs},
	} {
		if f.v != nil {
			kv = append(kv, f.key.Float64(*f.v))
		}
	}
	if rec.ErrorCode != "" {
		kv = append(kv, AttrErrorCode.String(rec.ErrorCode))
	}
	return kv
}

// stageAttrs are a stage's attrs, prefixed, with its stored start and
// duration; the search span also names the embedder, and the embed span the
// store, so that either says what was searched with what.
func stageAttrs(s ragtime.Span, rec ragtime.Record) []attribute.KeyValue {
	kv := make([]attribute.KeyValue, 0, len(s.Attrs)+3)
	kv = append(kv, AttrStartMs.Float64(s.StartMs), AttrDurationMs.Float64(s.DurationMs))
	for _, k := range slices.Sorted(maps.Keys(s.Attrs)) {
		kv = append(kv, attrOf(AttrPrefix+k, s.Attrs[k]))
	}
	switch s.Name {
	case ragtime.StageEmbed:
		kv = append(kv, semconv.GenAIOperationNameEmbeddings)
		if store := stageAttr(rec, ragtime.StageSearch, "store"); store != nil && s.Attrs["store"] == nil {
			kv = append(kv, attrOf(AttrPrefix+"store", store))
		}
	case ragtime.StageSearch:
		if emb := stageAttr(rec, ragtime.StageEmbed, "embedder"); emb != nil && s.Attrs["embedder"] == nil {
			kv = append(kv, attrOf(AttrPrefix+"embedder", emb))
		}
	}
	return kv
}

// stageAttr is the attr key of the record's stage name, or nil.
func stageAttr(rec ragtime.Record, name, key string) any {
	for _, s := range rec.Stages {
		if s.Name == name {
			return s.Attrs[key]
		}
	}
	return nil
}

// chatAttrs are the GenAI semantic conventions' attributes of the chat span.
func (t *Tracer) chatAttrs(rec ragtime.Record, requested string) []attribute.KeyValue {
	kv := []attribute.KeyValue{
		semconv.GenAIOperationNameChat,
		semconv.GenAIProviderNameKey.String(rec.Provider),
		semconv.GenAIRequestModel(requested),
		semconv.GenAIResponseModel(rec.Model),
		semconv.GenAIUsageInputTokens(rec.Usage.PromptTokens),
		semconv.GenAIUsageOutputTokens(rec.Usage.CompletionTokens),
	}
	if rec.MaxTokens > 0 {
		kv = append(kv, semconv.GenAIRequestMaxTokens(rec.MaxTokens))
	}
	if rec.Usage.CachedTokens != nil {
		kv = append(kv, semconv.GenAIUsageCacheReadInputTokens(*rec.Usage.CachedTokens))
	}
	if rec.Usage.CacheCreationTokens > 0 {
		kv = append(kv, semconv.GenAIUsageCacheCreationInputTokens(rec.Usage.CacheCreationTokens))
	}
	if rec.Usage.ReasoningTokens > 0 {
		kv = append(kv, attribute.Int("ragtime.usage.reasoning_tokens", rec.Usage.ReasoningTokens))
	}
	if rec.FinishReason != "" {
		kv = append(kv, semconv.GenAIResponseFinishReasons(rec.FinishReason))
	}
	if rec.TTFTMs != nil {
		kv = append(kv, AttrTTFTMs.Float64(*rec.TTFTMs))
	}
	if rec.RequestID != "" {
		kv = append(kv, attribute.String("ragtime.request_id", rec.RequestID))
	}
	if rec.UpstreamStatus != 0 {
		kv = append(kv, semconv.HTTPResponseStatusCode(rec.UpstreamStatus))
	}
	if t.llmAddress != "" {
		kv = append(kv, semconv.ServerAddress(t.llmAddress))
		if t.llmPort > 0 {
			kv = append(kv, semconv.ServerPort(t.llmPort))
		}
	}
	return kv
}

// setError marks span failed with the stable code as error.type and
// ragtime.error.code, and the message as the status description.
func setError(span trace.Span, e *ragtime.Error) {
	span.SetStatus(codes.Error, e.Message)
	span.SetAttributes(semconv.ErrorTypeKey.String(e.Code), AttrErrorCode.String(e.Code))
}

// attrOf turns a stage attr's value (numbers, bools and strings, as the
// pipeline makes them) into an attribute.
func attrOf(key string, v any) attribute.KeyValue {
	switch x := v.(type) {
	case string:
		return attribute.String(key, x)
	case bool:
		return attribute.Bool(key, x)
	case int:
		return attribute.Int(key, x)
	case int64:
		return attribute.Int64(key, x)
	case float64:
		return attribute.Float64(key, x)
	case float32:
		return attribute.Float64(key, float64(x))
	default:
		return attribute.String(key, fmt.Sprint(x))
	}
}

// hostPort is the host and port of a base URL (the scheme's default port
// when it names none); "" when it has no host.
func hostPort(base string) (string, int) {
	u, err := url.Parse(base)
	if err != nil || u.Host == "" {
		return "", 0
	}
	host, portText, err := net.SplitHostPort(u.Host)
	if err != nil {
		host, portText = u.Host, map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	port, _ := strconv.Atoi(portText)
	return host, port
}
