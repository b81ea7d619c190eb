package pipeline

import (
	"slices"
	"strconv"

	"ragtime"
	"ragtime/internal/jsonappend"
)

// stageFigs are the figures of a query's retrieval and connection stages,
// kept unboxed in the query until its record is made, instead of an attrs
// map per stage. A map[string]any of a handful of attrs takes 336 bytes or
// more, and the seven stages' maps (3.2 KB, the values boxed) were held
// for as long as the answer streamed (make bench-streams); these fields
// take some 250 bytes. A stage's span points here (StageSpan.figs) and its
// attrs are framed from these fields, in the order of their keys, byte for
// byte as the map they stand for would be (jsonappend.AppendObject); the
// record's spans get their maps when the query ends (query.materialize).
//
// A field is written before its stage's span is sent and never after, so
// a Stream that keeps the span (the SSE writer, for a resume) frames it
// again the same.
type stageFigs struct {
	p *Pipeline

	embed    Call
	dim      int
	dimKnown bool

	k, hits int

	candidates, topN int
	reranker         string

	chunks, dropped, contextTokens, promptTokens int

	// llm_connect's and llm_prefill's figures as they were sent (with
	// the first token, or at the stream's end).
	conn    ragtime.ConnInfo
	retries int
	status  int
}

// searchFixed are the keys the search stage sets itself, in byte order;
// they take precedence over a store's SearchAttrs of the same name.
var searchFixed = [...]string{"hits", "k", "store"}

// searchKeys are the keys of a store's search attrs other than
// searchFixed, in byte order.
func searchKeys(attrs map[string]any) []string {
	keys := make([]string, 0, len(attrs))
	for k := range attrs {
		if !slices.Contains(searchFixed[:], k) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

// attrOut receives a stage's attrs in the order of their keys: into m when
// it is set, else appended to b as the span's `,"attrs":{…}` (nothing when
// there are none). ok turns false at a value jsonappend does not write.
type attrOut struct {
	m  map[string]any
	b  []byte
	n  int
	ok bool
}

func (o *attrOut) key(k string) {
	if o.n == 0 {
		o.b = append(o.b, `,"attrs":{`...)
	} else {
		o.b = append(o.b, ',')
	}
	o.n++
	o.b = jsonappend.AppendString(o.b, k)
	o.b = append(o.b, ':')
}

func (o *attrOut) int(k string, v int) {
	if o.m != nil {
		o.m[k] = v
		return
	}
	o.key(k)
	o.b = strconv.AppendInt(o.b, int64(v), 10)
}

func (o *attrOut) ms(k string, v float64) {
	if o.m != nil {
		o.m[k] = v
		return
	}
	o.key(k)
	var ok bool
	if o.b, ok = jsonappend.AppendFloat(o.b, v); !ok {
		o.ok = false
	}
}

func (o *attrOut) bool(k string, v bool) {
	if o.m != nil {
		o.m[k] = v
		return
	}
	o.key(k)
	o.b = strconv.AppendBool(o.b, v)
}

func (o *attrOut) str(k, v string) {
	if o.m != nil {
		o.m[k] = v
		return
	}
	o.key(k)
	o.b = jsonappend.AppendString(o.b, v)
}

func (o *attrOut) value(k string, v any) {
	if o.m != nil {
		o.m[k] = v
		return
	}
	o.key(k)
	var ok bool
	if o.b, ok = jsonappend.AppendScalar(o.b, v); !ok {
		o.ok = false
	}
}

// attrs writes the attrs of the stage name to o, keys in byte order:
// those callAttrs, connAttrs, prefillAttrs and the stages' maps made.
func (f *stageFigs) attrs(name string, o *attrOut) {
	switch name {
	case ragtime.StageEmbed:
		c := &f.embed
		if c.Cache != "" {
			o.str("cache", c.Cache)
		}
		if c.Made {
			o.ms("connect_ms", roundMs(c.Conn.Connect))
		}
		if f.dimKnown {
			o.int("dim", f.dim)
		}
		if c.Made {
			o.ms("dns_ms", roundMs(c.Conn.DNS))
		}
		o.str("embedder", f.p.cfg.EmbedderName)
		if c.Made {
			if c.Conn.FreshRetry {
				o.bool("fresh_retry", true)
			}
			if c.Retries > 0 {
				o.int("retries", c.Retries)
			}
			o.bool("reused", c.Conn.Reused)
			if c.ServerWait > 0 {
				o.ms("server_wait_ms", roundMs(c.ServerWait))
			}
			o.ms("tls_ms", roundMs(c.Conn.TLS))
		}
	case ragtime.StageSearch:
		fixed := 0
		for _, k := range f.p.searchKeys {
			for ; fixed < len(searchFixed) && searchFixed[fixed] < k; fixed++ {
				f.searchFixed(fixed, o)
			}
			o.value(k, f.p.cfg.SearchAttrs[k])
		}
		for ; fixed < len(searchFixed); fixed++ {
			f.searchFixed(fixed, o)
		}
	case ragtime.StageRerank:
		o.int("candidates", f.candidates)
		o.str("reranker", f.reranker)
		o.int("top_n", f.topN)
	case ragtime.StageAssemble:
		o.int("chunks", f.chunks)
		o.int("context_tokens", f.contextTokens)
		o.int("dropped", f.dropped)
		o.int("prompt_tokens", f.promptTokens)
	case ragtime.StageLLMConnect:
		connFigs(o, f.conn, f.retries)
	case ragtime.StageLLMPrefill:
		if f.status != 0 {
			o.int("status", f.status)
		}
	}
}

// connFigs writes a connection's attrs, keys in byte order: the one
// writer of them for llm_connect's framing and for the maps of the calls
// that keep theirs (addConnAttrs). The embed stage interleaves its own
// keys with these, in the same order (attrs; TestStageFigsFrameAsTheirMaps
// holds the two to the same result).
func connFigs(o *attrOut, c ragtime.ConnInfo, retries int) {
	o.ms("connect_ms", roundMs(c.Connect))
	o.ms("dns_ms", roundMs(c.DNS))
	if c.FreshRetry {
		o.bool("fresh_retry", true)
	}
	if c.Prewarmed {
		o.ms("prewarm_connect_ms", roundMs(c.Prewarm))
		o.bool("prewarmed", true)
	}
	if retries > 0 {
		o.int("retries", retries)
	}
	o.bool("reused", c.Reused)
	o.ms("tls_ms", roundMs(c.TLS))
}

func (f *stageFigs) searchFixed(i int, o *attrOut) {
	switch i {
	case 0:
		o.int("hits", f.hits)
	case 1:
		o.int("k", f.k)
	case 2:
		o.str("store", f.p.cfg.StoreName)
	}
}

// materialize gives the query's span i the attrs map its figures stand
// for, as the record and encoding/json need it.
func (q *query) materialize(i int) {
	if q.figged&(1<<i) == 0 {
		return
	}
	q.figged &^= 1 << i
	q.spans[i].Attrs = q.figs.attrsMap(q.spans[i].Name)
}

// attrsMap returns the attrs of the stage name as a map.
func (f *stageFigs) attrsMap(name string) map[string]any {
	o := attrOut{m: make(map[string]any, 8)}
	f.attrs(name, &o)
	return o.m
}
