package pipeline

import (
	"cmp"
	"fmt"
	"math"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"ragtime"
)

// Limits on a request; the API and the sweep validate against them.
const (
	DefaultTopK        = 5
	MaxTopK            = 100
	DefaultMaxTokens   = 256
	MaxMaxTokens       = 4096
	DefaultMaxQuestion = 4000
	MaxPromptNonce     = 64
	// MaxHistory and MaxHistoryChars bound Request.History.
	MaxHistory      = 100
	MaxHistoryChars = 32000
	// MaxStop and MaxStopChars bound Request.Stop: OpenAI's own limit of
	// four sequences, each at most MaxStopChars characters.
	MaxStop      = 4
	MaxStopChars = 200
	// DefaultRerankTopN is the most reranked chunks a request gets into its
	// context when it names no rerank_top_n and serve sets no default.
	DefaultRerankTopN = 3
)

// Defaults are the knobs a request gets when it omits them: serve's
// --top-k and --rerank-top-n, or the sweep's setting. Zero fields mean the
// package defaults (DefaultTopK, DefaultRerankTopN).
type Defaults struct {
	TopK int
	// RerankTopN is the default rerank_top_n; a request's top_k caps it.
	RerankTopN int
	// RerankOff, when set, makes the default rerank_top_n 0 (no reranking),
	// which a zero RerankTopN cannot say.
	RerankOff bool
	// Retrieval is the default retrieval mode (serve's --retrieval); empty
	// means RetrievalVector.
	Retrieval string
	// VectorK and LexicalK are the default leg depths (serve's --vector-k,
	// --lexical-k); 0 means LegKFor's rule.
	VectorK, LexicalK int
	// Collapse is the default collapse mode (serve's --collapse); empty
	// means CollapseDoc.
	Collapse string
	// Lexical says the store has a lexical leg; without it a request for
	// hybrid or lexical retrieval is refused.
	Lexical bool
	// LexicalMissing, when set, is asked before a hybrid or lexical
	// retrieval is accepted: an error (HybridSearcher.LexicalMissing) says
	// why the store's data has no lexical leg, and a request that named
	// the retrieval is refused; one that left it to Retrieval gets vector.
	LexicalMissing func() error
	// TTFTBudgetMs is the ttft_budget_ms of an ask that gives none (an API
	// key's --ttft-budget, else serve's --ttft-budget-ms); 0: none.
	TTFTBudgetMs int
}

// DefaultLegK is the depth of each leg of a hybrid retrieval when neither
// the request nor serve sets one (and top_k is smaller): fusion needs
// candidates below each leg's top_k to promote those both legs rank well.
const DefaultLegK = 50

// MaxLegK bounds vector_k and lexical_k.
const MaxLegK = 1000

// CheckRetrieval checks a retrieval mode ("" is the default) against
// whether the store has a lexical leg; the error names field.
func CheckRetrieval(field, mode string, lexical bool) error {
	switch mode {
	case "", ragtime.RetrievalVector:
		return nil
	case ragtime.RetrievalHybrid, ragtime.RetrievalLexical:
		if !lexical {
			return &ValidationError{Field: field, Code: "retrieval_unsupported",
				Message: fmt.Sprintf("%s %q needs a store with a lexical leg (the embedded store); this store has only vectors", field, mode)}
		}
		return nil
	}
	return &ValidationError{Field: field, Code: "retrieval_invalid",
		Message: fmt.Sprintf("%s must be hybrid, vector or lexical, got %.40q", field, mode)}
}

// legK resolves one leg's depth: the request's (0 or Unset: none), else
// serve's, else max(top_k, DefaultLegK) when deep (a hybrid, whose fusion
// needs candidates below each leg's top_k, or a collapse by document, which
// needs more chunks than top_k to find top_k documents) and top_k
// otherwise.
func legK(k, def, topK int, deep bool) int {
	switch {
	case k != Unset && k != 0:
		return k
	case def > 0:
		return def
	case deep:
		return max(topK, DefaultLegK)
	}
	return topK
}

