package llm

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"ragtime"
	"ragtime/lexical"
	"ragtime/pipeline"
)

// ProviderExtractive is the Generation.Provider and Model of the extractive
// generator.
const ProviderExtractive = "extractive"

// NotFoundAnswer is what the extractive generator says when no sentence of
// the sources answers the question.
const NotFoundAnswer = "I could not find an answer to that in the indexed documents."

// Tuning of the extractive generator.
const (
	// maxAnswerSentences bounds the answer's length in sentences.
	maxAnswerSentences = 5
	// minSentenceWords drops headings' leftovers and fragments.
	minSentenceWords = 3
	// relativeFloor: a sentence after the best one must score at least this
	// share of the best score.
	relativeFloor = 0.4
	// rankBonus is the extra share of score the first-ranked source gets
	// over the last one (linearly in between).
	rankBonus = 0.1
)

// questionFiller are words of a request that say nothing about its topic.
var questionFiller = map[string]bool{"tell": true, "explain": true, "describe": true, "please": true, "give": true}

// Extractive is the embedded pipeline.Generator: it answers by quoting the
// sentences of the retrieved sources that best match the question, each
// followed by its citation [n], with no network and no model.
//
// Sentences are scored with BM25 over the question's content words (lightly
// stemmed), plus a small bonus for higher-ranked sources; up to five
// sentences above the threshold are streamed, the best first and the others
// in context order. When no sentence contains enough of the question's
// words it streams NotFoundAnswer.
//
// It streams word by word: every delta is one word with its following space
// (one character for CJK text), and citation markers are deltas of their
// own. A word counts as one token: GenerateRequest.MaxTokens (when > 0)
// bounds the words streamed and Usage.CompletionTokens counts them;
// Usage.PromptTokens stays 0, so the pipeline reports its own tiktoken count
// of the assembled prompt; Usage.CachedTokens is 0 (it has no cache).
// Citation markers are not counted as words. It is safe for concurrent use.
type Extractive struct {
	bm25 lexical.BM25
}

// NewExtractive returns the extractive generator.
func NewExtractive() *Extractive {
	return &Extractive{bm25: lexical.NewBM25()}
}

// candidate is one sentence of the context.
type candidate struct {
	text     string
	cite     int // citation number of its source
	src      int // index of its source in the request
	terms    []string
	score    float64
	coverage int // distinct question terms it contains
}

// answerPiece is one streamed unit: a word (or CJK character) or a citation.
type answerPiece struct {
	text string
	sep  string // what follows it: " " or "" inside CJK runs
	word bool
}

// Generate streams the extractive answer. See pipeline.Generator.
func (x *Extractive) Generate(ctx context.Context, req *pipeline.GenerateRequest, emit func(pipeline.Delta) error, gen *pipeline.Generation) error {
	start := time.Now()
	*gen = pipeline.Generation{
		Provider:     ProviderExtractive,
		Model:        ProviderExtractive,
		RequestStart: start,
		GotConn:      start,
		WroteRequest: start,
		Conn:         ragtime.ConnInfo{Reused: true},
		// no prefix cache: none of the prompt was cached, and that is known
		Usage: ragtime.Usage{CachedTokens: new(0)},
	}
	if err := ctx.Err(); err != nil {
		return cancelledError(gen, err)
	}

	pieces := cutAtStop(answerPieces(x.pick(req.Question, req.Sources), req.MaxTokens), req.Stop)
	for i, p := range pieces {
		if err := ctx.Err(); err != nil {
			return cancelledError(gen, err)
		}
		text := p.text
		if i < len(pieces)-1 {
			text += p.sep
		}
		d := pipeline.Delta{Text: text, At: time.Now()}
		if gen.FirstToken.IsZero() {
			gen.FirstToken = d.At
			timing := *gen
			d.Timing = &timing
		}
		gen.LastToken = d.At
		gen.Chunks++
		if p.word {
			gen.Usage.CompletionTokens++
		}
		if err := emit(d); err != nil {
			return err
		}
	}
	return nil
}

