package lexical

import (
	"strings"
	"sync"

	"github.com/kljensen/snowball/english"
)

// Analyzer is the name of the analyzer Terms applies, as docs and stage
// attrs name it: Words (lower-casing, Unicode letters and digits, one word
// per CJK character), English stop words dropped, then the Snowball
// (Porter2) English stemmer.
const Analyzer = "english-snowball"

// Terms returns the index terms of text under Analyzer, in text order:
// "Configuring the caches" gives "configur", "cach".
func Terms(text string) []string {
	a := getAnalyzer()
	defer putAnalyzer(a)
	out := make([]string, 0, len(text)/8)
	a.Each(text, func(t string) { out = append(out, t) })
	return out
}

// Stem returns the Snowball English stem of w (already normalised by
// Words). Words that are not plain ASCII letters are returned as they are:
// the English stemmer has nothing to say about "42x" or "首".
func Stem(w string) string {
	if len(w) <= 2 || !asciiLetters(w) {
		return w
	}
	stems.mu.RLock()
	s, ok := stems.m[w]
	stems.mu.RUnlock()
	if ok {
		return s
	}
	s = stem(w)
	stems.mu.Lock()
	if len(stems.m) < stemCacheMax {
		stems.m[strings.Clone(w)] = s
	}
	stems.mu.Unlock()
	return s
}

// stemCacheMax bounds the stem cache: a corpus's vocabulary is mostly far
// smaller, and past it words are stemmed each time (some 1 µs a word).
const stemCacheMax = 1 << 18

// stems caches Stem's answers: the stemmer costs a rune slice and several
// passes per word, and a corpus repeats its words endlessly.
var stems = struct {
	mu sync.RWMutex
	m  map[string]string
}{m: make(map[string]string, 1024)}

// stem is Stem without the cache.
func stem(w string) string {
	if len(w) <= 2 || !asciiLetters(w) {
		return w
	}
	s := english.Stem(w, true)
	if s == w {
		s = w // keep one string, not the stemmer's copy
	}
	return s
}

// TermAnalyzer applies Analyzer without allocating per word: words are
// scanned into a reused buffer and looked up in the analyzer's own cache of
// terms (word → stem, or stop word), so a word met before costs one map
// lookup and no string, and concurrent analyzers (one per worker) share no
// lock. It is not safe for concurrent use.
type TermAnalyzer struct {
	sc     WordScanner
	terms  map[string]termEntry
	counts map[string]int
}

type termEntry struct {
	term string
	stop bool
}

// analyzerCacheMax bounds each TermAnalyzer's cache; past it words are
// looked up in Stem's shared cache.
const analyzerCacheMax = 1 << 16

// NewTermAnalyzer returns an analyzer with an empty cache.
func NewTermAnalyzer() *TermAnalyzer {
	return &TermAnalyzer{terms: make(map[string]termEntry, 1024), counts: make(map[string]int, 128)}
}

// term returns the term of a scanned word and whether it is a stop word.
// A word this analyzer has not met is stemmed through Stem's shared cache,
// so an analyzer made when the busy ones are all taken does not stem the
// corpus's vocabulary over again.
func (a *TermAnalyzer) term(w []byte) termEntry {
	if e, ok := a.terms[string(w)]; ok {
		return e
	}
	word := string(w)
	e := termEntry{stop: IsStopword(word)}
	if !e.stop {
		e.term = Stem(word)
	}
	if len(a.terms) < analyzerCacheMax {
		a.terms[word] = e
	}
	return e
}

// Each calls f with each index term of text under Analyzer, in text
// order (the terms of Terms).
func (a *TermAnalyzer) Each(text string, f func(term string)) {
	a.sc.Reset(text)
	for w, ok := a.sc.Next(); ok; w, ok = a.sc.Next() {
		if e := a.term(w); !e.stop {
			f(e.term)
		}
	}
}

// Analyse is Analyse(strings.Join(titles, "\n"), body) on the analyzer's
// cache.
func (a *TermAnalyzer) Analyse(body string, titles ...string) Doc {
	clear(a.counts)
	n := 0
	for _, title := range titles {
		a.sc.Reset(title)
		for w, ok := a.sc.Next(); ok; w, ok = a.sc.Next() {
			if e := a.term(w); !e.stop {
				a.counts[e.term] += TitleBoost
				n += TitleBoost
			}
		}
	}
	a.sc.Reset(body)
	for w, ok := a.sc.Next(); ok; w, ok = a.sc.Next() {
		if e := a.term(w); !e.stop {
			a.counts[e.term]++
			n++
		}
	}
	return newDoc(a.counts, n)
}

// analyzers keeps TermAnalyzers, with their caches, between Analyse
// calls: a stack rather than a sync.Pool, which a garbage collection would
// empty along with the caches, and rather than a queue, which would cycle
// through every analyzer ever made and warm each one's cache on the whole
// vocabulary; the stack hands out the one used last.
var analyzers struct {
	mu    sync.Mutex
	stack []*TermAnalyzer
}

// analyzersKept bounds the analyzers kept: more than the cores that
// analyse at once.
const analyzersKept = 16

func getAnalyzer() *TermAnalyzer {
	analyzers.mu.Lock()
	defer analyzers.mu.Unlock()
	if n := len(analyzers.stack); n > 0 {
		a := analyzers.stack[n-1]
		analyzers.stack = analyzers.stack[:n-1]
		return a
	}
	return NewTermAnalyzer()
}

func putAnalyzer(a *TermAnalyzer) {
	analyzers.mu.Lock()
	defer analyzers.mu.Unlock()
	if len(analyzers.stack) < analyzersKept {
		analyzers.stack = append(analyzers.stack, a)
	}
}

func asciiLetters(w string) bool {
	for i := 0; i < len(w); i++ {
		if c := w[i]; c < 'a' || c > 'z' {
			return false
		}
	}
	return true
}