// MaxTTFTBudgetMs bounds ttft_budget_ms (ten minutes).
const MaxTTFTBudgetMs = 600_000

// TopKOr returns topK, or the default top_k when it is Unset.
func (d Defaults) TopKOr(topK int) int {
	switch {
	case topK != Unset:
		return topK
	case d.TopK > 0:
		return d.TopK
	}
	return DefaultTopK
}

// RerankTopNFor is the one rule for a rerank_top_n the caller did not give,
// shared by /ask and the sweep: the default (DefaultRerankTopN unless
// configured), capped at top_k.
func (d Defaults) RerankTopNFor(topK int) int {
	switch {
	case d.RerankOff:
		return 0
	case d.RerankTopN > 0:
		return min(topK, d.RerankTopN)
	}
	return min(topK, DefaultRerankTopN)
}

// Request is one question and its tuning knobs.
type Request struct {
	Question string `json:"question"`
	// TopK is how many chunks the search returns (1–100).
	TopK int `json:"top_k"`
	// RerankTopN is how many reranked chunks go to the context (0–TopK);
	// 0 turns reranking off and sends all TopK hits in search order.
	RerankTopN int `json:"rerank_top_n"`
	// MaxTokens bounds the answer (1–4096).
	MaxTokens int `json:"max_tokens"`
	// Model overrides the configured model when not empty.
	Model  string `json:"model"`
	Filter Filter `json:"filters"`
	// Retrieval is the legs the search runs: hybrid (vector and lexical,
	// fused), vector or lexical; empty takes the default.
	Retrieval string `json:"retrieval"`
	// VectorK and LexicalK are how many candidates each leg returns to
	// the fusion (1–MaxLegK); 0 or Unset takes the default (legK).
	VectorK  int `json:"vector_k"`
	LexicalK int `json:"lexical_k"`
	// Collapse is CollapseDoc (one chunk per document in the result, the
	// legs fused by document) or CollapseNone (chunks ranked as they are);
	// empty takes the default.
	Collapse string `json:"collapse"`
	// RerankDefaulted is set by NormalizeWith when RerankTopN came from
	// the defaults (Meta.RerankNote).
	RerankDefaulted bool `json:"-"`

	// PromptNonce, when not empty, is written first in the user message,
	// right after the system prompt, so the prompt shares no prefix beyond
	// the system prompt with any request sent before it: a server's prefix
	// cache can reuse the system prompt and nothing else. Measurements that
	// must time a cold prefill (ragtime sweep) set it; at most
	// MaxPromptNonce printable ASCII characters.
	PromptNonce string `json:"prompt_nonce"`

	// MaxContextTokens overrides the configured context budget when > 0.
	// Only in-process callers (the sweep) set it; the API does not.
	MaxContextTokens int `json:"-"`
	// SweepID tags the query as part of a sweep (a UUID, stored in
	// queries.sweep_id). Only in-process callers (the sweep) set it: outside
	// callers cannot write into a sweep's results.
	SweepID string `json:"-"`
	// History is the conversation before the question (the earlier
	// messages of an OpenAI-compatible chat request), oldest first, with
	// roles system, user or assistant. The prompt holds it between the
	// system prompt and the user message that carries the sources and the
	// question; retrieval uses the question alone. At most MaxHistory
	// messages of MaxHistoryChars characters in all.
	History []Message `json:"-"`
	// Temperature, when set, is passed to the model (0–2).
	Temperature *float64 `json:"-"`
	// Stop holds up to MaxStop sequences at which the model stops
	// generating, none of them part of the answer (OpenAI's stop).
	Stop []string `json:"-"`
	// Seed, when set, is passed to the model for repeatable sampling
	// (OpenAI's seed; best effort, as it is upstream).
	Seed *int64 `json:"-"`
	// TTFTBudgetMs, when > 0, is the ask's TTFT budget in milliseconds:
	// after ranking, the context keeps the longest prefix of the ranked
	// chunks whose predicted TTFT fits it (docs/ttft.md). Unset takes the
	// default (Defaults.TTFTBudgetMs); 0 is none.
	TTFTBudgetMs int `json:"-"`
	// MinChunks is the fewest chunks a budget keeps (0: 1).
	MinChunks int `json:"-"`

	// Scope is the caller's tenant filter (an API key's --filter): every
	// search is restricted to it, whatever Filter asks (see Filter.Within).
	// Only the API sets it, from the key; it is not part of the request body.
	Scope Filter `json:"-"`
	// KeyID is the id of the API key the query was asked with ("" without
	// one); it is stored with the query.
	KeyID string `json:"-"`
	// Queue, when set, is the wait the caller made before Run (admission
	// control in the API): the query's clock starts at Queue.Start and its
	// queue stage lasts until Queue.End.
	Queue *QueueWait `json:"-"`
}

