package sim

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"ragtime/internal/openaiwire"
)

// tokenMemo remembers the token ids of recently seen message contents (a
// RAG system prompt and popular chunks repeat), bounded in bytes of text.
type tokenMemo struct {
	mu    sync.Mutex
	limit int
	size  int
	m     map[string][]int
}

func newTokenMemo(limit int) *tokenMemo { return &tokenMemo{limit: limit, m: map[string][]int{}} }

func (t *tokenMemo) get(text string) ([]int, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ids, ok := t.m[text]
	return ids, ok
}

func (t *tokenMemo) put(text string, ids []int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.size+len(text) > t.limit {
		clear(t.m)
		t.size = 0
	}
	t.m[text] = ids
	t.size += len(text)
}

// Token ids of the chat template's special tokens: above any tiktoken
// vocabulary, so they never collide with a content token.
const (
	tokenIMStart = 1<<30 + iota
	tokenIMEnd
)

// promptIDs returns the token ids of the prompt as a server sees it after
// applying a ChatML chat template (Qwen's, and the shape of most others):
// every message is "<|im_start|>ROLE\nCONTENT<|im_end|>\n", and the prompt
// ends with the generation prompt "<|im_start|>assistant\n". So "hi" from
// the user is 9 tokens, not 1, as llama.cpp's server and vLLM count it.
func (s *Server) promptIDs(msgs []openaiwire.Message) []int {
	var ids []int
	newline := s.encodeMemo("\n")
	for _, m := range msgs {
		ids = append(ids, tokenIMStart)
		ids = append(ids, s.encodeMemo(m.Role)...)
		ids = append(ids, newline...)
		ids = append(ids, s.encodeMemo(string(m.Content))...)
		ids = append(ids, tokenIMEnd)
		ids = append(ids, newline...)
	}
	ids = append(ids, tokenIMStart)
	ids = append(ids, s.encodeMemo("assistant")...)
	return append(ids, newline...)
}

// encodeMemo returns text's token ids, memoised.
func (s *Server) encodeMemo(text string) []int {
	if text == "" {
		return nil
	}
	ids, ok := s.memo.get(text)
	if !ok {
		ids = s.counter.Encode(text)
		s.memo.put(text, ids)
	}
	return ids
}

// boundOutput splits a request's output into reasoning and answer tokens.
// max_tokens (or max_completion_tokens, whichever is smaller) bounds both
// together, as OpenAI and vLLM count it: reasoning comes first and may use
// up the whole budget, leaving no answer; finish is "length" when the
// limit cut anything.
func boundOutput(reasoning, answer int, limits ...*int) (r, a int, finish string) {
	budget := -1
	for _, l := range limits {
		if l != nil && (budget < 0 || *l < budget) {
			budget = *l
		}
	}
	if budget < 0 || budget >= reasoning+answer {
		return reasoning, answer, "stop"
	}
	r = min(reasoning, budget)
	return r, budget - r, "length"
}

// route picks the replica for a prompt.
func (s *Server) route(blocks []uint64) int {
	n := len(s.drivers)
	if n == 1 {
		return 0
	}
	if s.cfg.Routing == "prefix" && len(blocks) > 0 {
		return int(blocks[min(len(blocks), routingBlocks)-1] % uint64(n))
	}
	return int((s.rr.Add(1) - 1) % uint64(n))
}

// routingBlocks is how many leading blocks prefix routing hashes: enough to
// tell system prompts apart, few enough that the question does not count.
const routingBlocks = 4

// pickFault returns the fault to inject into r, if any.
func (s *Server) pickFault(r *http.Request) (string, error) {
	if h := r.Header.Get("X-Llmsim-Fault"); h != "" {
		h = strings.ToLower(strings.TrimSpace(h))
		for _, k := range faultKinds {
			if k == h {
				return k, nil
			}
		}
		return "", fmt.Errorf("X-Llmsim-Fault %q is not one of %v", h, faultKinds)
	}
	if len(s.faults) == 0 {
		return "", nil
	}
	s.rngMu.Lock()
	x := s.rng.Float64()
	s.rngMu.Unlock()
	for _, f := range s.faults {
		if x < f.rate {
			return f.kind, nil
		}
		x -= f.rate
	}
	return "", nil
}

func (s *Server) reject(w http.ResponseWriter, status int, code, param, msg string) {
	s.rejected.Add(1)
	typ := "invalid_request_error"
	switch status {
	case http.StatusTooManyRequests:
		typ = "rate_limit_error"
		w.Header().Set("Retry-After", strconv.Itoa(s.cfg.RetryAfterSeconds))
	case http.StatusInternalServerError:
		typ = "server_error"
	}
	writeAPIError(w, status, typ, code, param, msg)
}