// cancelledError reports a generation stopped by its context.
func cancelledError(gen *pipeline.Generation, err error) *ragtime.Error {
	stage := ragtime.StageLLMDecode
	if gen.FirstToken.IsZero() {
		stage = ragtime.StageLLMPrefill
	}
	e := &ragtime.Error{Stage: stage, Kind: ragtime.KindCancelled, Code: CodeCancelled, Message: "the request was cancelled before the answer finished", Err: err}
	if errors.Is(err, context.DeadlineExceeded) {
		e.Kind, e.Code, e.Message = ragtime.KindTimeout, CodeTimeout, "the deadline for the answer passed before it finished"
		e.Hint = "the request's deadline is shorter than the answer takes; raise it or lower max_tokens"
	}
	return e
}

// pick returns the sentences to answer with, in answer order; nil when none
// answers the question.
func (x *Extractive) pick(question string, sources []pipeline.Source) []candidate {
	query := queryTerms(question)
	if len(query) == 0 || len(sources) == 0 {
		return nil
	}
	var (
		cands []candidate
		seen  = make(map[string]bool)
	)
	for i, src := range sources {
		cite := src.Rank
		if cite <= 0 {
			cite = i + 1
		}
		for _, s := range splitSentences(src.Text) {
			key := strings.ToLower(s)
			if seen[key] {
				continue // overlapping chunks repeat sentences
			}
			seen[key] = true
			words := lexical.Words(s)
			if len(words) < minSentenceWords {
				continue
			}
			terms := words[:0]
			for _, w := range words {
				if !lexical.IsStopword(w) {
					terms = append(terms, stem(w))
				}
			}
			cands = append(cands, candidate{text: s, cite: cite, src: i, terms: terms})
		}
	}
	if len(cands) == 0 {
		return nil
	}
	docs := make([][]string, len(cands))
	for i := range cands {
		docs[i] = cands[i].terms
	}
	scores := x.bm25.Score(query, docs)
	n := len(sources)
	for i := range cands {
		c := &cands[i]
		c.coverage = coverage(query, c.terms)
		bonus := 0.0
		if n > 1 {
			bonus = rankBonus * float64(n-1-c.src) / float64(n-1)
		}
		c.score = scores[i] * (1 + bonus)
	}
	need := (len(query) + 2) / 3 // a third of the question's terms, at least one
	best := -1
	for i := range cands {
		if cands[i].coverage >= need && cands[i].score > 0 && (best < 0 || cands[i].score > cands[best].score) {
			best = i
		}
	}
	if best < 0 {
		return nil
	}
	ranked := make([]int, 0, len(cands))
	for i := range cands {
		if i != best && cands[i].coverage >= need && cands[i].score >= relativeFloor*cands[best].score {
			ranked = append(ranked, i)
		}
	}
	slices.SortStableFunc(ranked, func(a, b int) int {
		switch {
		case cands[a].score > cands[b].score:
			return -1
		case cands[a].score < cands[b].score:
			return 1
		}
		return a - b
	})
	if len(ranked) > maxAnswerSentences-1 {
		ranked = ranked[:maxAnswerSentences-1]
	}
	slices.Sort(ranked) // context order
	picked := make([]candidate, 0, len(ranked)+1)
	picked = append(picked, cands[best])
	for _, i := range ranked {
		picked = append(picked, cands[i])
	}
	return picked
}

// queryTerms returns the question's distinct stemmed content words.
func queryTerms(question string) []string {
	words := lexical.ContentWords(question)
	if len(words) == 0 {
		words = lexical.Words(question)
	}
	out := make([]string, 0, len(words))
	for _, w := range words {
		if questionFiller[w] {
			continue
		}
		w = stem(w)
		if !slices.Contains(out, w) {
			out = append(out, w)
		}
	}
	return out
}

// coverage counts the query terms present in terms.
func coverage(query, terms []string) int {
	n := 0
	for _, q := range query {
		if slices.Contains(terms, q) {
			n++
		}
	}
	return n
}