// QueueWait is a query's wait for admission, on the monotonic clock.
type QueueWait struct {
	Start, End time.Time
	// Attrs are the queue stage's attrs (the limits that applied).
	Attrs map[string]any
}

// ValidationError names the request field that is wrong. The API answers
// it with HTTP 400 before any stream starts.
type ValidationError struct {
	Field   string
	Code    string
	Message string
}

func (e *ValidationError) Error() string { return e.Message }

// Unset marks an integer knob the caller did not give, so defaults apply:
// the one way "not given" is written for Request's integer knobs (top_k,
// rerank_top_n, max_tokens, vector_k, lexical_k, ttft_budget_ms,
// min_chunks), from the API's decoding to NormalizeWith, the one place that
// turns it into a default.
//
// A sentinel rather than a pointer because the stages, the record, the
// sweep and the clients read the resolved knobs as plain ints: a *int in
// Request would put a dereference, and a nil to guard, in each read, or a
// second set of fields beside the resolved ones. A pointer buys
// nothing here that the sentinel does not give: no knob's range comes near
// math.MinInt (all are ≥ 0), and encoding/json leaves a field the body does
// not name, or names as null, untouched, so a body whose knobs start at
// Unset decodes "absent" to Unset with no conversion step. (A caller who
// spells -9223372036854775808 gets the default, as omitting the knob does.)
// Temperature and Seed stay pointers: every float or int64 is a value a
// caller may mean, so no sentinel is free for them.
const Unset = math.MinInt

// Normalize is NormalizeWith the package defaults.
func (r *Request) Normalize(maxQuestion int) error { return r.NormalizeWith(maxQuestion, Defaults{}) }

