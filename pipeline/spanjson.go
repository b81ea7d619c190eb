package pipeline

import (
	"bytes"
	"encoding/json"
	"strconv"

	"ragtime/internal/jsonappend"
)

// AppendJSON appends sp as encoding/json (HTML escaping off) writes it,
// without reflection: a span is encoded nine times per ask (its stage
// event and the done event's stages). ok is false when a figure is NaN or
// infinite or an attribute has a type jsonappend does not write; encoding/json
// then has the last word (MarshalJSON).
func (sp Span) AppendJSON(b []byte) (out []byte, ok bool) {
	b = append(b, `{"name":`...)
	b = jsonappend.AppendString(b, sp.Name)
	b = append(b, `,"seq":`...)
	b = strconv.AppendInt(b, int64(sp.Seq), 10)
	b = append(b, `,"start_ms":`...)
	if b, ok = jsonappend.AppendFloat(b, sp.StartMs); !ok {
		return b, false
	}
	b = append(b, `,"duration_ms":`...)
	if b, ok = jsonappend.AppendFloat(b, sp.DurationMs); !ok {
		return b, false
	}
	if sp.figs != nil {
		o := attrOut{b: b, ok: true}
		sp.figs.attrs(sp.Name, &o)
		if b = o.b; !o.ok {
			return b, false
		}
		if o.n > 0 {
			b = append(b, '}')
		}
	} else if len(sp.Attrs) > 0 {
		b = append(b, `,"attrs":`...)
		if b, ok = jsonappend.AppendObject(b, sp.Attrs); !ok {
			return b, false
		}
	}
	return append(b, '}'), true
}

// MarshalJSON writes sp through AppendJSON, and through encoding/json's
// reflection (the same bytes) only for a span AppendJSON does not frame.
func (sp Span) MarshalJSON() ([]byte, error) {
	if b, ok := sp.AppendJSON(make([]byte, 0, 160)); ok {
		return b, nil
	}
	sp.materialize()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // the caller's encoder escapes, if it does
	if err := enc.Encode(spanFields(sp)); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte{'\n'}), nil
}

// spanFields is Span without its methods: encoding/json's view of it.
type spanFields Span

// AppendJSON appends d as encoding/json (HTML escaping off) writes it,
// without reflection: the done event is written once per ask, and through
// encoding/json it cost a reflection over the figures and a second pass
// (the compaction of a MarshalJSON's output) over every span. ok is false
// when a figure or a span cannot be framed so: the caller then encodes d
// with encoding/json. (DoneEvent has no MarshalJSON: a struct embedding it,
// as the chat completion's ragtime object does, would take it over.)
func (d DoneEvent) AppendJSON(b []byte) (out []byte, ok bool) {
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
		if b, ok = sp.AppendJSON(b); !ok {
			return b, false
		}
	}
	return append(b, "]}"...), true
}