// stem folds common English inflections so that "grow", "grows" and
// "growing", or "cache", "caches" and "cached", match.
// It is deliberately crude and applied to the question and the sources alike.
func stem(w string) string {
	n := len(w)
	if n <= 3 || w[n-1] >= utf8.RuneSelf {
		return w
	}
	switch {
	case n > 4 && strings.HasSuffix(w, "ies"):
		return w[:n-3] + "y"
	case n > 5 && strings.HasSuffix(w, "ing"):
		w = w[:n-3]
	case n > 4 && strings.HasSuffix(w, "ed"):
		w = w[:n-2]
	case w[n-1] == 's' && w[n-2] != 's' && w[n-2] != 'u' && w[n-2] != 'i':
		w = w[:n-1]
	}
	if len(w) > 3 && w[len(w)-1] == 'e' {
		w = w[:len(w)-1]
	}
	return w
}

// answerPieces lays the picked sentences out as streamed pieces, each
// sentence followed by its citation, stopping after maxWords words when
// maxWords > 0. No sentences yields NotFoundAnswer.
func answerPieces(picked []candidate, maxWords int) []answerPiece {
	var pieces []answerPiece
	words := 0
	full := func() bool { return maxWords > 0 && words >= maxWords }
	if len(picked) == 0 {
		for _, w := range strings.Fields(NotFoundAnswer) {
			if full() {
				break
			}
			pieces = append(pieces, answerPiece{text: w, sep: " ", word: true})
			words++
		}
		return pieces
	}
	for _, c := range picked {
		if full() {
			break
		}
		added := false
		for _, field := range strings.Fields(c.text) {
			for _, p := range splitCJK(field) {
				if full() {
					break
				}
				pieces = append(pieces, p)
				added = true
				if p.word {
					words++
				}
			}
		}
		if added {
			if last := &pieces[len(pieces)-1]; last.sep == "" {
				last.sep = " "
			}
			pieces = append(pieces, answerPiece{text: "[" + strconv.Itoa(c.cite) + "]", sep: " "})
		}
	}
	return pieces
}

// cutAtStop ends the answer pieces lay out (each piece's text, then its
// separator but for the last) before the first of the stop sequences the
// answer holds: as with OpenAI's stop, the sequence is not sent.
func cutAtStop(pieces []answerPiece, stop []string) []answerPiece {
	if len(stop) == 0 {
		return pieces
	}
	var b strings.Builder
	for i, p := range pieces {
		b.WriteString(p.text)
		if i < len(pieces)-1 {
			b.WriteString(p.sep)
		}
	}
	text := b.String()
	cut := len(text)
	for _, s := range stop {
		if i := strings.Index(text, s); i >= 0 && i < cut {
			cut = i
		}
	}
	at := 0
	for i, p := range pieces {
		if cut <= at+len(p.text) {
			if cut == at {
				return pieces[:i]
			}
			pieces[i].text = p.text[:cut-at]
			return pieces[:i+1]
		}
		at += len(p.text)
		if cut <= at+len(p.sep) { // in or right after the separator: what of it precedes the cut ends the answer
			pieces[i].text, pieces[i].sep = p.text+p.sep[:cut-at], ""
			return pieces[:i+1]
		}
		at += len(p.sep)
	}
	return pieces
}

// splitCJK splits a whitespace-free field into streamable pieces: the field
// itself for alphabetic text, one piece per character for CJK text (with
// punctuation kept on the character before it). The last piece is followed
// by a space, the others by nothing.
func splitCJK(field string) []answerPiece {
	if strings.IndexFunc(field, isIdeograph) < 0 {
		return []answerPiece{{text: field, sep: " ", word: hasLetterOrDigit(field)}}
	}
	var (
		out     []answerPiece
		start   = 0
		prevCJK = false
	)
	for i, r := range field {
		cjk := isIdeograph(r)
		wordish := unicode.IsLetter(r) || unicode.IsDigit(r)
		if i > start && (cjk || (wordish && prevCJK)) {
			out = append(out, answerPiece{text: field[start:i], word: hasLetterOrDigit(field[start:i])})
			start = i
		}
		if wordish {
			prevCJK = cjk
		}
	}
	out = append(out, answerPiece{text: field[start:], sep: " ", word: hasLetterOrDigit(field[start:])})
	return out
}

func isIdeograph(r rune) bool {
	return unicode.Is(unicode.Han, r) || unicode.Is(unicode.Hiragana, r) ||
		unicode.Is(unicode.Katakana, r) || unicode.Is(unicode.Hangul, r)
}

func hasLetterOrDigit(s string) bool {
	return strings.IndexFunc(s, func(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) }) >= 0
}