// NormalizeWith applies d to knobs set to Unset and checks every field,
// returning a *ValidationError naming the first field that is wrong.
// maxQuestion bounds the question in characters (runes).
func (r *Request) NormalizeWith(maxQuestion int, d Defaults) error {
	r.Question = strings.TrimSpace(r.Question)
	if r.Question == "" {
		return &ValidationError{Field: "question", Code: "question_required", Message: "question is required"}
	}
	if !utf8.ValidString(r.Question) {
		return &ValidationError{Field: "question", Code: "question_invalid", Message: "question must be valid UTF-8"}
	}
	// PostgreSQL text cannot hold NUL; letting one through would lose the
	// query's whole record at the recorder.
	if strings.ContainsRune(r.Question, 0) {
		return &ValidationError{Field: "question", Code: "question_invalid", Message: "question must not contain NUL characters"}
	}
	if n := utf8.RuneCountInString(r.Question); maxQuestion > 0 && n > maxQuestion {
		return &ValidationError{Field: "question", Code: "question_too_long",
			Message: fmt.Sprintf("question has %d characters; at most %d are allowed (--max-question-chars)", n, maxQuestion)}
	}
	r.TopK = d.TopKOr(r.TopK)
	if err := CheckTopK("top_k", r.TopK); err != nil {
		return err
	}
	if r.RerankTopN == Unset {
		r.RerankTopN = d.RerankTopNFor(r.TopK)
		r.RerankDefaulted = true
	}
	if r.RerankTopN < 0 || r.RerankTopN > r.TopK {
		return &ValidationError{Field: "rerank_top_n", Code: "rerank_top_n_out_of_range",
			Message: fmt.Sprintf("rerank_top_n must be between 0 and top_k (%d), got %d", r.TopK, r.RerankTopN)}
	}
	if err := r.normalizeRetrieval(d); err != nil {
		return err
	}
	if r.MaxTokens == Unset {
		r.MaxTokens = DefaultMaxTokens
	}
	if r.MaxTokens < 1 || r.MaxTokens > MaxMaxTokens {
		return &ValidationError{Field: "max_tokens", Code: "max_tokens_out_of_range",
			Message: fmt.Sprintf("max_tokens must be between 1 and %d, got %d", MaxMaxTokens, r.MaxTokens)}
	}
	if err := CheckModel(r.Model); err != nil {
		return err
	}
	if len(r.PromptNonce) > MaxPromptNonce || strings.ContainsFunc(r.PromptNonce, func(c rune) bool { return c < ' ' || c > '~' }) {
		return &ValidationError{Field: "prompt_nonce", Code: "prompt_nonce_invalid",
			Message: fmt.Sprintf("prompt_nonce must be at most %d printable ASCII characters", MaxPromptNonce)}
	}
	if err := checkHistory(r.History); err != nil {
		return err
	}
	if err := checkStop(r.Stop); err != nil {
		return err
	}
	if t := r.Temperature; t != nil && (math.IsNaN(*t) || *t < 0 || *t > 2) {
		return &ValidationError{Field: "temperature", Code: "temperature_out_of_range",
			Message: fmt.Sprintf("temperature must be between 0 and 2, got %g", *t)}
	}
	if r.TTFTBudgetMs == Unset {
		r.TTFTBudgetMs = d.TTFTBudgetMs
	}
	if r.TTFTBudgetMs < 0 || r.TTFTBudgetMs > MaxTTFTBudgetMs {
		return &ValidationError{Field: "ttft_budget_ms", Code: "ttft_budget_ms_out_of_range",
			Message: fmt.Sprintf("ttft_budget_ms must be between 0 (none) and %d, got %d", MaxTTFTBudgetMs, r.TTFTBudgetMs)}
	}
	if r.MinChunks == Unset || r.MinChunks == 0 {
		r.MinChunks = 1
	}
	if r.MinChunks < 1 || r.MinChunks > MaxTopK {
		return &ValidationError{Field: "min_chunks", Code: "min_chunks_out_of_range",
			Message: fmt.Sprintf("min_chunks must be between 1 and %d, got %d", MaxTopK, r.MinChunks)}
	}
	if r.MaxContextTokens < 0 {
		return &ValidationError{Field: "max_context_tokens", Code: "max_context_tokens_out_of_range",
			Message: fmt.Sprintf("max_context_tokens must be 0 (the configured budget) or more, got %d", r.MaxContextTokens)}
	}
	if r.SweepID != "" {
		if _, err := uuid.Parse(r.SweepID); err != nil {
			return &ValidationError{Field: "sweep_id", Code: "sweep_id_invalid", Message: fmt.Sprintf("sweep_id %.80q is not a UUID", r.SweepID)}
		}
	}
	return r.Filter.Check()
}

