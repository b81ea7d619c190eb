package pipeline

import (
	"bytes"
	"encoding/json"
	"strconv"

	"ragtime"
	"ragtime/internal/jsonappend"
)

// The stream's encoders: a span is encoded nine times per ask (its stage
// event and the done event's stages), the done event once, and through
// encoding/json each cost a reflection over the figures and, for a span
// with a MarshalJSON, a second pass (the compaction of its output). These
// write what encoding/json (HTML escaping off) writes, without reflection;
// BenchmarkStreamStage and BenchmarkStreamDone (api) measure them. The
// types they encode stay plain: ragtime.Span and ragtime.DoneEvent have no
// methods here, and StageSpan holds the stage's figures beside its span.

// StageSpan is a stage's span as a Stream receives it (Stream.Stage). Until
// the query's record is made, a stage's attrs may be kept unboxed in the
// query's figures (stageFigs) instead of a map: Attrs is nil then, and
// AppendJSON and MarshalJSON frame the attrs from the figures. Recorded
// returns the span with its attrs map, as the record holds it.
type StageSpan struct {
	ragtime.Span

	// figs, on a span the query has yet to record, holds its attrs (Attrs
	// is then nil): see stageFigs.
	figs *stageFigs
}

// Recorded returns sp with the attrs map its figures stand for.
func (sp StageSpan) Recorded() ragtime.Span {
	if sp.figs != nil {
		sp.Attrs = sp.figs.attrsMap(sp.Name)
	}
	return sp.Span
}

// AppendJSON appends sp as encoding/json writes sp.Recorded(). ok is false
// when a figure is NaN or infinite or an attribute has a type jsonappend
// does not write; encoding/json then has the last word (MarshalJSON).
func (sp StageSpan) AppendJSON(b []byte) (out []byte, ok bool) {
	if sp.figs == nil {
		return AppendSpanJSON(b, sp.Span)
	}
	if b, ok = appendSpanHead(b, &sp.Span); !ok {
		return b, false
	}
	o := attrOut{b: b, ok: true}
	sp.figs.attrs(sp.Name, &o)
	if b = o.b; !o.ok {
		return b, false
	}
	if o.n > 0 {
		b = append(b, '}')
	}
	return append(b, '}'), true
}

// MarshalJSON writes sp through AppendJSON, and through encoding/json's
// reflection over sp.Recorded() (the same bytes) only for a span
// AppendJSON does not frame.
func (sp StageSpan) MarshalJSON() ([]byte, error) {
	if b, ok := sp.AppendJSON(make([]byte, 0, 160)); ok {
		return b, nil
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // the caller's encoder escapes, if it does
	if err := enc.Encode(sp.Recorded()); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte{'\n'}), nil
}

// AppendSpanJSON appends sp as encoding/json (HTML escaping off) writes
// it. ok is false when a figure is NaN or infinite or an attribute has a
// type jsonappend does not write: the caller then encodes sp with
// encoding/json.
func AppendSpanJSON(b []byte, sp ragtime.Span) (out []byte, ok bool) {
	if b, ok = appendSpanHead(b, &sp); !ok {
		return b, false
	}
	if len(sp.Attrs) > 0 {
		b = append(b, `,"attrs":`...)
		if b, ok = jsonappend.AppendObject(b, sp.Attrs); !ok {
			return b, false
		}
	}
	return append(b, '}'), true
}

// appendSpanHead appends sp's object up to its attrs.
func appendSpanHead(b []byte, sp *ragtime.Span) (out []byte, ok bool) {
	b = append(b, `{"name":`...)
	b = jsonappend.AppendString(b, sp.Name)
	b = append(b, `,"seq":`...)
	b = strconv.AppendInt(b, int64(sp.Seq), 10)
	b = append(b, `,"start_ms":`...)
	if b, ok = jsonappend.AppendFloat(b, sp.StartMs); !ok {
		return b, false
	}
	b = append(b, `,"duration_ms":`...)
	return jsonappend.AppendFloat(b, sp.DurationMs)
}

// AppendDoneJSON appends d as encoding/json (HTML escaping off) writes
// it. ok is false when a figure or a span cannot be framed so: the caller
// then encodes d with encoding/json.
func AppendDoneJSON(b []byte, d *ragtime.DoneEvent) (out []byte, ok bool) {
	f := &d.Figures
	b = append(b, `{"query_id":`...)
	b = jsonappend.AppendString(b, d.QueryID)
	b = append(b, `,"model":`...)
	b = jsonappend.AppendString(b, d.Model)
	for _, x := range [...]struct {
		key string
		p   *float64
	}{
		{`,"ttft_ms":`, f.TTFTMs}, {`,"first_token_ms":`, f.FirstTokenMs}, {`,"e2e_ms":`, &f.E2EMs},
		{`,"accept_ms":`, &f.AcceptMs}, {`,"queue_ms":`, &f.QueueMs}, {`,"retrieval_ms":`, &f.RetrievalMs},
		{`,"gen_ttft_ms":`, &f.GenTTFTMs}, {`,"llm_prefill_ms":`, &f.LLMPrefillMs}, {`,"overhead_ms":`, f.OverheadMs},
		{`,"reasoning_ms":`, f.ReasoningMs}, {`,"retrieval_share":`, f.RetrievalShare},
		{`,"prefill_share":`, f.PrefillShare}, {`,"prefill_unexplained_ms":`, f.PrefillUnexplainedMs},
	} {
		b = append(b, x.key...)
		if x.p == nil {
			b = append(b, "null"...)
		} else if b, ok = jsonappend.AppendFloat(b, *x.p); !ok {
			return b, false
		}
	}
	if b, ok = appendBudget(b, f); !ok {
		return b, false
	}
	u := &f.Usage
	b = append(b, `,"usage":{"prompt_tokens":`...)
	b = strconv.AppendInt(b, int64(u.PromptTokens), 10)
	b = append(b, `,"completion_tokens":`...)
	b = strconv.AppendInt(b, int64(u.CompletionTokens), 10)
	b = append(b, `,"cached_tokens":`...)
	if u.CachedTokens == nil {
		b = append(b, "null"...)
	} else {
		b = strconv.AppendInt(b, int64(*u.CachedTokens), 10)
	}
	b = append(b, `,"reasoning_tokens":`...)
	b = strconv.AppendInt(b, int64(u.ReasoningTokens), 10)
	if u.CacheCreationTokens != 0 {
		b = append(b, `,"cache_creation_tokens":`...)
		b = strconv.AppendInt(b, int64(u.CacheCreationTokens), 10)
	}
	b = append(b, `},"stages":`...)
	if d.Stages == nil {
		return append(b, "null}"...), true
	}
	b = append(b, '[')
	for i, sp := range d.Stages {
		if i > 0 {
			b = append(b, ',')
		}
		if b, ok = AppendSpanJSON(b, sp); !ok {
			return b, false
		}
	}
	return append(b, "]}"...), true
}