func (s *Server) handleChat(w http.ResponseWriter, r *http.Request) {
	arrival := time.Now()
	s.requests.Add(1)
	if !s.authorized(r) {
		s.rejected.Add(1)
		s.writeAuthError(w)
		return
	}
	req, err := decodeChatRequest(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	if err != nil {
		var re *requestError
		if errors.As(err, &re) {
			status := re.Status
			if status == 0 {
				status = http.StatusBadRequest
			}
			s.reject(w, status, "invalid_request", re.Param, re.Message)
			return
		}
		s.reject(w, http.StatusBadRequest, "invalid_request", "", err.Error())
		return
	}
	if s.cfg.Model != "" && req.Model != s.cfg.Model {
		s.reject(w, http.StatusNotFound, "model_not_found", "model",
			fmt.Sprintf("The model %q does not exist on llmsim (a simulator); it serves %q (--model).", req.Model, s.cfg.Model))
		return
	}
	fault, err := s.pickFault(r)
	if err != nil {
		s.reject(w, http.StatusBadRequest, "invalid_request", "X-Llmsim-Fault", err.Error())
		return
	}
	if fault != "" {
		s.faultCount.Add(1)
	}
	switch fault {
	case FaultUnauthorized:
		s.rejected.Add(1)
		s.writeAuthError(w)
		return
	case FaultNotFound:
		s.reject(w, http.StatusNotFound, "model_not_found", "model", fmt.Sprintf("The model %q does not exist (fault injected by llmsim, a simulator).", req.Model))
		return
	case FaultRateLimited:
		s.reject(w, http.StatusTooManyRequests, "rate_limit_exceeded", "", "Rate limit reached (fault injected by llmsim, a simulator); retry after the Retry-After header's seconds.")
		return
	case FaultServerError:
		s.reject(w, http.StatusInternalServerError, "internal_error", "", "The server had an error while processing your request (fault injected by llmsim, a simulator).")
		return
	}

	ids := s.promptIDs(req.Messages)
	var blocks []uint64
	if s.cfg.KVCacheBlocks > 0 || (s.cfg.Routing == "prefix" && len(s.drivers) > 1) {
		blocks = blockHashes(ids)
	}
	reasoning, answer, finish := boundOutput(s.cfg.ReasoningTokens, s.cfg.OutputTokens, req.MaxTokens, req.MaxCompletionTokens)
	// The engine's clock starts once the prompt is tokenized: llm/tokens takes
	// about 0.1-0.15 µs per token here (about 1 ms for 8k), and a sequence handed over
	// after the engine moved past its arrival could not be scheduled at its
	// modelled time. Clients see the tokenizer's time on top of the model's
	// (repeated message contents are memoised).
	sq := newSeq(time.Now(), len(ids), blocks, reasoning, answer)
	if n := s.cfg.PrefillShiftAfter; n > 0 && s.engined.Add(1) > int64(n) {
		sq.scale = s.cfg.PrefillShiftFactor
	}
	replica := s.route(blocks)
	sq.replica = replica
	d := s.drivers[replica]
	// admission: the slots plus the queue bound how many requests a replica
	// holds; counting them here, not from the driver's last published
	// state, leaves no window in which a burst slips past the bound.
	if inflight := d.inflight.Add(1); s.cfg.MaxQueue > 0 && s.cfg.MaxNumSeqs > 0 && inflight > int64(s.cfg.MaxNumSeqs+s.cfg.MaxQueue) {
		d.inflight.Add(-1)
		s.reject(w, http.StatusTooManyRequests, "rate_limit_exceeded", "",
			fmt.Sprintf("llmsim (a simulator): replica %d has %d slots busy and %d requests waiting (--max-num-seqs, --max-queue); retry later.", replica, s.cfg.MaxNumSeqs, s.cfg.MaxQueue))
		return
	}
	defer d.inflight.Add(-1)

	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stop := context.AfterFunc(s.ctx, cancel)
	defer stop()
	s.active.Add(1)
	defer s.active.Add(-1)

	if !d.submit(ctx, sq) {
		s.cancelled.Add(1)
		return
	}
	a := answerer{
		s: s, w: w, req: req, sq: sq, fault: fault, finish: finish,
		text: newTextSource(s.cfg.Seed, req.Messages),
		enc: openaiwire.NewChunkEncoder(s.idPrefix+strconv.FormatUint(s.nextID.Add(1), 10), s.modelName(req.Model), arrival.Unix(),
			req.StreamOptions != nil && req.StreamOptions.IncludeUsage),
		timings: s.cfg.ServerTimings || r.Header.Get("X-Llmsim-Timings") != "",
	}
	defer a.watch(ctx)()
	var ok bool
	if req.Stream {
		ok = a.stream(ctx)
	} else {
		ok = a.complete(ctx)
	}
	if !ok {
		sq.cancelled.Store(true)
		s.cancelled.Add(1)
		return
	}
	s.completed.Add(1)
	s.observe(sq)
}

// observe records a finished request in the /metrics histograms.
func (s *Server) observe(sq *seq) {
	m := s.metrics
	m.success.Add(1)
	m.promptTokens.Add(int64(sq.promptTokens))
	m.generationTokens.Add(int64(sq.emitted))
	m.prefixQueries.Add(int64(sq.promptTokens))
	m.prefixHits.Add(int64(sq.cachedTokens))
	if sq.firstToken.IsZero() {
		return
	}
	m.ttft.observe(sq.firstToken.Sub(sq.arrival).Seconds())
	m.queue.observe(sq.admitted.Sub(sq.arrival).Seconds())
	m.prefill.observe(sq.firstToken.Sub(sq.admitted).Seconds())
	m.e2e.observe(sq.lastToken.Sub(sq.arrival).Seconds())
	if sq.emitted > 1 {
		mean := sq.lastToken.Sub(sq.firstToken).Seconds() / float64(sq.emitted-1)
		for range sq.emitted - 1 {
			m.itl.observe(mean)
		}
	}
}

// answerer writes one request's answer as its engine releases tokens.
type answerer struct {
	s       *Server
	w       http.ResponseWriter
	req     *openaiwire.ChatRequest
	sq      *seq
	text    textSource
	enc     openaiwire.ChunkEncoder
	fault   string
	finish  string
	timings bool
}

// reasoningOffset shifts the words of reasoning tokens so they differ from
// the answer's.
const reasoningOffset = 7919

// token returns output token i: reasoning first, then the answer.
func (a *answerer) token(i int) (text string, reasoning bool) {
	if i < a.sq.reasoning {
		return a.text.delta(i + reasoningOffset), true
	}
	return a.text.delta(i - a.sq.reasoning), false
}

// wait blocks until the engine released more than sent tokens or finished,
// and returns how many it released; false when ctx ended first. The engine
// and ctx's end (see watch) both signal sq.wake, so waiting is one channel
// receive, not a select, on the per-token path.
func (a *answerer) wait(ctx context.Context, sent int) (int, bool) {
	for {
		n := int(a.sq.produced.Load())
		if n > sent || a.sq.done.Load() {
			return n, true
		}
		if ctx.Err() != nil {
			return 0, false
		}
		<-a.sq.wake
	}
}

// watch makes ctx's end wake the writer; call the returned stop when done.
func (a *answerer) watch(ctx context.Context) (stop func() bool) {
	return context.AfterFunc(ctx, a.sq.signal)
}

// stream writes server-sent chunks, flushing as soon as the engine releases
// tokens, and reports whether the answer finished.
func (a *answerer) stream(ctx context.Context) bool {
	rc := http.NewResponseController(a.w)
	h := a.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	h.Set("X-Request-Id", a.enc.ID)
	if a.s.cfg.CloseAfterStream {
		h.Set("Connection", "close")
	}
	a.w.WriteHeader(http.StatusOK)
	buf := make([]byte, 0, 1024)
	send := func(b []byte) bool {
		if _, err := a.w.Write(b); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	if !send(a.enc.Role(buf[:0])) {
		return false
	}
	total := a.sq.total()
	mid := total / 2
	sent := 0
	for sent < total {
		n, ok := a.wait(ctx, sent)
		if !ok {
			return false
		}
		if sent == 0 && a.fault == FaultStall && !a.s.alarm.sleepUntil(ctx, time.Now().Add(ms(a.s.cfg.StallMs))) {
			return false
		}
		buf = buf[:0]
		before := sent
		for ; sent < n; sent++ {
			if sent == mid {
				switch a.fault {
				case FaultDrop:
					// flush what was written, then cut the connection
					if len(buf) > 0 {
						send(buf)
					}
					if conn, _, err := rc.Hijack(); err == nil {
						conn.Close()
					}
					a.s.tokensSent.Add(int64(sent))
					return true
				case FaultMalformed:
					buf = append(buf, "data: {\"id\":\"broken\",\"choices\":[{\"delta\":{\"content\":\n\n"...)
				case FaultNoChoices:
					buf = append(a.enc.Head(buf), "}\n\n"...)
				}
			}
			if sent < a.sq.reasoning {
				buf = a.enc.Delta(buf, a.s.cfg.ReasoningField, wordSep(sent == 0), a.text.word(sent+reasoningOffset))
			} else {
				i := sent - a.sq.reasoning
				buf = a.enc.Delta(buf, "content", wordSep(i == 0), a.text.word(i))
			}
		}
		// every token released since the last write goes out in this one
		// write and flush: a writer that fell behind catches up in one
		// system call instead of one per token
		oldest := a.sq.releaseTime(before, n)
		// the last token's write also carries the finish, the usage and
		// [DONE]: one system call fewer per answer
		last := sent >= total && a.sq.done.Load()
		if last {
			buf = a.end(buf)
		}
		if !send(buf) {
			return false
		}
		lag := time.Since(oldest).Seconds()
		if before == 0 && sent > 0 {
			a.s.metrics.firstWriteLag.observe(time.Since(a.sq.firstToken).Seconds())
		}
		a.s.metrics.writerLag.observe(lag)
		a.s.tokenWrites.Add(1)
		a.s.tokensSent.Add(int64(sent - before))
		if last {
			return true
		}
		if a.sq.done.Load() && sent >= int(a.sq.produced.Load()) {
			break
		}
	}
	if total == 0 {
		if _, ok := a.wait(ctx, 0); !ok {
			return false
		}
		for !a.sq.done.Load() {
			if _, ok := a.wait(ctx, 0); !ok {
				return false
			}
		}
	}
	return send(a.end(buf[:0]))
}

// wordSep is what goes before a word of the answer: nothing before the
// first, a space before the others.
func wordSep(first bool) string {
	if first {
		return ""
	}
	return " "
}

// end appends the stream's end to b: the finish chunk, the usage chunk
// (when asked for) and [DONE]. The engine must be done with the sequence.
func (a *answerer) end(b []byte) []byte {
	b = a.enc.Finish(b, a.finish)
	if a.req.StreamOptions != nil && a.req.StreamOptions.IncludeUsage {
		b = a.enc.Usage(b, a.usage(), a.extras()...)
	} else if a.timings {
		b = a.enc.Usage(b, nil, a.extras()...)
	}
	return append(b, "data: [DONE]\n\n"...)
}

// complete waits for the whole answer and writes one chat.completion.
func (a *answerer) complete(ctx context.Context) bool {
	for !a.sq.done.Load() {
		if _, ok := a.wait(ctx, int(a.sq.produced.Load())); !ok {
			return false
		}
	}
	if a.fault == FaultStall && !a.s.alarm.sleepUntil(ctx, time.Now().Add(ms(a.s.cfg.StallMs))) {
		return false
	}
	var answer, reasoning strings.Builder
	for i := range a.sq.total() {
		t, r := a.token(i)
		if r {
			reasoning.WriteString(t)
		} else {
			answer.WriteString(t)
		}
	}
	a.s.tokensSent.Add(int64(a.sq.total()))
	msg := map[string]any{"role": "assistant", "content": answer.String()}
	if reasoning.Len() > 0 {
		msg[a.s.cfg.ReasoningField] = reasoning.String()
	}
	body := map[string]any{
		"id": a.enc.ID, "object": openaiwire.ObjectCompletion, "created": a.enc.Created, "model": a.enc.Model,
		"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": a.finish}},
		"usage":   a.usage(),
	}
	for _, x := range a.extras() {
		body[x.Key] = x.Value
	}
	a.w.Header().Set("X-Request-Id", a.enc.ID)
	writeJSON(a.w, http.StatusOK, body)
	return true
}