// normalizeRetrieval resolves and checks the retrieval mode and the leg
// depths (after top_k).
func (r *Request) normalizeRetrieval(d Defaults) error {
	named := r.Retrieval != ""
	if r.Retrieval == "" {
		r.Retrieval = d.Retrieval
	}
	if r.Retrieval == "" {
		r.Retrieval = ragtime.RetrievalVector
	}
	if err := CheckRetrieval("retrieval", r.Retrieval, d.Lexical); err != nil {
		return err
	}
	if r.Retrieval != ragtime.RetrievalVector && d.LexicalMissing != nil {
		if err := d.LexicalMissing(); err != nil && !named {
			r.Retrieval = ragtime.RetrievalVector // the default, where the data has no lexical leg
		} else if err != nil {
			return &ValidationError{Field: "retrieval", Code: "retrieval_unsupported",
				Message: fmt.Sprintf("retrieval %q: %s", r.Retrieval, err)}
		}
	}
	if r.Collapse == "" {
		r.Collapse = cmp.Or(d.Collapse, CollapseDoc)
	}
	if err := CheckCollapse("collapse", r.Collapse); err != nil {
		return err
	}
	deep := r.Retrieval == ragtime.RetrievalHybrid || r.Collapse == CollapseDoc
	r.VectorK = legK(r.VectorK, d.VectorK, r.TopK, deep)
	r.LexicalK = legK(r.LexicalK, d.LexicalK, r.TopK, deep)
	if err := CheckLegK("vector_k", r.VectorK); err != nil {
		return err
	}
	return CheckLegK("lexical_k", r.LexicalK)
}

// CheckTopK checks a top_k (1–MaxTopK), an ask's, a list filter's or a
// flag's: the one place its range is checked. The error names field.
func CheckTopK(field string, k int) error {
	if k < 1 || k > MaxTopK {
		return &ValidationError{Field: field, Code: "top_k_out_of_range",
			Message: fmt.Sprintf("%s must be between 1 and %d, got %d", field, MaxTopK, k)}
	}
	return nil
}

// CheckLegK checks a leg depth the caller gave (1–MaxLegK); the error
// names field.
func CheckLegK(field string, k int) error {
	if k < 1 || k > MaxLegK {
		return &ValidationError{Field: field, Code: field + "_out_of_range",
			Message: fmt.Sprintf("%s must be between 1 and %d, got %d", field, MaxLegK, k)}
	}
	return nil
}

// checkHistory reports the first thing wrong with a conversation history:
// too many messages or characters, a role other than system, user or
// assistant, or content that is not UTF-8 or holds a NUL character. The
// field it names is "history" (the API renames it to its own field).
func checkHistory(h []Message) error {
	if len(h) > MaxHistory {
		return &ValidationError{Field: "history", Code: "history_too_long",
			Message: fmt.Sprintf("the conversation has %d earlier messages; at most %d are allowed", len(h), MaxHistory)}
	}
	total := 0
	for i, m := range h {
		switch m.Role {
		case "system", "user", "assistant":
		default:
			return &ValidationError{Field: fmt.Sprintf("history[%d].role", i), Code: "history_invalid",
				Message: fmt.Sprintf("message %d has role %.40q; the roles are system, user and assistant", i, m.Role)}
		}
		if !utf8.ValidString(m.Content) || strings.ContainsRune(m.Content, 0) {
			return &ValidationError{Field: fmt.Sprintf("history[%d].content", i), Code: "history_invalid",
				Message: fmt.Sprintf("message %d must be UTF-8 without NUL characters", i)}
		}
		total += utf8.RuneCountInString(m.Content)
	}
	if total > MaxHistoryChars {
		return &ValidationError{Field: "history", Code: "history_too_long",
			Message: fmt.Sprintf("the earlier messages hold %d characters; at most %d are allowed", total, MaxHistoryChars)}
	}
	return nil
}

// checkStop checks Request.Stop: at most MaxStop sequences, none empty or
// longer than MaxStopChars characters.
func checkStop(stop []string) error {
	if len(stop) > MaxStop {
		return &ValidationError{Field: "stop", Code: "stop_invalid",
			Message: fmt.Sprintf("stop holds at most %d sequences, got %d", MaxStop, len(stop))}
	}
	for i, s := range stop {
		if n := utf8.RuneCountInString(s); n == 0 || n > MaxStopChars {
			return &ValidationError{Field: fmt.Sprintf("stop[%d]", i), Code: "stop_invalid",
				Message: fmt.Sprintf("a stop sequence is 1 to %d characters, stop[%d] has %d", MaxStopChars, i, n)}
		}
	}
	return nil
}
