package pipeline

import (
	"bytes"
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"ragtime"
	"ragtime/pipeline/pipelinetest"
)

// reflected is what encoding/json writes for v through reflection alone.
func reflected(t *testing.T, v any, escapeHTML bool) string {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(escapeHTML)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return strings.TrimSuffix(buf.String(), "\n")
}

// TestSpanJSONMatchesReflection: a span framed by hand is byte for byte
// what encoding/json's reflection writes, alone and inside a done event,
// with HTML escaping off and on; spans it cannot frame go to reflection,
// and one that JSON cannot hold is still an error.
func TestSpanJSONMatchesReflection(t *testing.T) {
	t.Parallel()
	spans := []ragtime.Span{
		{Name: "queue", Seq: 0, StartMs: 0, DurationMs: 0, Attrs: map[string]any{"limit": 0}},
		{Name: "accept", Seq: 0},
		{Name: "embed", Seq: 2, StartMs: 0.211, DurationMs: 12.5, Attrs: map[string]any{"embedder": "openai:<m&x>", "dim": 512, "reused": true, "dns_ms": 0.0, "connect_ms": 1e-7, "tls_ms": 3e21}},
		{Name: "search", Seq: 3, StartMs: 1234567.891, DurationMs: 0.000001, Attrs: map[string]any{"k": 4, "hits": int64(4), "store": "embedded", "exact": false, "ef": 64}},
		{Name: "llm_prefill", Seq: 7, StartMs: -0.5, DurationMs: 150.25, Attrs: map[string]any{"status": 200, "server_prefill_ms": 98.765432, "z\u2028key": "v\"al\\ue\n"}},
		{Name: "llm_decode", Seq: 8, Attrs: map[string]any{}},
		{Name: "x <list>", Attrs: map[string]any{"list": []string{"a<b"}, "n": 1}},
		{Name: "x", Attrs: map[string]any{"nested": map[string]any{"a": nil}}},
	}
	for i, sp := range spans {
		got, framed := AppendSpanJSON(nil, sp)
		if framed != (i < 6) {
			t.Errorf("%s: framed by hand %v", sp.Name, framed)
		}
		if want := reflected(t, sp, false); framed && string(got) != want {
			t.Errorf("%s:\n got %s\nwant %s", sp.Name, got, want)
		}
		for _, esc := range []bool{false, true} {
			if got, want := reflected(t, StageSpan{Span: sp}, esc), reflected(t, sp, esc); got != want {
				t.Errorf("%s as a stage span (HTML escaping %v):\n got %s\nwant %s", sp.Name, esc, got, want)
			}
		}
	}
	// The done event framed by hand against encoding/json's reflection:
	// a field added to Figures and not
	// framed fails here.
	ttft, share, cached := 43.5, 0.25, 1024
	figures := []ragtime.Figures{{}, {TTFTMs: &ttft, FirstTokenMs: &ttft, E2EMs: 342.5, AcceptMs: 0.05, QueueMs: 1e-7, RetrievalMs: 6.5,
		GenTTFTMs: 37, LLMPrefillMs: 15.2, OverheadMs: &share, ReasoningMs: &share, RetrievalShare: &share, PrefillShare: &share,
		PrefillUnexplainedMs: &ttft, Usage: ragtime.Usage{PromptTokens: 381, CompletionTokens: 64, CachedTokens: &cached, ReasoningTokens: 3, CacheCreationTokens: 7}}}
	for _, fig := range figures {
		for _, stages := range [][]ragtime.Span{nil, {}, spans[:6], spans} {
			done := ragtime.DoneEvent{QueryID: "q<1>", Model: "m", Figures: fig, Stages: stages}
			got, ok := AppendDoneJSON(nil, &done)
			if ok != (len(stages) <= 6) {
				t.Errorf("done event of %d stages: framed by hand %v", len(stages), ok)
			}
			if want := reflected(t, done, false); ok && string(got) != want {
				t.Errorf("done event (%d stages):\n got %s\nwant %s", len(stages), got, want)
			}
		}
	}
	nan := math.NaN()
	if _, ok := AppendDoneJSON(nil, &ragtime.DoneEvent{Figures: ragtime.Figures{TTFTMs: &nan}}); ok {
		t.Error("a done event with a NaN figure was framed")
	}
	for _, sp := range []ragtime.Span{{Name: "x", StartMs: math.NaN()}, {Name: "x", Attrs: map[string]any{"f": math.Inf(1)}}} {
		if _, err := json.Marshal(sp); err == nil {
			t.Errorf("%+v: encoded, want an error", sp)
		}
		if _, err := json.Marshal(StageSpan{Span: sp}); err == nil {
			t.Errorf("%+v as a stage span: encoded, want an error", sp)
		}
	}
}