func (a *answerer) usage() *openaiwire.Usage {
	sq := a.sq
	u := &openaiwire.Usage{
		PromptTokens:        sq.promptTokens,
		CompletionTokens:    sq.total(),
		TotalTokens:         sq.promptTokens + sq.total(),
		PromptTokensDetails: &openaiwire.PromptTokensDetails{CachedTokens: sq.cachedTokens},
	}
	if sq.reasoning > 0 {
		u.CompletionTokensDetails = &openaiwire.CompletionTokensDetails{ReasoningTokens: sq.reasoning}
	}
	return u
}

// extras returns the server-timing objects, when asked for: a vLLM-style
// per-request "metrics" (seconds, Unix times) and llama.cpp's "timings"
// (milliseconds). They are the simulator's modelled times, the ground truth
// a client's parsing can be checked against.
func (a *answerer) extras() []openaiwire.Extra {
	if !a.timings {
		return nil
	}
	sq := a.sq
	unix := func(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }
	msOf := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 }
	prefill := sq.firstToken.Sub(sq.admitted)
	decode := sq.lastToken.Sub(sq.firstToken)
	timings := map[string]any{
		"cache_n":      sq.cachedTokens,
		"prompt_n":     sq.uncached,
		"prompt_ms":    msOf(prefill),
		"predicted_n":  sq.emitted,
		"predicted_ms": msOf(decode),
		"queue_ms":     msOf(sq.admitted.Sub(sq.arrival)),
	}
	if sq.uncached > 0 && prefill > 0 {
		timings["prompt_per_token_ms"] = msOf(prefill) / float64(sq.uncached)
		timings["prompt_per_second"] = float64(sq.uncached) / prefill.Seconds()
	}
	if sq.emitted > 1 && decode > 0 {
		timings["predicted_per_token_ms"] = msOf(decode) / float64(sq.emitted-1)
		timings["predicted_per_second"] = float64(sq.emitted-1) / decode.Seconds()
	}
	return []openaiwire.Extra{
		{Key: "metrics", Value: map[string]any{
			"arrival_time":         unix(sq.arrival),
			"first_scheduled_time": unix(sq.admitted),
			"first_token_time":     unix(sq.firstToken),
			"last_token_time":      unix(sq.lastToken),
			"time_in_queue":        sq.admitted.Sub(sq.arrival).Seconds(),
			"prefill_time":         prefill.Seconds(),
			"decode_time":          decode.Seconds(),
			"cached_tokens":        sq.cachedTokens,
			"replica":              sq.replica,
		}},
		{Key: "timings", Value: timings},
	}
}