// TestStageFigsFrameAsTheirMaps: a span whose attrs are still the query's
// figures (stageFigs) is framed byte for byte as the span with the map
// they stand for, which is what the stages' maps were: the stage events, a
// resume's replay and the record do not change with the representation.
func TestStageFigsFrameAsTheirMaps(t *testing.T) {
	t.Parallel()
	call := Call{Made: true, Conn: ragtime.ConnInfo{Reused: false, DNS: 1234567, Connect: 2500 * time.Microsecond, TLS: 0, FreshRetry: true},
		Retries: 2, ServerWait: 5_900_123 * time.Nanosecond}
	for _, c := range []struct {
		name  string
		attrs map[string]any
		set   func(f *stageFigs)
	}{
		{ragtime.StageEmbed, map[string]any{"embedder": "openai:<m&x>", "dim": 512, "reused": false, "dns_ms": 1.235, "connect_ms": 2.5, "tls_ms": 0.0,
			"fresh_retry": true, "retries": 2, "server_wait_ms": 5.9},
			func(f *stageFigs) { f.embed, f.dim, f.dimKnown = call, 512, true }},
		{ragtime.StageEmbed, map[string]any{"embedder": "openai:<m&x>", "reused": true, "dns_ms": 0.0, "connect_ms": 0.0, "tls_ms": 0.0},
			func(f *stageFigs) { f.embed = Call{Made: true, Conn: ragtime.ConnInfo{Reused: true}} }},
		{ragtime.StageEmbed, map[string]any{"embedder": "openai:<m&x>", "dim": 3},
			func(f *stageFigs) { f.dim, f.dimKnown = 3, true }},
		{ragtime.StageEmbed, map[string]any{"embedder": "openai:<m&x>", "dim": 3, "cache": "hit"},
			func(f *stageFigs) { f.dim, f.dimKnown, f.embed.Cache = 3, true, CacheHit }},
		{ragtime.StageSearch, map[string]any{"k": 4, "hits": 3, "store": "embedded", "exact": false, "ef": 64, "a": "<x>", "z": 1.5},
			func(f *stageFigs) { f.k, f.hits = 4, 3 }},
		{ragtime.StageRerank, map[string]any{"candidates": 4, "top_n": 0, "reranker": "off"},
			func(f *stageFigs) { f.candidates, f.reranker = 4, "off" }},
		{ragtime.StageAssemble, map[string]any{"chunks": 4, "dropped": 1, "context_tokens": 316, "prompt_tokens": 381},
			func(f *stageFigs) { f.chunks, f.dropped, f.contextTokens, f.promptTokens = 4, 1, 316, 381 }},
		{ragtime.StageLLMConnect, map[string]any{"reused": true, "dns_ms": 0.0, "connect_ms": 0.0, "tls_ms": 0.0},
			func(f *stageFigs) { f.conn = ragtime.ConnInfo{Reused: true} }},
		{ragtime.StageLLMConnect, map[string]any{"reused": false, "dns_ms": 1.235, "connect_ms": 2.5, "tls_ms": 0.0, "fresh_retry": true, "retries": 2},
			func(f *stageFigs) { f.conn, f.retries = call.Conn, 2 }},
		{ragtime.StageLLMConnect, map[string]any{"reused": false, "dns_ms": 0.0, "connect_ms": 0.0, "tls_ms": 0.0, "prewarmed": true, "prewarm_connect_ms": 0.25},
			func(f *stageFigs) { f.conn = ragtime.ConnInfo{Prewarmed: true, Prewarm: 250 * time.Microsecond} }},
		{ragtime.StageLLMPrefill, map[string]any{"status": 200}, func(f *stageFigs) { f.status = 200 }},
		{ragtime.StageLLMPrefill, map[string]any{}, func(*stageFigs) {}},
	} {
		p := &Pipeline{cfg: Config{EmbedderName: "openai:<m&x>", StoreName: "embedded",
			SearchAttrs: map[string]any{"exact": false, "ef": 64, "a": "<x>", "z": 1.5, "k": "shadowed", "store": "shadowed"}}}
		p.searchKeys = searchKeys(p.cfg.SearchAttrs)
		f := &stageFigs{p: p}
		c.set(f)
		lazy := StageSpan{Span: ragtime.Span{Name: c.name, Seq: 2, StartMs: 0.25, DurationMs: 1.5}, figs: f}
		want := ragtime.Span{Name: c.name, Seq: 2, StartMs: 0.25, DurationMs: 1.5, Attrs: c.attrs}
		got, ok := lazy.AppendJSON(nil)
		wantJSON, _ := AppendSpanJSON(nil, want)
		if !ok || string(got) != string(wantJSON) {
			t.Errorf("%s framed from its figures (%v):\n got %s\nwant %s", c.name, ok, got, wantJSON)
		}
		if got, want := reflected(t, lazy, true), reflected(t, want, true); got != want {
			t.Errorf("%s through encoding/json:\n got %s\nwant %s", c.name, got, want)
		}
		if rec := lazy.Recorded(); !reflect.DeepEqual(rec.Attrs, c.attrs) {
			t.Errorf("%s recorded: %#v, want %#v", c.name, rec.Attrs, c.attrs)
		}
		// The maps a call or generation that keeps its attrs gets
		// (callAttrs, connAttrs) must say the same as the figures.
		var kept map[string]any
		switch c.name {
		case ragtime.StageEmbed:
			kept = map[string]any{"embedder": f.p.cfg.EmbedderName}
			if f.dimKnown {
				kept["dim"] = f.dim
			}
			kept = callAttrs(f.embed, kept)
		case ragtime.StageLLMConnect:
			kept = connAttrs(&Generation{Conn: f.conn, Retries: f.retries})
		default:
			continue
		}
		if !reflect.DeepEqual(kept, c.attrs) {
			t.Errorf("%s as a kept map: %#v, want %#v", c.name, kept, c.attrs)
		}
	}
}

// BenchmarkSpanJSON is what the hand-written encoders save over
// encoding/json on an ask's stages and done event: "hand" frames them as
// the SSE writer does, "reflect" is json.Marshal of the same values.
func BenchmarkSpanJSON(b *testing.B) {
	ttft, overhead, cached := 43.5, 0.4, 256
	stages := pipelinetest.TypicalStages()
	done := ragtime.DoneEvent{QueryID: "7a3ea7a3-3678-4666-9ab1-b1ae4fbf55b7", Model: "sim", Stages: stages,
		Figures: ragtime.Figures{TTFTMs: &ttft, OverheadMs: &overhead, E2EMs: 342.5, RetrievalMs: 6.5, Usage: ragtime.Usage{PromptTokens: 381, CompletionTokens: 64, CachedTokens: &cached}}}
	buf := make([]byte, 0, 4096)
	b.Run("stage/hand", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var ok bool
			if buf, ok = AppendSpanJSON(buf[:0], stages[2]); !ok {
				b.Fatal("not framed")
			}
		}
	})
	b.Run("stage/reflect", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := json.Marshal(stages[2]); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("done/hand", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var ok bool
			if buf, ok = AppendDoneJSON(buf[:0], &done); !ok {
				b.Fatal("not framed")
			}
		}
	})
	b.Run("done/reflect", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := json.Marshal(&done); err != nil {
				b.Fatal(err)
			}
		}
	})
}