// handleMetrics writes Prometheus text with vLLM's metric names.
func (s *Server) handleMetrics(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	labels := fmt.Sprintf("model_name=%q", s.modelName(""))
	var running, waiting int64
	for _, d := range s.drivers {
		running += d.running.Load()
		waiting += d.queued.Load()
	}
	m := s.metrics
	fmt.Fprintf(w, "# HELP vllm:num_requests_running Requests running on the simulated engines (llmsim, a simulator).\n# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{%s} %d\n", labels, running)
	fmt.Fprintf(w, "# HELP vllm:num_requests_waiting Requests waiting for a slot.\n# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{%s} %d\n", labels, waiting)
	counter := func(name, help string, v int64) {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s counter\n%s{%s} %d\n", name, help, name, name, labels, v)
	}
	counter("vllm:prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.", m.prefixQueries.Load())
	counter("vllm:prefix_cache_hits_total", "Prompt tokens found in the prefix cache.", m.prefixHits.Load())
	counter("vllm:prompt_tokens_total", "Prompt tokens of finished requests.", m.promptTokens.Load())
	counter("vllm:generation_tokens_total", "Generated tokens of finished requests.", m.generationTokens.Load())
	counter("vllm:request_success_total", "Requests answered in full.", m.success.Load())
	m.ttft.write(w, "vllm:time_to_first_token_seconds", "Modelled time to first token.", labels)
	m.queue.write(w, "vllm:request_queue_time_seconds", "Time waiting for a slot.", labels)
	m.prefill.write(w, "vllm:request_prefill_time_seconds", "Time from admission to the first token.", labels)
	m.itl.write(w, "vllm:inter_token_latency_seconds", "Time between output tokens (mean per request).", labels)
	m.e2e.write(w, "vllm:e2e_request_latency_seconds", "Time from arrival to the last token.", labels)
	// the simulator's own health, not vLLM's: how far behind its modelled
	// clock it runs
	m.schedulerLag.write(w, "llmsim:scheduler_lag_seconds", "How late the simulator's engine drivers woke past a due step (llmsim's own lag, not a model figure).", labels)
	m.writerLag.write(w, "llmsim:writer_lag_seconds", "Per write of streamed tokens, how long after the modelled release of its oldest token it was flushed (llmsim's own lag).", labels)
	m.answerLag.write(w, "llmsim:answer_lag_seconds", "How late embedding and rerank answers woke past their modelled latency (llmsim's own lag).", labels)
}
